"""The REPO argument of ``push`` and ``list``: a Hub repo reference or a local folder, with its type and revision."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from fisherhub.hub.repo_types import DEFAULT_REPO_TYPE, REPO_TYPES

if TYPE_CHECKING:
    from fisherhub.hub.refs import SignatureRef


def add_repo_arguments(parser: argparse.ArgumentParser, revision_help: str, folder: bool = False) -> None:
    """The CLI's REPO argument (``[datasets/|models/|spaces/]org/name[@rev]``, an ``hf://`` URI or web URL, or
    with ``folder`` a local folder), ``--repo-type`` and ``--revision``."""
    where = ", or a local folder (e.g. ./my-adapter)" if folder else ""
    parser.add_argument(
        "repo",
        metavar="REPO",
        help=f"org/name (a model or adapter repo), datasets/org/name, spaces/org/name, hf://... (optionally @revision){where}",
    )
    parser.add_argument(
        "--repo-type",
        choices=REPO_TYPES,
        default=DEFAULT_REPO_TYPE,
        help=f"type of a bare org/name (default: {DEFAULT_REPO_TYPE}, as in hf:// URIs)",
    )
    parser.add_argument("--revision", help=revision_help)


def repo_from_args(args: argparse.Namespace) -> SignatureRef | str:
    """The repo that ``add_repo_arguments``' arguments name, or the local folder."""
    from fisherhub.hub.refs import is_local_folder, repo_ref

    if is_local_folder(args.repo):
        return args.repo
    return repo_ref(args.repo, args.repo_type, args.revision)
