"""References to signatures on the Hub, and the names signature files get there (SPEC §4).

Accepted forms (``path`` is the file inside the repo, ``rev`` a branch, tag, ``refs/pr/N`` or commit id):

- ``hf://[datasets/|spaces/|models/]org/name[@rev][/path]`` and the Hub's web URLs
  (``https://huggingface.co/datasets/org/name/blob/main/path``), read by ``huggingface_hub.parse_hf_uri``;
- the short form ``[datasets/|spaces/|models/]org/name[@rev][:path]``.

A bare ``org/name`` is a model (adapter) repo in every command and function, as in ``hf://`` URIs and
``huggingface_hub``; dataset repos take the ``datasets/`` prefix (or ``--repo-type dataset``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from typing import TYPE_CHECKING, Literal, cast, overload

from huggingface_hub import HfUri, constants, parse_hf_uri
from huggingface_hub.errors import HfUriError

from fisherhub.core.errors import InputError
from fisherhub.hub.repo_types import DEFAULT_REPO_TYPE, PUSH_REPO_TYPES, REPO_TYPES  # noqa: F401  (PUSH_REPO_TYPES: for push)

if TYPE_CHECKING:
    from fisherhub.core.signature import Signature

SIGNATURE_FOLDER = ".fisher_signatures"
#: where fisherhub 0.2.0 and fishersketch 0.1.0 put signatures: read, never written (``datasets`` and the Hub's
#: dataset viewer take the files of a visible folder for data)
LEGACY_SIGNATURE_FOLDER = "fisher_signatures"
#: the folders signatures are read from, in this order (a path in the first wins over the same name later)
SIGNATURE_FOLDERS = (SIGNATURE_FOLDER, LEGACY_SIGNATURE_FOLDER)
ADAPTER_CONFIG = "adapter_config.json"  # what makes a folder or repo a PEFT adapter
#: the largest ``adapter_config.json`` read: a LoRA config is ~2 kB; a ``rank_pattern`` naming every module of a
#: 70B model ~50 kB
MAX_ADAPTER_CONFIG_BYTES = 2**20
_PREFIXES: dict[str, str] = {
    prefix: kind for prefix, kind in constants.HF_URI_TYPE_PREFIXES.items() if kind in REPO_TYPES
}
_TYPE_PREFIX: dict[str, str] = {kind: prefix for prefix, kind in _PREFIXES.items()}
_SHORT_FORM = re.compile(r"(?:(" + "|".join(_PREFIXES) + r")/)?([^/@:]+/[^/@:]+)(?:@([^:]+))?(?::(.*))?")


def hf_uri(repo_type: str, repo_id: str, revision: str | None = None, path: str = "") -> HfUri:
    """The client's ``HfUri`` of a repo whose type is one of ``REPO_TYPES`` (types the client names too)."""
    return HfUri(cast(Literal["model", "dataset", "space"], repo_type), repo_id, revision, path)


def check_repo_type(repo_type: str, allowed: tuple[str, ...] = REPO_TYPES) -> str:
    if repo_type not in allowed:
        raise InputError(
            f"repo_type must be one of {allowed} (signatures live in dataset or adapter repos), got {repo_type!r}"
        )
    return repo_type


@overload
def check_path(path: str, where: str) -> str: ...
@overload
def check_path(path: None, where: str) -> None: ...
def check_path(path: str | None, where: str) -> str | None:
    """``path`` inside a repo, refused when it could leave the repo (``..``, ``.``, absolute, empty segments)."""
    if path is None:
        return None
    if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
        raise InputError(
            f"{where}: the path {path!r} inside the repo must be relative, without '..', '.' or empty segments "
            "(e.g. .fisher_signatures/<name>.safetensors)"
        )
    return path


