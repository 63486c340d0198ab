"""List the signatures of a repo or local folder (index, else card; file list; safetensors headers) and load
one by reference."""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, constants, get_hf_file_metadata, hf_hub_download, hf_hub_url, try_to_load_from_cache
from huggingface_hub.errors import SafetensorsParsingError
from safetensors import SafetensorError, safe_open

from fisherhub.core.errors import InputError, SignatureFileError
from fisherhub.core.signature import Signature, oversized
from fisherhub.core.spec import FORMAT_VERSION
from fisherhub.hub.cards import CARD_NAME, download_card, read_card
from fisherhub.hub.errors import AmbiguousSignatureError, CardError, SignatureNotFoundError, hub_errors
from fisherhub.hub.folder import folder_entries, folder_signature_files
from fisherhub.hub.listing import CHOICE_KEYS, distinguishing_choice, entry_matches
from fisherhub.safe_text import printable
from fisherhub.hub.retry import RATE_LIMITED, with_retries
from fisherhub.hub.refs import SignatureRef, check_path, is_local_folder, is_local_path_only, repo_ref
from fisherhub.hub.snapshot import RepoSnapshot, repo_snapshot
from fisherhub.core.registry import COMMIT_ID

logger = logging.getLogger(__name__)

REFERENCE_FORMS = (
    "a local file or adapter folder, org/adapter[@rev][:path], datasets/org/name[@rev][:path], "
    "hf://[datasets/|spaces/]org/name[@rev]/path or a Hub web URL"
)


@dataclasses.dataclass(frozen=True)
class SignatureInfo:
    """A signature file of a repo or local folder: its metadata (from its safetensors header, or from the
    index entry when the header was not read: offline and not cached), whether the index (or card) lists it,
    and ``problem`` (why it cannot be loaded) or None. ``ref`` (Hub, pinned to the commit listed) or ``file``
    (local folder) says where it is."""

    path: str
    listed: bool
    metadata: dict[str, str]
    size: int | None = None
    problem: str | None = None
    ref: SignatureRef | None = None
    file: str | None = None

    @property
    def location(self) -> str:
        """What ``load_signature`` takes to load it."""
        return self.ref.short() if self.ref is not None else str(self.file)

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
        return _count(self.metadata.get("num_tokens"))

    @property
    def num_documents(self) -> int | None:
        return _count(self.metadata.get("num_documents"))


def _count(value: str | None) -> int | None:
    """A count from a header or index (None when absent or not a decimal integer: a header is not trusted)."""
    return int(value) if isinstance(value, str) and value.isascii() and value.isdecimal() and len(value) < 20 else None


def _header_problem(metadata: dict[str, str]) -> str | None:
    if metadata.get("kind") != "fishersketch-signature":
        return "not a fisherhub signature"
    if metadata.get("format_version") != str(FORMAT_VERSION):
        return f"format version {metadata.get('format_version')!r}; this fisherhub reads version {FORMAT_VERSION}"
    return None


def _entry_metadata(entry: dict[str, Any]) -> dict[str, str]:
    """An index entry in the keys of a signature header."""
    names = {"tokens": "num_tokens", "documents": "num_documents"}
    return {names.get(key, key): printable(value) for key, value in entry.items() if key != "path"}


def _local_header(file: str | os.PathLike) -> tuple[dict[str, str] | None, str | None]:
    """(header metadata, problem) of a local safetensors file, reading only its header (anything but a
    regular file, such as a FIFO, is not opened)."""
    if not os.path.isfile(file):
        return None, "not a regular file"
    try:
        with safe_open(os.fspath(file), "pt") as handle:
            metadata = {printable(k): printable(v) for k, v in (handle.metadata() or {}).items()}
    except (SafetensorError, OSError, ValueError) as exc:
        return None, f"not a readable safetensors file ({exc})"
    return metadata, _header_problem(metadata)


def _remote_header(api: HfApi, ref: SignatureRef) -> tuple[dict[str, str] | None, str | None]:
    """(header metadata, problem) of a Hub safetensors file, its header read with a Range request by the client,
    which parses it with ``json`` unbounded: a header nested past the recursion limit, or not a mapping of text,
    is a problem of that file (as ``safetensors`` refuses both for a local one)."""
    try:
        with hub_errors(str(ref), ref.path):
            header = api.parse_safetensors_file_metadata(
                ref.repo_id, ref.file, repo_type=ref.repo_type, revision=ref.revision
            )
    except SafetensorsParsingError as exc:
        return None, f"not a readable safetensors file ({exc})"
    except (RecursionError, AttributeError, TypeError):
        return None, "not a readable safetensors file (its header is not a JSON mapping a safetensors reader accepts)"
    metadata = header.metadata
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        return None, "not a readable safetensors file (its header's metadata is not a mapping of text to text)"
    return {printable(k): printable(v) for k, v in metadata.items()}, _header_problem(metadata)


