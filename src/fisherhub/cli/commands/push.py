"""``fisherhub push SIG REPO``: add a signature file to the dataset or adapter repo it describes."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from fisherhub.cli.support.repo_arguments import add_repo_arguments, repo_from_args

if TYPE_CHECKING:
    from fisherhub.hub.push import PushResult


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "push",
        help="push a signature to the dataset or adapter repo it describes (file + card, one commit)",
        description=(
            "Add SIG under .fisher_signatures/ of REPO (a Hub repo, or a local folder such as an adapter's "
            "output_dir) and list it in .fisher_signatures/index.json and the card, in one commit."
        ),
    )
    parser.add_argument("signature", metavar="SIG", help="signature file (.safetensors)")
    add_repo_arguments(parser, revision_help="branch to commit to (default: the repo's default branch)", folder=True)
    parser.add_argument("--create-pr", action="store_true", help="open a pull request (for repos you cannot write to)")
    parser.add_argument("--create-repo", action="store_true", help="create the repo when it does not exist")
    parser.add_argument("--message", help="commit message")
    parser.add_argument(
        "--index",
        default=None,
        metavar="datasets/ORG/NAME",
        help="the signature index the repo is in (`fisherhub index`): the card links to it",
    )
    parser.add_argument("--repair-card", action="store_true", help="rewrite a malformed card header (the body is kept)")
    parser.add_argument(
        "--force",
        action="store_true",
        help="push into an adapter a signature sketched under another base model than the adapter's (refused "
        "otherwise, naming both)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fisherhub.core.errors import InputError
    from fisherhub.core.signature import Signature
    from fisherhub.hub import push_signature
    from fisherhub.hub.refs import index_ref

    if args.index is not None:
        try:
            index_ref(args.index)
        except InputError as exc:
            raise InputError(f"--index {exc}") from exc
    repo = repo_from_args(args)
    result = push_signature(
        Signature.load(args.signature),
        repo,
        create_pr=args.create_pr,
        commit_message=args.message,
        repair_card=args.repair_card,
        create_repo=args.create_repo,
        index=args.index,
        force=args.force,
    )
    print("\n".join(outcome(result)))
    return 0


def outcome(result: PushResult) -> list[str]:
    """What a push did, for people: where the signature is, the commit or pull request, and each older file it
    replaced, with why."""
    if not result.committed:
        lines = [f"{result.location}: already there, nothing to commit"]
    elif result.ref is None:
        lines = [f"wrote {result.location}"]
    else:
        lines = [f"pushed {result.location}", str(result.pr_url or result.commit_url)]
    return lines + replacements(result)


def replacements(result: PushResult) -> list[str]:
    """One line per older file the push replaced, with why."""
    return [f"replaced {path}: {why}" for path, why in result.replaced.items()]
