"""``fisherhub pull REF [-o PATH]``: download a signature (validated, byte-identical) from the Hub."""

from __future__ import annotations

import argparse
import os
import shutil

from fisherhub.cli.support.repo_arguments import add_choice_arguments, choice_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "pull",
        help="download a signature from a dataset or adapter repo",
        description=(
            "Download the signature REF names (org/adapter[@rev][:path] — a bare org/name is a model repo —, "
            "datasets/org/name[@rev][:path], hf://[datasets/|spaces/]org/name[@rev]/path or a Hub web URL), "
            "check it, and copy it byte for byte to PATH. Works offline (HF_HUB_OFFLINE=1) for what was fetched before."
        ),
    )
    parser.add_argument("ref", metavar="REF", help="signature reference")
    parser.add_argument("-o", "--output", metavar="PATH", help="file or directory (default: the file's name, here)")
    parser.add_argument("--revision", help="branch, tag or commit (pins what is read)")
    add_choice_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fisherhub.hub import download_signature

    local = download_signature(args.ref, revision=args.revision, **choice_from_args(args))
    output = args.output or os.path.basename(local)
    if os.path.isdir(output):
        output = os.path.join(output, os.path.basename(local))
    shutil.copyfile(local, output)
    print(output)
    return 0
