"""``fisherhub verify REF``: re-sketch the data a signature names and say whether its sketches are reproduced."""

from __future__ import annotations

import argparse

from fisherhub.cli.support.repo_arguments import add_choice_arguments, choice_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    from fisherhub.verify import VERIFY_TOLERANCE

    parser = subparsers.add_parser(
        "verify",
        help="re-sketch a signature's dataset and check that its sketches are reproduced",
        description=(
            "Load the signature REF names (a local file or a Hub reference, as for `fisherhub pull`), re-sketch the "
            "Hub dataset its metadata names at the recorded dataset commit, under the recorded base model commit and "
            "the signature's own spec, and compare the sketch vectors: reproduced when every relative difference is "
            "within the tolerance and the document and token counts are equal. Exit 0 when reproduced, 1 when not "
            "(or when the data is private or local: unverifiable)."
        ),
    )
    parser.add_argument("ref", metavar="REF", help="signature reference")
    parser.add_argument("--revision", help="branch, tag or commit of REF's repo")
    add_choice_arguments(parser)
    parser.add_argument(
        "--tolerance",
        type=float,
        default=VERIFY_TOLERANCE,
        help=f"largest relative difference of a sketch vector or split norm (default: {VERIFY_TOLERANCE:g})",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fisherhub.hub import load_signature
    from fisherhub.verify import verify_signature

    signature = load_signature(args.ref, revision=args.revision, **choice_from_args(args))
    verification = verify_signature(signature, tolerance=args.tolerance)
    print(f"{args.ref}: {verification.describe()}")
    for name, value in verification.differences.items():
        print(f"  {name:<24} {value:.2e}")
    return 0 if verification.reproduced else 1
