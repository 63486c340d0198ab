"""The Hub arguments commands share: the REPO argument of ``push`` and ``list`` (a Hub repo reference or a local
folder, with its type and revision) and ``--token``."""

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


#: the flags that choose one of a repo's signatures, and what each chooses by
CHOICE_HELP = {
    "base_model": "base model",
    "sketch_id": "sketch id",
    "dataset": "dataset it was sketched from (as `fisherhub list` shows it)",
    "dataset_config": "dataset config",
    "dataset_split": "dataset split",
}


def add_choice_arguments(parser: argparse.ArgumentParser) -> None:
    """``--base-model``, ``--sketch-id``, ``--dataset``, ``--dataset-config``, ``--dataset-split``: choose among a
    repo's signatures (``load_signature``'s keywords of the same names)."""
    for key, what in CHOICE_HELP.items():
        parser.add_argument(
            f"--{key.replace('_', '-')}", dest=key, help=f"choose among the repo's signatures by {what}"
        )


def choice_from_args(args: argparse.Namespace) -> dict[str, str | None]:
    """The keywords of ``load_signature`` that ``add_choice_arguments``' flags give."""
    return {key: getattr(args, key) for key in CHOICE_HELP}


def add_token_argument(parser: argparse.ArgumentParser, purpose: str = "") -> None:
    """``--token``: the Hub token a command uses (default: the one ``huggingface_hub`` finds)."""
    parser.add_argument(
        "--token", default=None, help=f"Hub token{purpose} (default: HF_TOKEN or the one `hf auth login` saved)"
    )
