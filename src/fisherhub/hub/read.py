"""List the signatures of a repo (card + file list + safetensors headers) and load one by reference."""

from __future__ import annotations

import dataclasses
import logging
import os

from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import SafetensorsParsingError

from fisherhub.core.signature import Signature
from fisherhub.core.spec import FORMAT_VERSION
from fisherhub.core.errors import InputError, SignatureFileError
from fisherhub.hub.cards import (
    download_card,
    entry_matches,
    read_card,
    signature_entries,
)
from fisherhub.hub.errors import (
    AmbiguousSignatureError,
    CardError,
    SignatureNotFoundError,
    hub_errors,
)
from fisherhub.hub.refs import SIGNATURE_FOLDER, SignatureRef, check_repo_type

logger = logging.getLogger(__name__)

REFERENCE_FORMS = "a local file, datasets/org/name[@rev][:path], org/adapter[@rev][:path] or hf://[datasets/]org/name[@rev]/path"


@dataclasses.dataclass(frozen=True)
class SignatureInfo:
    """A signature file of a repo: its safetensors ``__metadata__`` (read from the header only), whether the
    card lists it, and ``problem`` (why it cannot be loaded) or None."""

    ref: SignatureRef
    listed_in_card: bool
    metadata: dict[str, str]
    size: int | None = None
    problem: str | None = None

    @property
    def path(self) -> str:
        return self.ref.path or ""

    @property
    def sketch_id(self) -> str | None:
        return self.metadata.get("sketch_id")

    @property
    def base_model(self) -> str | None:
        return self.metadata.get("base_model")

    @property
    def dataset(self) -> str | None:
        return self.metadata.get("dataset")

    @property
    def num_tokens(self) -> int | None:
        return int(self.metadata["num_tokens"]) if "num_tokens" in self.metadata else None

    @property
    def num_documents(self) -> int | None:
        return int(self.metadata["num_documents"]) if "num_documents" in self.metadata else None


def _header_problem(metadata: dict[str, str]) -> str | None:
    if metadata.get("kind") != "fishersketch-signature":
        return "not a fisherhub signature"
    if metadata.get("format_version") != str(FORMAT_VERSION):
        return f"format version {metadata.get('format_version')!r}; this fisherhub reads version {FORMAT_VERSION}"
    return None


def _file_info(api: HfApi, ref: SignatureRef, listed: bool, size: int | None) -> SignatureInfo:
    try:
        with hub_errors(str(ref), ref.path):
            header = api.parse_safetensors_file_metadata(ref.repo_id, ref.path, repo_type=ref.repo_type, revision=ref.revision)
    except SafetensorsParsingError as exc:
        return SignatureInfo(ref, listed, {}, size, f"not a readable safetensors file ({exc})")
    return SignatureInfo(ref, listed, dict(header.metadata), size, _header_problem(header.metadata))


def list_signatures(
    repo_id: str, repo_type: str = "dataset", revision: str | None = None, *, token: str | None = None
) -> list[SignatureInfo]:
    """The signatures of a repo at ``revision``: every ``fisher_signatures/*.safetensors`` file (its header read
    with a Range request, no tensors downloaded) and every card entry whose file is missing. Each is pinned to
    the commit listed."""
    repo = SignatureRef(repo_id, check_repo_type(repo_type), revision)
    api = HfApi(token=token)
    with hub_errors(str(repo)):
        info = api.repo_info(repo_id, repo_type=repo_type, revision=revision, files_metadata=True)
    head = dataclasses.replace(repo, revision=info.sha)
    try:
        listed = {entry["path"] for entry in signature_entries(info.card_data, str(repo))}
    except CardError as exc:
        logger.warning("%s; listing the files without the card", exc)
        listed = set()
    files = {
        s.rfilename: s.size
        for s in info.siblings or []
        if s.rfilename.startswith(f"{SIGNATURE_FOLDER}/") and s.rfilename.endswith(".safetensors")
    }
    found = [_file_info(api, head.with_path(path), path in listed, size) for path, size in sorted(files.items())]
    missing = [
        SignatureInfo(head.with_path(path), True, {}, None, "listed in the card but the file is missing")
        for path in sorted(listed - files.keys())
    ]
    return found + missing


