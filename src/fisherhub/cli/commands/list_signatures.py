"""``fisherhub list REPO``: the signatures a dataset or adapter repo carries."""

from __future__ import annotations

import argparse

from fisherhub.cli.support.repo_arguments import add_repo_arguments, repo_from_args

COLUMNS = ("path", "base model", "sketch id", "dataset", "tokens", "listed", "problem")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "list",
        help="list the signatures of a dataset or adapter repo",
        description=(
            "List the signature files of REPO (a Hub repo or a local folder; read from their headers) and whether "
            "its .fisher_signatures/index.json (or card) lists them. Offline (HF_HUB_OFFLINE=1) from the cache."
        ),
    )
    add_repo_arguments(parser, revision_help="branch, tag or commit (default: the repo's default branch)", folder=True)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fisherhub.hub import list_signatures

    repo = repo_from_args(args)
    infos = list_signatures(repo)
    if isinstance(repo, str):
        where = repo
    else:
        where = f"{repo.repo}@{infos[0].ref.revision[:7] if infos else repo.revision or 'main'}"
    print(f"{where}: {len(infos)} signature file{'s' if len(infos) != 1 else ''}")
    rows = [
        (
            i.path,
            i.base_model or "",
            i.sketch_id or "",
            i.dataset or "",
            str(i.num_tokens or ""),
            "yes" if i.listed else "no",
            i.problem or "",
        )
        for i in infos
    ]
    widths = [max(len(row[c]) for row in [COLUMNS, *rows]) for c in range(len(COLUMNS))]
    for row in [COLUMNS, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0