def is_signature_file(path: str, folders: tuple[str, ...] = SIGNATURE_FOLDERS) -> bool:
    """Whether ``path`` (from the repo or folder root) is a ``.safetensors`` file under one of ``folders``."""
    return path.endswith(".safetensors") and any(path.startswith(f"{folder}/") for folder in folders)


def is_local_path_only(text: str) -> bool:
    """Whether ``text`` can only name a local path: it starts with ``/`` or ``~``, or the repo part of a short
    reference (before ``:path``) has a ``.`` or ``..`` part (a Hub repo id has neither). ``hf://`` URIs and web
    URLs are left to their parser, and a path inside a repo to ``check_path``."""
    if text.startswith(("/", "~")):
        return True
    if "://" in text:
        return False
    return bool({".", ".."} & set(re.split(r"[/\\]", text.split(":", 1)[0])))


def is_signature_reference(text: str) -> bool:
    """Whether ``text`` names signatures (for ``load_signature``) rather than a dataset to sketch: an existing
    ``.safetensors`` file, or a Hub signature reference (``hf://``, ``datasets/...``, ``...:path``); any other
    string (a Hub id, a folder, a data file) names a dataset."""
    if os.path.exists(text):
        return os.path.isfile(text) and text.endswith(".safetensors")
    return text.startswith(("hf://", "datasets/")) or ":" in text


def is_local_folder(text: str | os.PathLike) -> bool:
    """Whether ``text`` names an existing local folder (it then wins over a repo id of the same spelling,
    as in ``from_pretrained``)."""
    return os.path.isdir(os.fspath(text))


@dataclasses.dataclass(frozen=True)
class SignatureRef:
    """A repo on the Hub, optionally a revision in it and a signature file's path."""

    repo_id: str
    repo_type: str = DEFAULT_REPO_TYPE
    revision: str | None = None
    path: str | None = None

    @classmethod
    def parse(cls, text: str, default_repo_type: str | None = None) -> SignatureRef | None:
        """The reference ``text`` names, or None when it is in none of the accepted forms. An ``hf://`` URI or
        web URL that ``huggingface_hub`` cannot read, a bucket or kernel, or a path with ``..`` raises
        ``InputError`` saying why. ``default_repo_type`` (default: model) applies to a bare ``org/name``."""
        text = text.strip()
        if text.startswith(constants.HF_PROTOCOL) or re.match(r"(?i)https?://", text):
            try:
                uri = parse_hf_uri(text, endpoint=constants.ENDPOINT)
            except HfUriError as exc:
                raise InputError(f"{text}: not a signature reference ({exc})") from exc
            if uri.type not in REPO_TYPES:
                raise InputError(f"{text}: signatures live in model, dataset or space repos, not in a {uri.type}")
            return cls(uri.id, uri.type, uri.revision, check_path(uri.path_in_repo or None, text))
        match = _SHORT_FORM.fullmatch(text)
        if match is None:
            return None
        prefix, repo_id, revision, path = match.groups()
        repo_type = _PREFIXES[prefix] if prefix else check_repo_type(default_repo_type or DEFAULT_REPO_TYPE)
        try:
            hf_uri(repo_type, repo_id, revision)  # the client's own checks of the id and revision
        except HfUriError:
            return None
        return cls(repo_id, repo_type, revision, check_path(path, text) if path is not None else None)

    def at(self, revision: str | None) -> SignatureRef:
        """This reference at ``revision`` (None keeps the one it has); a different one already given is an error."""
        if revision is None or revision == self.revision:
            return self
        if self.revision is not None:
            raise InputError(
                f"{self} names revision {self.revision!r} but revision={revision!r} was also given; pass one"
            )
        return dataclasses.replace(self, revision=revision)

    @property
    def file(self) -> str:
        """The path of the file this reference names; ``InputError`` for a reference to a whole repo."""
        if self.path is None:
            raise InputError(f"{self} names a repo, not a file in it")
        return self.path

    def with_path(self, path: str) -> SignatureRef:
        return dataclasses.replace(self, path=check_path(path, str(self)))

    @property
    def repo(self) -> str:
        """``datasets/org/name``, ``spaces/org/name`` or ``org/name``: the repo part of the short form."""
        return f"{_TYPE_PREFIX[self.repo_type]}/{self.repo_id}" if self.repo_type != "model" else self.repo_id

    def short(self) -> str:
        """The short form, e.g. ``datasets/org/name@rev:.fisher_signatures/x.safetensors``."""
        return self.repo + (f"@{self.revision}" if self.revision else "") + (f":{self.path}" if self.path else "")

    def __str__(self) -> str:
        """The ``hf://`` URI (``huggingface_hub``'s canonical form)."""
        return hf_uri(self.repo_type, self.repo_id, self.revision, self.path or "").to_uri()