def choose_signature(
    repo: SignatureRef, base_model: str | None = None, sketch_id: str | None = None, token: str | None = None
) -> SignatureRef:
    """The one signature the card of ``repo`` lists for ``base_model`` / ``sketch_id`` (any when None), pinned
    to the commit the card was read at."""
    try:
        card_text, commit = download_card(repo, token)
    except SignatureNotFoundError as exc:
        raise SignatureNotFoundError(
            f"{repo}: has no README.md card to choose a signature from; pass the file's path (REF:path; "
            "`fisherhub list` shows the files)"
        ) from exc
    entries = signature_entries(read_card(card_text, str(repo)).data, str(repo))
    matches = [entry for entry in entries if entry_matches(entry, base_model, sketch_id)]
    listing = "; ".join(f"{e['path']} (base_model={e.get('base_model')}, sketch_id={e.get('sketch_id')})" for e in entries)
    if not matches:
        wanted = ", ".join(f"{k}={v}" for k, v in (("base_model", base_model), ("sketch_id", sketch_id)) if v)
        raise SignatureNotFoundError(
            f"{repo}: its card lists no signature{' with ' + wanted if wanted else ''}; it lists: {listing or 'none'}. "
            "Pass another base_model / sketch_id, or a file path (REF:path; `fisherhub list` shows the files)"
        )
    if len(matches) > 1:
        raise AmbiguousSignatureError(
            f"{repo}: {len(matches)} signatures match; choose one with base_model= / sketch_id= "
            f"(--base-model / --sketch-id) or a path (REF:path). The card lists: {listing}"
        )
    return dataclasses.replace(repo, revision=commit, path=matches[0]["path"])


def _fetch(
    ref: str | os.PathLike, revision: str | None, base_model: str | None, sketch_id: str | None, token: str | None
) -> tuple[str, Signature]:
    """(local file, validated signature) for ``ref``; a Hub file comes through the cache (offline too)."""
    text = os.fspath(ref)
    choosing = base_model is not None or sketch_id is not None
    if os.path.isfile(text):
        if revision is not None or choosing:
            raise InputError(f"{text} is a local file: revision, base_model and sketch_id only apply to Hub references")
        return text, Signature.load(text)
    target = SignatureRef.parse(text)
    if target is None:
        raise SignatureFileError(f"{text}: no such file, and not a Hub reference ({REFERENCE_FORMS})")
    target = target.at(revision)
    if target.path is None:
        target = choose_signature(target, base_model, sketch_id, token)
    elif choosing:
        raise InputError(f"{text} names a file: base_model / sketch_id choose one only when the reference has no path")
    with hub_errors(str(target), target.path):
        local = hf_hub_download(target.repo_id, target.path, repo_type=target.repo_type, revision=target.revision, token=token)
    with open(local, "rb") as handle:
        return local, Signature.from_bytes(handle.read(), source=str(target))


def load_signature(
    ref: str | os.PathLike,
    *,
    revision: str | None = None,
    base_model: str | None = None,
    sketch_id: str | None = None,
    token: str | None = None,
) -> Signature:
    """The signature ``ref`` names (a local file or a Hub reference, see ``REFERENCE_FORMS``). Without a path
    the repo card chooses: the one signature for ``base_model`` / ``sketch_id``. A remote file that is not a
    valid signature raises ``SignatureFileError`` naming the repo, revision and path. Works offline
    (``HF_HUB_OFFLINE=1``) for what the cache holds; pin ``revision`` to read what an older commit cached."""
    return _fetch(ref, revision, base_model, sketch_id, token)[1]


def download_signature(
    ref: str | os.PathLike,
    *,
    revision: str | None = None,
    base_model: str | None = None,
    sketch_id: str | None = None,
    token: str | None = None,
) -> str:
    """Like ``load_signature``, but the path of the validated file (in the Hub cache for a Hub reference)."""
    return _fetch(ref, revision, base_model, sketch_id, token)[0]