def _infos(
    entries: list[dict[str, Any]], files: Mapping[str, int | None], complete: bool, header, locate, read_listed: bool
) -> list[SignatureInfo]:
    """One info per signature file and per listed entry. ``header(path)`` reads a file's header ((None, None):
    not readable here, e.g. offline and not cached), for every file with ``read_listed``, else only for files
    the entries do not list; ``locate(path)`` gives the ``ref`` / ``file`` fields."""
    listed = {entry["path"]: entry for entry in entries}
    infos = []
    for path in sorted(files.keys() | listed.keys()):
        if path not in files and complete:
            infos.append(
                SignatureInfo(path, True, {}, None, "listed in the index but the file is missing", **locate(path))
            )
            continue
        too_big = oversized(files.get(path))  # a size the listing gives: the file is not read at all
        if too_big is not None:
            infos.append(
                SignatureInfo(
                    path,
                    path in listed,
                    _entry_metadata(listed.get(path, {})),
                    files[path],
                    f"{too_big}: not read",
                    **locate(path),
                )
            )
            continue
        metadata, problem = header(path) if path in files and (read_listed or path not in listed) else (None, None)
        if metadata is None and problem is None:
            metadata = _entry_metadata(listed[path])
        infos.append(SignatureInfo(path, path in listed, metadata or {}, files.get(path), problem, **locate(path)))
    return infos


def snapshot_signatures(
    snapshot: RepoSnapshot,
    token: str | None = None,
    *,
    read_headers: bool = True,
    subfolder: str | None = None,
    strict: bool = False,
) -> list[SignatureInfo]:
    """The signatures of a repo snapshot (see ``list_signatures``), or of the adapter saved under its
    ``subfolder``. Without ``read_headers`` the files the index lists are described by their entries (no
    request per file). A malformed index or card block is logged and the files are listed without it, or
    with ``strict`` raises ``CardError`` (selection skips the candidate with it as the reason)."""
    api = HfApi(token=token)
    prefix = f"{subfolder}/" if subfolder else ""

    def header(path: str):
        if snapshot.complete:
            return _remote_header(api, snapshot.ref.with_path(prefix + path))
        cached = snapshot.cached_file(prefix + path)
        return _local_header(cached) if cached is not None else (None, "not in the local cache")

    try:
        entries = snapshot.entries(token, subfolder)
    except CardError as exc:
        if strict:
            raise
        logger.warning("%s; reading the signature files without it", exc)
        entries = []
    return _infos(
        entries,
        snapshot.signature_files_in(subfolder),
        snapshot.complete,
        header,
        lambda path: {"ref": snapshot.ref.with_path(prefix + path)},
        read_headers,
    )


def list_signatures(
    repo: str | os.PathLike | SignatureRef,
    repo_type: str | None = None,
    revision: str | None = None,
    *,
    token: str | None = None,
) -> list[SignatureInfo]:
    """The signatures of a Hub repo at ``revision`` or of a local (adapter) folder: every
    ``.fisher_signatures/*.safetensors`` file (its header read, with a Range request on the Hub: no tensors
    downloaded) and every entry of the index (or card) whose file is missing. ``repo``: a reference
    (``org/name`` is a model repo unless ``repo_type`` says otherwise, ``datasets/org/name``, ``hf://...``)
    or a local folder. Hub entries are pinned to the commit listed. Offline (``HF_HUB_OFFLINE=1``) the
    listing comes from the cache (what an online listing or load fetched), files not cached described by
    their index entries."""
    if not isinstance(repo, SignatureRef) and is_local_folder(repo):
        if revision is not None:
            raise InputError(f"{os.fspath(repo)} is a local folder: revision only applies to Hub repos")
        folder = Path(repo)
        return _infos(
            folder_entries(folder),
            folder_signature_files(folder),
            True,
            lambda path: _local_header(folder / path),
            lambda path: {"file": str(folder / path)},
            True,
        )
    ref = repo.at(revision) if isinstance(repo, SignatureRef) else repo_ref(os.fspath(repo), repo_type, revision)
    snapshot = repo_snapshot(ref, token, files_metadata=True)
    return snapshot_signatures(snapshot, token)


def _choice(choice: Mapping[str, str | None]) -> str:
    return ", ".join(f"{key}={value}" for key, value in choice.items() if value is not None)


