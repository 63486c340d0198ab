"""References to signatures on the Hub, and the names signature files get there (SPEC §4).

Accepted forms (``path`` is the file inside the repo, ``rev`` a branch, tag, ``refs/pr/N`` or commit id):
``datasets/org/name[@rev][:path]`` (dataset repo), ``[models/]org/name[@rev][:path]`` (model or adapter repo),
and the ``huggingface_hub`` file-system URL ``hf://[datasets/]org/name[@rev][/path]`` (``rev`` URL-quoted).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from fisherhub.core.errors import InputError

if TYPE_CHECKING:
    from fisherhub.core.signature import Signature

SIGNATURE_FOLDER = "fisher_signatures"
REPO_TYPES = ("dataset", "model")
_PREFIXES = {"datasets": "dataset", "models": "model"}
_REPO = r"(?:(datasets|models)/)?([\w.-]+/[\w.-]+)"
_SHORT_FORM = re.compile(_REPO + r"(?:@([^:]+))?(?::(.+))?")
_URL_FORM = re.compile(r"hf://" + _REPO + r"(?:@([^/]+))?(?:/(.+))?")


def check_repo_type(repo_type: str) -> str:
    if repo_type not in REPO_TYPES:
        raise InputError(f"repo_type must be one of {REPO_TYPES} (signatures live in dataset or adapter repos), got {repo_type!r}")
    return repo_type


@dataclasses.dataclass(frozen=True)
class SignatureRef:
    """A repo on the Hub, optionally a revision in it and a signature file's path."""

    repo_id: str
    repo_type: str = "model"
    revision: str | None = None
    path: str | None = None

    @classmethod
    def parse(cls, text: str, default_repo_type: str = "model") -> SignatureRef | None:
        """The reference ``text`` names, or None when it is in none of the accepted forms.
        ``default_repo_type`` applies to a bare ``org/name``."""
        url = text.startswith("hf://")
        match = (_URL_FORM if url else _SHORT_FORM).fullmatch(text.strip())
        if match is None:
            return None
        prefix, repo_id, revision, path = match.groups()
        repo_type = _PREFIXES[prefix] if prefix else check_repo_type(default_repo_type)
        return cls(repo_id, repo_type, unquote(revision) if url and revision else revision, path)

    def at(self, revision: str | None) -> SignatureRef:
        """This reference at ``revision`` (None keeps the one it has); a different one already given is an error."""
        if revision is None or revision == self.revision:
            return self
        if self.revision is not None:
            raise InputError(f"{self} names revision {self.revision!r} but revision={revision!r} was also given; pass one")
        return dataclasses.replace(self, revision=revision)

    def with_path(self, path: str) -> SignatureRef:
        return dataclasses.replace(self, path=path)

    @property
    def repo(self) -> str:
        """``datasets/org/name`` or ``org/name``: the repo part of the short form."""
        return f"datasets/{self.repo_id}" if self.repo_type == "dataset" else self.repo_id

    def short(self) -> str:
        """The short form, e.g. ``datasets/org/name@rev:fisher_signatures/x.safetensors``."""
        return self.repo + (f"@{self.revision}" if self.revision else "") + (f":{self.path}" if self.path else "")

    def __str__(self) -> str:
        """The ``hf://`` URL."""
        revision = f"@{quote(self.revision, safe='')}" if self.revision else ""
        return f"hf://{self.repo}{revision}" + (f"/{self.path}" if self.path else "")


def _slug(text: str) -> str:
    """A file-name-safe form of a Hub id: ``org/name`` -> ``org--name`` (as the cache names repos)."""
    return re.sub(r"[^\w.-]+", "-", text.replace("/", "--")).strip("-")


def signature_path(signature: Signature) -> str:
    """``fisher_signatures/<base model>__<dataset>[-<config>][-<split>]__<sketch id>.safetensors``: one file per
    (base model, dataset config/split, sketch id); the dataset part is left out when the metadata has none."""
    metadata = signature.metadata
    if not metadata.get("base_model"):
        raise InputError(
            "the signature has no base_model in its metadata, so the card cannot say what it describes; "
            "finalize it with metadata={'base_model': '<org/model>', 'dataset': ..., ...}"
        )
    data = "-".join(metadata[key] for key in ("dataset", "dataset_config", "dataset_split") if metadata.get(key))
    parts = [_slug(metadata["base_model"]), *([_slug(data)] if data else []), signature.sketch_id]
    return f"{SIGNATURE_FOLDER}/{'__'.join(parts)}.safetensors"



def add_repo_arguments(parser: argparse.ArgumentParser, revision_help: str) -> None:
    """The CLI's REPO argument (``[datasets/|models/]org/name[@rev]``), ``--repo-type`` and ``--revision``."""
    parser.add_argument("repo", metavar="REPO", help="org/name, datasets/org/name or models/org/name (optionally @revision)")
    parser.add_argument("--repo-type", choices=REPO_TYPES, default="dataset", help="type of a bare org/name (default: dataset)")
    parser.add_argument("--revision", help=revision_help)


def repo_from_args(args: argparse.Namespace) -> SignatureRef:
    """The repo that ``add_repo_arguments``' arguments name."""
    repo = SignatureRef.parse(args.repo, args.repo_type)
    if repo is None or repo.path is not None:
        raise InputError(f"{args.repo!r} is not a repo reference: use org/name, datasets/org/name or models/org/name, optionally @revision")
    return repo.at(args.revision)
