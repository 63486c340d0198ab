"""``fisherhub first-hour BASE_MODEL --target DATA --index ORG/NAME [--push]``: from a base model's id alone to its
adapters ranked for a target, in stages, each with its progress bar (off under ``HF_HUB_DISABLE_PROGRESS_BARS``):

1. discover: every adapter of BASE_MODEL the Hub lists, sorted into signed, naming datasets in their card, and
   neither;
2. index: build the index ORG/NAME (or update it when it exists);
3. sign from cards: sketch the datasets unsigned adapters' cards name (``fisherhub index sign``);
4. sign from generations: sign every unsigned adapter still without a row from its own samples (a fallback,
   marked so; ``fisherhub index sign --from-generations``);
5. rank: ``select_adapter(TARGET, index=ORG/NAME)``, the shortlist measured on the target (``--rerank``: halving by
   default, K on every document, 0 for none).

Stages 2 to 4 write to the index repo: without ``--push`` nothing is written anywhere, they say what they would
do, and the ranking reads the index as it is (or, when there is none, the signed adapters themselves). Nothing is
ever written to the adapters' or datasets' repos. A summary of what was skipped, and why, ends the run; the JSON
report (``--report``) holds every stage's outcome.
"""

from __future__ import annotations

import argparse

from fisherhub.cli.commands.select import rerank_choice
from fisherhub.cli.support.arguments import HelpFormatter
from fisherhub.cli.support.repo_arguments import add_token_argument
from fisherhub.core.registry import DEFAULT_RERANK_BUDGET, HALVING, HALVING_SHORTLIST