def _option(entry: dict[str, Any], entries: list[dict[str, Any]], given: dict[str, str | None], where: str) -> str:
    """How to choose ``entry``: its distinguishing values as keywords and flags, else its path."""
    values = distinguishing_choice(entry, entries, given)
    if not values:
        return f"{entry['path']}: by its path, {where}:{entry['path']}"
    flags = " ".join(f"--{key.replace('_', '-')} {shlex.quote(value)}" for key, value in values.items())
    return f"{entry['path']}: {_choice(values)} ({flags})"


def choose_entry(entries: list[dict[str, Any]], where: str, choice: dict[str, str | None]) -> dict[str, Any]:
    """The one entry ``choice`` (``CHOICE_KEYS`` -> value, None: any) picks among ``entries`` of ``where``."""
    matches = [entry for entry in entries if entry_matches(entry, **choice)]
    if not entries:
        raise SignatureNotFoundError(
            f"{where}: lists no signatures (no .fisher_signatures/index.json and no card block); pass the file's path "
            "(REF:path; `fisherhub list` shows the files)"
        )
    if not matches:
        listing = "; ".join(f"{e['path']} ({_choice({key: e.get(key) for key in CHOICE_KEYS})})" for e in entries)
        wanted = _choice(choice)
        raise SignatureNotFoundError(
            f"{where}: lists no signature{' with ' + wanted if wanted else ''}; it lists: {listing}. "
            "Choose among those, or pass a file path (REF:path; `fisherhub list` shows the files)"
        )
    if len(matches) > 1:
        short = where.removeprefix("hf://")
        options = "; or ".join(_option(entry, matches, choice, short) for entry in matches)
        wanted = _choice(choice)
        raise AmbiguousSignatureError(
            f"{where}: {len(matches)} signatures match{' ' + wanted if wanted else ''}; choose one: {options}"
        )
    return matches[0]


def choose_signature(repo: SignatureRef, choice: dict[str, str | None], token: str | None = None) -> SignatureRef:
    """The one signature the index (or card) of ``repo`` lists for ``choice`` (``CHOICE_KEYS`` -> value, None:
    any), pinned to the commit it was read at."""
    snapshot = repo_snapshot(repo, token)
    entries = snapshot.entries(token)
    if not entries and snapshot.complete and CARD_NAME in snapshot.files and snapshot.card_data is None:
        read_card(
            download_card(snapshot.ref, token)[0], str(repo), snapshot.ref.repo_type
        )  # the Hub reads no metadata from it: say why
    entry = choose_entry(entries, str(repo), choice)
    return snapshot.ref.with_path(entry["path"])


def _fetch(
    ref: str | os.PathLike, revision: str | None, choice: dict[str, str | None], token: str | None
) -> tuple[str, Signature]:
    """(local file, validated signature) for ``ref``; a Hub file comes through the cache (offline too)."""
    text = os.fspath(ref)
    choosing = any(value is not None for value in choice.values())
    if os.path.isfile(text):
        if revision is not None or choosing:
            raise InputError(
                f"{text} is a local file: revision and the choice of a signature ({', '.join(CHOICE_KEYS)}) only "
                "apply to Hub references and folders"
            )
        return text, Signature.load(text)
    if is_local_folder(text):
        if revision is not None:
            raise InputError(f"{text} is a local folder: revision only applies to Hub references")
        entry = choose_entry(folder_entries(Path(text)), text, choice)
        local = os.path.join(text, check_path(entry["path"], text))
        return local, Signature.load(local)
    if is_local_path_only(text):
        raise SignatureFileError(
            f"{text}: no such file, and not a Hub reference (a Hub repo id has no '..' or '.' part); as a local path "
            f"it is {os.path.abspath(os.path.expanduser(text))}"
        )
    target = SignatureRef.parse(text)
    if target is None:
        raise SignatureFileError(f"{text}: no such file, and not a Hub reference ({REFERENCE_FORMS})")
    target = target.at(revision)
    if target.path is None:
        target = choose_signature(target, choice, token)
    elif choosing:
        raise InputError(
            f"{text} names a file: {_choice(choice)} choose a signature only when the reference has no path"
        )
    return _hub_file(target, token)


def _hub_file(target: SignatureRef, token: str | None, once: bool = False) -> tuple[str, Signature]:
    """(local copy, validated signature) of the Hub file ``target`` (``_download``)."""
    local = _download(target, token, once)
    if (problem := oversized(os.path.getsize(local))) is not None:
        raise SignatureFileError(f"{target}: {problem}")
    with open(local, "rb") as handle:
        return local, Signature.from_bytes(handle.read(), source=str(target))


