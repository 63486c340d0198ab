"""``fisherhub pull REF [-o PATH]``: download a signature (validated, byte-identical) from the Hub."""

from __future__ import annotations

import argparse
import os
import shutil


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
    parser.add_argument("--base-model", help="choose among the repo's signatures by base model")
    parser.add_argument("--sketch-id", help="choose among the repo's signatures by sketch id")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fisherhub.hub import download_signature

    local = download_signature(args.ref, revision=args.revision, base_model=args.base_model, sketch_id=args.sketch_id)
    output = args.output or os.path.basename(local)
    if os.path.isdir(output):
        output = os.path.join(output, os.path.basename(local))
    shutil.copyfile(local, output)
    print(output)
    return 0
