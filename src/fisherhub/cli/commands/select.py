"""``fisherhub select TARGET [CANDIDATES...]``: rank LoRA adapters for a target by Fisher alignment.

TARGET is a signature (file or Hub reference: ``datasets/org/name[:path]``, ``org/adapter:path``, ``hf://...``)
or a dataset to sketch under the base model (Hub id, folder or data file). CANDIDATES are adapter repo ids,
local adapter folders, ``datasets/org/name`` repos with signatures or signature files; none: the adapters of --base-model
that the Hub lists.
"""

from __future__ import annotations

import argparse
import sys

from fisherhub.cli.support.arguments import HelpFormatter, add_arguments
from fisherhub.cli.support.repo_arguments import add_token_argument
from fisherhub.core.geometry import DEFAULT_SCORE, SCORES
from fisherhub.core.registry import DEFAULT_RERANK_BUDGET, HALVING, HALVING_SHORTLIST
from fisherhub.extras import require
from fisherhub.options import DataOptions


def rerank_choice(value: str) -> int | str:
    """--rerank's value: a number of adapters, or the budgeted second stage's name."""
    if value == HALVING:
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of adapters (0: none) or {HALVING}, not {value!r}") from None


def _add_second_stage_arguments(parser: argparse.ArgumentParser) -> None:
    """--rerank and its bound, --plot, --verify: what happens to the ranking after the signatures."""
    parser.add_argument(
        "--rerank",
        type=rerank_choice,
        default=None,
        metavar="K|halving",
        help="second stage for a dataset TARGET: load the first K adapters of the S_a and S_e rankings "
        "one at a time and re-rank them by the target's measured loss (0: signatures only); or "
        f"{HALVING}: the first {HALVING_SHORTLIST} of them measured by successive halving over the target's "
        f"documents within --rerank-budget passes (the default for a dataset TARGET with adapter candidates; a "
        "signature TARGET is ranked by signatures only)",
    )
    parser.add_argument(
        "--rerank-budget",
        type=int,
        default=None,
        metavar="B",
        help=f"with --rerank {HALVING}: full passes over the target's documents, the base model's included "
        f"(default {DEFAULT_RERANK_BUDGET}, the cost of --rerank {DEFAULT_RERANK_BUDGET - 1} without the shared "
        "layers; at least 2); an adapter on the upper layers only counts its share of a pass",
    )
    parser.add_argument(
        "--max-adapter-mb",
        type=int,
        default=None,
        metavar="MB",
        help="largest adapter weights file --rerank loads, in MB (default: the base model's parameters at 4 "
        "bytes each; a larger adapter is skipped, saying so)",
    )
    parser.add_argument("--plot", default=None, metavar="PNG", help="write a bar chart of the scores with error bars")
    parser.add_argument(
        "--verify",
        type=int,
        default=0,
        metavar="K",
        help="re-sketch the K best candidates' data (fisherhub verify) before showing the ranking: a "
        "signature that is not reproduced is marked and ranked last",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "select",
        help="rank candidate LoRA adapters for a target dataset by Fisher alignment",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("target", metavar="TARGET", help="signature file or Hub reference, or a dataset to sketch")
    parser.add_argument(
        "candidates", metavar="CANDIDATES", nargs="*", help="adapter repos or folders, dataset repos, signature files"
    )
    parser.add_argument("--base-model", default=None, help="base model id (discovery, filtering, and to sketch TARGET)")
    parser.add_argument(
        "--score",
        default=DEFAULT_SCORE,
        choices=SCORES,
        help="auto (default) ranks by whichever of A, S_a and S_e tells these candidates apart, and the line "
        "under the table says which and why (the verdict: how far to trust the pick); or rank by A (fisher), "
        "S_a or S_e only",
    )
    parser.add_argument(
        "--index",
        default=None,
        metavar="ORG/NAME",
        help="rank every row of this signature index (`fisherhub index build`) instead of CANDIDATES: one "
        "download, then the --shortlist best ranked from their own files",
    )
    parser.add_argument(
        "--shortlist", type=int, default=None, help="rows of --index ranked again from their files (default 20)"
    )
    parser.add_argument("--top-k", type=int, default=None, help="show the k best candidates only")
    parser.add_argument(
        "--wide",
        action="store_true",
        help="one line per candidate with every column (signature source and provenance too), however wide; "
        "default: the table fits the terminal (100 columns when unknown), those two below it",
    )
    _add_second_stage_arguments(parser)
    add_token_argument(parser, " for private or gated adapters")
    add_arguments(
        parser.add_argument_group("a dataset TARGET"), DataOptions, only=("split", "text_column", "max_documents")
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fisherhub.core.errors import InputError
    from fisherhub.options import check_positive
    from fisherhub.selection import SketchOptions, select_adapter
    from fisherhub.selection.report import below_table, fill, short_commits, table_width

    check_positive(args, ("max_adapter_mb",), optional=True)
    data = DataOptions(args.target, split=args.split, text_column=args.text_column, max_documents=args.max_documents)
    selection = select_adapter(
        args.target,
        args.candidates or None,
        base_model=args.base_model,
        score=args.score,
        sketch=SketchOptions(data=data),
        token=args.token,
        index=args.index,
        rerank=args.rerank,
        rerank_budget=args.rerank_budget,
        max_adapter_bytes=None if args.max_adapter_mb is None else args.max_adapter_mb * 2**20,
        **({"shortlist": args.shortlist} if args.shortlist is not None else {}),
    )
    if args.verify:
        selection.verify(top_k=args.verify)
    if sys.stdout.isatty():
        require("rich")
        from fisherhub.safe_text import console

        console().print(selection.rich_table(limit=args.top_k, wide=args.wide, caption=False))
        print(below_table(selection, args.top_k, wide=args.wide))
    else:
        print(selection.table(limit=args.top_k, wide=args.wide))
    best = selection.best
    if best.implausible:
        raise InputError(
            f"no candidate is to be trusted: each fails a bounded-claims check (marked ! above), the first "
            f"{best.candidate}: {best.doubt}"
        )
    measured = (
        [] if selection.rerank is None else [m for m in selection.rerank.measured if m.candidate == best.candidate]
    )
    loss = "".join(f"target loss {m.loss:.4f} ± {m.stderr:.4f}, " for m in measured)
    noise = " ! (noise: its split norms are not resolved, see above)" if best.doubt else ""
    source = best.signature_source if args.wide else short_commits(best.signature_source)
    line = (
        f"best: {best.candidate} ({loss}{selection.score} {best.score:.3f} ± {best.stderr:.3f}), from {source}{noise}"
    )
    print(line if args.wide else "\n".join(fill(line, table_width())))
    if args.plot:
        print(f"wrote {selection.plot(args.plot, limit=args.top_k)}")
    return 0