def load_hub_signature(target: SignatureRef, token: str | None = None, *, once: bool = False) -> Signature:
    """The signature file ``target`` (a Hub file, pinned to a commit) as ``load_signature`` reads it; ``once``: a
    single attempt for a file the Hub could not serve at an earlier run (its size asked for once, without the
    client's backoff: a 5xx raises ``HubUnavailableError`` at once, a 429 is sent again after its Retry-After)."""
    return _hub_file(target, token, once)[1]


def _download(target: SignatureRef, token: str | None, once: bool = False) -> str:
    """The local copy of the Hub file ``target`` through the cache. Its size is asked for first (a HEAD request,
    ``get_hf_file_metadata``, with the client's backoff on 429 and 5xx; ``once``: without it, a 429 sent again
    after its Retry-After by ``retry.with_retries``) and a file larger than a signature is refused without being
    downloaded; a copy the cache holds at that commit is taken as it is (no request), and offline the cache
    answers."""
    where = str(target)
    cached = try_to_load_from_cache(target.repo_id, target.file, revision=target.revision, repo_type=target.repo_type)
    if isinstance(cached, str) and COMMIT_ID.fullmatch(target.revision or ""):
        return cached
    with hub_errors(where, target.path, once=once):
        if not constants.HF_HUB_OFFLINE:
            url = hf_hub_url(target.repo_id, target.file, repo_type=target.repo_type, revision=target.revision)
            if once:
                size = with_retries(lambda: get_hf_file_metadata(url, token=token), where, statuses=RATE_LIMITED).size
            else:
                size = get_hf_file_metadata(url, token=token, retry_on_errors=True).size
            if (problem := oversized(size)) is not None:
                raise SignatureFileError(f"{where}: {problem}: not downloaded")
        return hf_hub_download(
            target.repo_id, target.file, repo_type=target.repo_type, revision=target.revision, token=token
        )


def load_signature(
    ref: str | os.PathLike,
    *,
    revision: str | None = None,
    base_model: str | None = None,
    sketch_id: str | None = None,
    dataset: str | None = None,
    dataset_config: str | None = None,
    dataset_split: str | None = None,
    token: str | None = None,
) -> Signature:
    """The signature ``ref`` names. Works offline (``HF_HUB_OFFLINE=1``) for what the cache holds; pin
    ``revision`` to read what an older commit cached.

    Args:
        ref (`str` or `os.PathLike`):
            A local ``.safetensors`` file or folder, or a Hub reference (``REFERENCE_FORMS``: ``org/name``,
            ``datasets/org/name[@rev][:path]``, ``hf://...``, a Hub web URL). Without a path the repo's index
            (or card) chooses: the one signature with the values given below (each None: any).
        revision (`str`, *optional*):
            Branch, tag or commit of a Hub reference that names none.
        base_model (`str`, *optional*):
            Choose among a repo's signatures the one for this base model.
        sketch_id (`str`, *optional*):
            Choose among a repo's signatures the one of this sketch id.
        dataset (`str`, *optional*):
            ... the one sketched from this dataset (as ``fisherhub list`` shows it).
        dataset_config (`str`, *optional*):
            ... of this dataset config.
        dataset_split (`str`, *optional*):
            ... of this dataset split.
        token (`str`, *optional*):
            For private or gated repos (default: the logged-in one, ``HF_TOKEN``).

    Returns:
        `Signature`: the validated signature.

    Raises:
        `SignatureFileError`: the file is not a valid signature (the message names repo, revision and path).
        `SignatureNotFoundError`: the repo lists no signature that matches.
        `AmbiguousSignatureError`: several match: the message names, for each, the values (or the path) that
            choose it alone.
        `InputError`: a reference none of the forms reads, or a revision for a local path.
        `HubError`: the Hub refused the request (missing repo, no access, offline without a cached copy).
    """
    choice = {
        "base_model": base_model,
        "sketch_id": sketch_id,
        "dataset": dataset,
        "dataset_config": dataset_config,
        "dataset_split": dataset_split,
    }
    return _fetch(ref, revision, choice, token)[1]


def download_signature(
    ref: str | os.PathLike, *, revision: str | None = None, token: str | None = None, **choice: str | None
) -> str:
    """Like ``load_signature`` (the same keywords choose the signature), but the path of the validated file (in
    the Hub cache for a Hub reference)."""
    unknown = set(choice) - set(CHOICE_KEYS)
    if unknown:
        raise TypeError(f"download_signature() got unexpected keyword arguments {sorted(unknown)}")
    return _fetch(ref, revision, {key: choice.get(key) for key in CHOICE_KEYS}, token)[0]