def _slug(text: str) -> str:
    """A file-name-safe form of a Hub id: ``org/name`` -> ``org--name`` (as the cache names repos)."""
    return re.sub(r"[^\w.-]+", "-", text.replace("/", "--")).strip("-.") or "unnamed"


def signature_path(signature: Signature) -> str:
    """``.fisher_signatures/<base model>__<dataset>[-<config>][-<split>]__<sketch id>.safetensors``: one file per
    (base model, dataset config/split, sketch id), so a re-sketch of the same data replaces its file. A
    signature that names no dataset (a list of texts, an in-memory dataset) is named
    ``<base model>__texts-<content digest>[-<config>][-<split>]__<sketch id>``: two different ones never share a file. Name the signature with ``published`` first, so that no local
    path goes into the name. The folder is hidden, so ``datasets`` never reads what is in it as data (its
    data-file patterns skip hidden folders) whatever the names say (``train``, ``test``, ...)."""
    metadata = signature.metadata
    if not metadata.get("base_model"):
        raise InputError(
            "the signature has no base_model in its metadata, so the card cannot say what it describes; "
            "finalize it with metadata={'base_model': '<org/model>', 'dataset': ..., ...}"
        )
    data = "-".join(metadata[key] for key in ("dataset", "dataset_config", "dataset_split") if metadata.get(key))
    if (metadata.get("dataset") or "<>").startswith("<"):  # none, or a placeholder such as "<in-memory dataset>"
        digest = hashlib.sha256(b"".join(t.numpy().tobytes() for t in (signature.joint, signature.split_norms)))
        data = "-".join(
            [
                "texts",
                digest.hexdigest()[:12],
                *(metadata[key] for key in ("dataset_config", "dataset_split") if metadata.get(key)),
            ]
        )
    parts = [_slug(metadata["base_model"]), _slug(data), signature.sketch_id]
    return f"{SIGNATURE_FOLDER}/{'__'.join(parts)}.safetensors"


def index_ref(name: str) -> SignatureRef:
    """The signature index ``name`` names (``fisherhub index``): ``datasets/org/name[@rev]`` or
    ``org/name[@rev]`` (an index is always a dataset repo)."""
    ref = SignatureRef.parse(name if name.startswith(("datasets/", "hf://")) else f"datasets/{name}")
    if ref is None or ref.repo_type != "dataset" or ref.path is not None:
        raise InputError(
            f"{name!r}: an index is a dataset repo, named datasets/org/name[@revision] or org/name[@revision]"
        )
    return ref


def repo_ref(text: str, repo_type: str | None = None, revision: str | None = None) -> SignatureRef:
    """The repo ``text`` names (no file path), at ``revision`` when given; ``repo_type`` is that of a bare
    ``org/name`` (default: model)."""
    ref = SignatureRef.parse(text, check_repo_type(repo_type) if repo_type else None)
    if ref is None or ref.path is not None:
        raise InputError(
            f"{text!r} is not a repo reference: use org/name (a model or adapter repo), datasets/org/name, "
            "spaces/org/name or an hf:// URI, optionally @revision; a local folder must exist"
        )
    return ref.at(revision)