def register(subparsers: argparse._SubParsersAction) -> None:
    from fisherhub.cli.support.arguments import add_arguments
    from fisherhub.options import GenerationOptions

    parser = subparsers.add_parser(
        "first-hour",
        help="discover a base model's adapters, sign the unsigned, index them and rank them for a target",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("base_model", metavar="BASE_MODEL", help="the base model whose adapters are ranked")
    parser.add_argument("--target", required=True, metavar="DATA", help="the target dataset (Hub id, folder, file)")
    parser.add_argument("--index", required=True, metavar="ORG/NAME", help="the index dataset repo (yours)")
    parser.add_argument("--push", action="store_true", help="build or update the index and add signed rows to it")
    parser.add_argument("--private", action="store_true", help="create the index repo private")
    parser.add_argument("--model", default=None, help="where the base model loads from (default: BASE_MODEL)")
    parser.add_argument("--max-documents", type=int, default=None, help="documents sketched per card dataset")
    parser.add_argument(
        "--rerank",
        type=rerank_choice,
        default=None,
        metavar="K|halving",
        help=f"adapters measured on the target: the first K on every document (0: none), or {HALVING} (the "
        f"default): the first {HALVING_SHORTLIST} by successive halving within {DEFAULT_RERANK_BUDGET} passes",
    )
    parser.add_argument("--report", default="first-hour-report.json", metavar="JSON", help="where the report goes")
    parser.add_argument("--work", default=None, metavar="DIR", help="work folder (default under ~/.cache/fisherhub)")
    add_token_argument(parser)
    add_arguments(parser.add_argument_group("signing from generations"), GenerationOptions)
    parser.set_defaults(func=run)


def _discover(base_model: str, token: str | None) -> dict[str, list[str]]:
    """The listed adapters of ``base_model``, sorted: signed, naming datasets in their card, neither."""
    from huggingface_hub.utils import tqdm

    from fisherhub.hub.listing import LISTING_PATH
    from fisherhub.hub.signature_index.build import listed_adapters

    kinds: dict[str, list[str]] = {"signed": [], "naming datasets": [], "neither": []}
    for snapshot in tqdm(listed_adapters(base_model, token), desc="discovering adapters", unit="adapter"):
        if snapshot.signature_files or LISTING_PATH in snapshot.files:
            kinds["signed"].append(snapshot.ref.repo_id)
        elif (snapshot.card_data or {}).get("datasets"):
            kinds["naming datasets"].append(snapshot.ref.repo_id)
        else:
            kinds["neither"].append(snapshot.ref.repo_id)
    return kinds


def _index_exists(index: str, token: str | None) -> bool:
    from fisherhub.hub.errors import RepoNotFoundError
    from fisherhub.hub.signature_index.store import load_index

    try:
        load_index(index, token)
    except RepoNotFoundError:
        return False
    return True


def _build_or_update(args: argparse.Namespace, exists: bool) -> dict:
    """Stage 2 (with ``--push``): the index updated when it exists, else built; its summary and skipped repos."""
    from fisherhub.hub.signature_index.build import build_index
    from fisherhub.hub.signature_index.update import update_index

    if exists:
        commit, summary, read = update_index(args.index, work=args.work, token=args.token)
        return {"action": "updated", "commit": commit, "read": read, "lines": summary.lines()}
    commit, summary = build_index(
        args.base_model, args.index, work=args.work, token=args.token, private=args.private, progress=True
    )
    return {"action": "built", "commit": commit, "lines": summary.lines()}


def _sign(args: argparse.Namespace, generation, model, tokenizer) -> tuple[dict, dict]:
    """Stages 3 and 4 (with ``--push``): the reports of signing from the cards' datasets, then from generations."""
    from fisherhub.generation_signing import sign_from_generations
    from fisherhub.pipeline.index_signing import sign_unsigned

    cards = sign_unsigned(
        args.base_model,
        args.index,
        model=model,
        tokenizer=tokenizer,
        max_documents=args.max_documents,
        work=args.work,
        token=args.token,
        progress=True,
    )
    generated = sign_from_generations(
        args.base_model,
        args.index,
        model=model,
        tokenizer=tokenizer,
        options=generation,
        work=args.work,
        token=args.token,
        progress=True,
    )
    if cards is None or generated is None:
        raise RuntimeError("first-hour runs in one process: launch `fisherhub index sign` to split the signing")
    return cards.as_dict() | {"lines": cards.lines()}, generated.as_dict() | {"lines": generated.lines()}


def _rank(args: argparse.Namespace, indexed: bool, model, tokenizer):
    """Stage 5: the target ranked from the index (or, without one, from the signed adapters the Hub lists)."""
    from fisherhub.selection import select_adapter

    return select_adapter(
        args.target,
        base_model=args.base_model,
        model=model,
        tokenizer=tokenizer,
        token=args.token,
        index=args.index if indexed else None,
        rerank=args.rerank,
    )


def run(args: argparse.Namespace) -> int:
    import json

    from fisherhub.cli.support.arguments import from_namespace
    from fisherhub.lm.loading import load_model_and_tokenizer
    from fisherhub.options import GenerationOptions, check_positive

    check_positive(args, ("max_documents",), optional=True)
    generation = from_namespace(GenerationOptions, args)
    report: dict = {"base_model": args.base_model, "index": args.index, "pushed": args.push}
    report["discovered"] = _discover(args.base_model, args.token)
    print("discovered: " + ", ".join(f"{len(repos)} {kind}" for kind, repos in report["discovered"].items()))
    exists = _index_exists(args.index, args.token)
    model, tokenizer = load_model_and_tokenizer(args.model or args.base_model)
    if args.push:
        report["index_stage"] = _build_or_update(args, exists)
        report["cards"], report["generations"] = _sign(args, generation, model, tokenizer)
        for stage in ("index_stage", "cards", "generations"):
            print("\n".join(report[stage]["lines"]))
    else:
        unsigned = len(report["discovered"]["naming datasets"]) + len(report["discovered"]["neither"])
        print(
            f"without --push nothing is written: the index {args.index} would be {'updated' if exists else 'built'}, "
            f"and {unsigned} unsigned adapters signed from their cards' datasets or their generations"
        )
    selection = _rank(args, exists or args.push, model, tokenizer)
    print(selection.table())
    report["ranking"] = [{"candidate": row.candidate, "provenance": row.provenance} for row in selection.ranking]
    report["skipped"] = _skipped(report, selection)
    if report["skipped"]:
        print("\n".join(["skipped, and why:", *(f"  {name}: {why}" for name, why in report["skipped"])]))
    with open(args.report, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
    print(f"best: {selection.best.candidate}; wrote {args.report}")
    return 0


def _skipped(report: dict, selection) -> list[tuple[str, str]]:
    """Every skip of every stage, as (what, why): datasets of the cards, adapters of the generations, and the
    candidates the ranking left out."""
    skipped = [
        (f"dataset {d['dataset']}", d["reason"]) for d in report.get("cards", {}).get("datasets", []) if d["reason"]
    ]
    skipped += [(a["adapter"], a["reason"]) for a in report.get("generations", {}).get("adapters", []) if a["reason"]]
    return skipped + [(s.candidate, s.reason) for s in selection.skipped]
