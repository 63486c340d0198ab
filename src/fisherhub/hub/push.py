"""Push a signature to the repo or local folder it describes: the file, the index and the card, in one
commit on the Hub (SPEC §4)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.hf_api import DatasetInfo, ModelInfo, RepoSibling

from fisherhub.core.bounded import read_file, read_json
from fisherhub.core.errors import FisherHubError, InputError
from fisherhub.core.signature import Signature
from fisherhub.hub.cards import CARD_NAME, download_card, read_card, set_entries
from fisherhub.hub.errors import CardError, ConcurrentPushError, OtherBaseModelError, hub_errors
from fisherhub.hub.folder import folder_card, folder_entries, folder_repo_type, locked_folder, write_atomically
from fisherhub.hub.listing import (
    LISTING_PATH,
    entry_for,
    public_name,
    published,
    render_listing,
    with_entry,
    written_entries,
)
from fisherhub.hub.read import load_signature
from fisherhub.options import same_base_model
from fisherhub.hub.refs import (
    ADAPTER_CONFIG,
    MAX_ADAPTER_CONFIG_BYTES,
    PUSH_REPO_TYPES,
    SignatureRef,
    check_path,
    check_repo_type,
    is_local_folder,
    repo_ref,
    signature_path,
)
from fisherhub.hub.snapshot import RepoSnapshot

_CONFLICT = 412  # the Hub's answer when parent_commit is not the head any more


@dataclasses.dataclass(frozen=True)
class PushResult:
    """Where the signature is now. On the Hub ``ref`` is pinned to the commit that holds it (the new commit, or
    the head that already had it when ``committed`` is False): ``load_signature(str(result.ref))`` reads it
    back. In a local folder ``file`` is the signature file written."""

    ref: SignatureRef | None
    committed: bool
    commit_url: str | None = None
    pr_url: str | None = None
    file: str | None = None
    #: the older signature files this push replaced (path -> why): the one at the new file's path, and any other
    #: of the same data under the same base model and sketch id (removed in the same commit)
    replaced: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def location(self) -> str:
        return self.ref.short() if self.ref is not None else str(self.file)


@dataclasses.dataclass(frozen=True)
class _Update:
    """The new index and card for a signature file at ``path``, and the older files it replaces (path -> why;
    ``removed``: those at other paths, which the push deletes)."""

    path: str
    data: bytes
    index: bytes
    card: str
    replaced: dict[str, str]

    @property
    def removed(self) -> list[str]:
        return [path for path in self.replaced if path != self.path]


def _counts(entry: dict[str, Any]) -> str:
    documents, tokens = entry.get("documents"), entry.get("tokens")
    return f"{documents if documents is not None else '?'} documents, {tokens if tokens is not None else '?'} tokens"


def replaced_files(
    signature: Signature, path: str, entries: list[dict[str, Any]], old: Callable[[str], Signature | None]
) -> dict[str, str]:
    """The listed files a push of ``signature`` to ``path`` replaces, each with why: the file at ``path`` (one per
    base model, data and sketch id), and every other ``.fisher_signatures/`` file of the same data under the same
    base model and sketch id (the same counts, and sketches equal within ``core.alignment.same_data``: the same
    documents recorded under another name, e.g. a local file, then its Hub dataset). ``old(path)`` loads a listed
    file (None when it cannot be read: it is then kept)."""
    from fisherhub.core.alignment import same_data

    replaced = {}
    for entry in written_entries(entries):
        if entry["path"] == path:
            replaced[path] = f"an older signature of the same base model, data and sketch id ({_counts(entry)})"
        elif (
            entry.get("sketch_id") == signature.sketch_id
            and same_base_model(entry.get("base_model"), signature.metadata.get("base_model"))
            and (entry.get("documents"), entry.get("tokens")) == (signature.num_documents, signature.num_tokens)
            and (previous := old(entry["path"])) is not None
            and previous.sketch_id == signature.sketch_id
            and same_data(previous, signature)
        ):
            replaced[entry["path"]] = (
                "a signature of the same data (equal sketches) under the same base model and sketch id, recorded "
                f"as {entry.get('dataset') or 'texts'!r}"
            )
    return replaced


def _update(
    signature: Signature,
    entries: list[dict[str, Any]],
    old_card: str | None,
    where: str,
    repo_type: str,
    name: str,
    adapter_of: str | None,
    repair_card: bool,
    index: str | None,
    old: Callable[[str], Signature | None],
    holds: Callable[[str, bytes], bool],
) -> _Update:
    """The new index lists the ``.fisher_signatures/`` entries; the card lists every entry (legacy ones too).
    ``old(path)`` loads a listed file; ``holds(path, data)``: whether the file at ``path`` is ``data`` already."""
    path = signature_path(signature)
    data = signature.to_bytes()
    replaced = replaced_files(signature, path, entries, old)
    if path in replaced and holds(path, data):
        del replaced[path]  # the same file again: nothing is replaced
    kept = [entry for entry in entries if entry["path"] == path or entry["path"] not in replaced]
    entries = with_entry(kept, entry_for(signature, path))
    card = read_card(old_card, where, repo_type, repair=repair_card)
    set_entries(card, entries, repo_type, name, adapter_of, index)
    return _Update(path, data, render_listing(written_entries(entries)), str(card), replaced)


def _entries(read: Callable[[], list[dict[str, Any]]], repair_card: bool) -> list[dict[str, Any]]:
    """The entries ``read`` gives; a malformed index or card block is refused, or with ``repair_card`` read as
    listing nothing (the push then lists the new signature, and the card is repaired)."""
    try:
        return read()
    except CardError:
        if not repair_card:
            raise
        return []


def _holds(sibling: RepoSibling | None, data: bytes) -> bool:
    """Whether the remote file is ``data``: its LFS sha256, or its git blob sha1 for a file stored in git."""
    if sibling is None:
        return False
    if sibling.lfs is not None:
        return sibling.lfs.sha256 == hashlib.sha256(data).hexdigest()
    return sibling.blob_id == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def push_signature(
    signature: Signature,
    repo: str | os.PathLike | SignatureRef,
    repo_type: str | None = None,
    *,
    revision: str | None = None,
    create_pr: bool = False,
    parent_commit: str | None = None,
    token: str | None = None,
    commit_message: str | None = None,
    repair_card: bool = False,
    create_repo: bool = False,
    index: str | None = None,
    force: bool = False,
) -> PushResult:
    """Add ``signature`` under ``.fisher_signatures/`` of a dataset or model (adapter) repo, or of a local
    folder, and list it in ``.fisher_signatures/index.json`` and the card; on the Hub in one commit. What is
    published holds no local paths: they become a Hub id or a file / folder name (``index.published``). When
    the same file, index and card are already there, nothing is committed.

    Args:
        signature (`Signature`):
            The signature to publish (it must name its base model).
        repo (`str`, `os.PathLike` or `SignatureRef`):
            ``org/name`` (a model repo unless ``repo_type`` says otherwise), ``datasets/org/name``, an ``hf://``
            URI, or an existing local folder.
        repo_type (`str`, *optional*):
            ``model`` or ``dataset``: of a bare ``org/name``; of a local folder, what it will be on the Hub
            (default ``model`` when it holds an adapter, else ``dataset``).
        revision (`str`, *optional*):
            The branch to commit to (default: the repo's default branch).
        create_pr (`bool`, *optional*):
            Open a pull request (for repos one cannot write to).
        parent_commit (`str`, *optional*):
            The commit's parent, by default the head the card was read at: a push made by someone else in
            between fails instead of being overwritten.
        token (`str`, *optional*):
            A token with write access (default: the logged-in one, ``HF_TOKEN``).
        commit_message (`str`, *optional*):
            The commit message (default: one naming the signature).
        repair_card (`bool`, *optional*):
            Rewrite a malformed card header, keeping its body (``cards.read_card``); otherwise one is refused.
        create_repo (`bool`, *optional*):
            Create the repo when it is missing (as ``push_to_hub`` does in transformers; a new model repo's card
            gets ``base_model`` and ``library_name: peft``, so the Hub lists it as an adapter of that model).
        index (`str`, *optional*):
            The signature index the repo is in (``datasets/org/name`` or ``org/name``, ``fisherhub index``):
            the card's section links to it.
        force (`bool`, *optional*):
            Push into an adapter a signature sketched under another base model than the adapter's (its card's
            ``base_model``, else its ``adapter_config.json``); refused otherwise.

    Returns:
        `PushResult`: where the file is (``location``, ``ref`` pinned to the new commit), whether anything was
        committed, the commit or pull-request URL, and the older files it replaced (``replaced``: the one of the
        same base model, data and sketch id, and any other of the same data, equal sketches and counts, under the
        same base model and sketch id; deleted in the same commit).

    Raises:
        `InputError`: a signature without a base model, Hub-only options for a local folder, a bad repo type.
        `ConcurrentPushError`: someone pushed after the card was read; push again.
        `OtherBaseModelError`: an adapter of another base model than the signature's, without ``force``.
        `CardError`: the repo's card has a malformed header (see ``repair_card``).
        `HubError`: the Hub refused the request (missing repo, no write access).
    """
    from fisherhub.hub.refs import index_ref

    signature = published(signature)
    index = index_ref(index).repo_id if index is not None else None
    if not isinstance(repo, SignatureRef) and is_local_folder(repo):
        if revision is not None or create_pr or parent_commit is not None or create_repo:
            raise InputError(
                f"{os.fspath(repo)} is a local folder: revision, create_pr, parent_commit and create_repo apply to Hub repos"
            )
        return _push_to_folder(
            signature, Path(repo), repair_card, repo_type and check_repo_type(repo_type, PUSH_REPO_TYPES), index, force
        )
    target = repo.at(revision) if isinstance(repo, SignatureRef) else repo_ref(os.fspath(repo), repo_type, revision)
    check_repo_type(target.repo_type, PUSH_REPO_TYPES)
    api = HfApi(token=token)
    info, created = _repo_info(api, target, create_repo)
    snapshot = RepoSnapshot.from_info(info, target.repo_type, target.revision)
    files = {sibling.rfilename: sibling for sibling in info.siblings or []}
    old_card = download_card(snapshot.ref, token)[0] if CARD_NAME in files else None
    adapter = target.repo_type == "model" and (created or ADAPTER_CONFIG in files)
    if adapter and not created and not force:
        _check_hub_adapter(signature, snapshot, str(target), token)
    update = _update(
        signature,
        _entries(lambda: snapshot.entries(token), repair_card),
        old_card,
        str(target),
        target.repo_type,
        target.repo,
        signature.metadata.get("base_model") if adapter else None,
        repair_card,
        index,
        lambda path: _readable(lambda: load_signature(snapshot.ref.with_path(path).short(), token=token)),
        lambda path, data: _holds(files.get(path), data),
    )
    head = snapshot.ref.with_path(update.path)
    if (
        update.card == old_card
        and not update.removed
        and _holds(files.get(LISTING_PATH), update.index)
        and _holds(files.get(update.path), update.data)
    ):
        return PushResult(head, committed=False)
    return _commit(api, target, signature, update, commit_message, create_pr, parent_commit or info.sha)


def _repo_info(api: HfApi, target: SignatureRef, create_repo: bool) -> tuple[ModelInfo | DatasetInfo, bool]:
    """The repo ``target`` at its revision with its files' metadata (created first when ``create_repo`` and
    missing), and whether it was created."""
    created = False
    with hub_errors(str(target)):
        if create_repo:
            created = not api.repo_exists(target.repo_id, repo_type=target.repo_type)
            api.create_repo(target.repo_id, repo_type=target.repo_type, exist_ok=True)
        info = cast(  # a model or dataset repo (PUSH_REPO_TYPES)
            "ModelInfo | DatasetInfo",
            api.repo_info(target.repo_id, repo_type=target.repo_type, revision=target.revision, files_metadata=True),
        )
    return info, created


def _commit(
    api: HfApi,
    target: SignatureRef,
    signature: Signature,
    update: _Update,
    commit_message: str | None,
    create_pr: bool,
    parent_commit: str | None,
) -> PushResult:
    """The signature file, the listing and the card in one commit on ``parent_commit``; a push in between is a
    ``ConcurrentPushError``."""
    metadata = signature.metadata
    described = (
        f"{metadata.get('dataset')} under {metadata['base_model']}"
        if metadata.get("dataset")
        else metadata["base_model"]
    )
    operations: list[CommitOperationAdd | CommitOperationDelete] = [
        CommitOperationAdd(update.path, update.data),
        CommitOperationAdd(LISTING_PATH, update.index),
        CommitOperationAdd(CARD_NAME, update.card.encode("utf-8")),
        *(CommitOperationDelete(path) for path in update.removed),
    ]
    try:
        with hub_errors(str(target)):
            commit = api.create_commit(
                target.repo_id,
                operations,
                commit_message=commit_message or f"Add Fisher signature of {described} ({signature.sketch_id})",
                repo_type=target.repo_type,
                revision=target.revision,
                create_pr=create_pr,
                parent_commit=parent_commit,
            )
    except HfHubHTTPError as exc:
        if exc.response is None or exc.response.status_code != _CONFLICT:
            raise
        raise ConcurrentPushError(
            f"{target}: someone pushed to {target.revision or 'the default branch'} after its card was read at commit "
            f"{str(parent_commit)[:7]}; nothing was written. Push again: it re-reads the card and keeps "
            "their changes"
        ) from exc
    pushed = SignatureRef(target.repo_id, target.repo_type, commit.oid, update.path)
    return PushResult(pushed, True, commit.commit_url, commit.pr_url, replaced=update.replaced)


def _push_to_folder(
    signature: Signature,
    folder: Path,
    repair_card: bool,
    repo_type: str | None = None,
    index: str | None = None,
    force: bool = False,
) -> PushResult:
    """The folder's signature file, index and card (each written atomically; the card last, so a folder
    interrupted in between still lists the signature through its index), under the folder's lock. ``repo_type``:
    what the folder will be on the Hub (default: ``model`` when it holds an adapter, else ``dataset``)."""
    with locked_folder(folder):
        return _write_to_folder(signature, folder, repair_card, repo_type, index, force)


def _write_to_folder(
    signature: Signature, folder: Path, repair_card: bool, repo_type: str | None, index: str | None, force: bool
) -> PushResult:
    old_card = folder_card(folder)
    repo_type = repo_type or folder_repo_type(folder)
    if repo_type == "model" and (folder / ADAPTER_CONFIG).is_file() and not force:
        check_adapter_base(signature, str(folder), [lambda: _adapter_base(lambda: folder / ADAPTER_CONFIG)])
    update = _update(
        signature,
        _entries(lambda: folder_entries(folder), repair_card),
        old_card,
        str(folder),
        repo_type,
        folder.resolve().name,
        signature.metadata.get("base_model") if repo_type == "model" else None,
        repair_card,
        index,
        lambda path: _readable(lambda: Signature.load(folder / check_path(path, str(folder)))),
        lambda path, data: (folder / path).is_file() and (folder / path).read_bytes() == data,
    )
    file = folder / update.path
    outputs = [
        (file, update.data),
        (folder / LISTING_PATH, update.index),
        (folder / CARD_NAME, update.card.encode("utf-8")),
    ]
    written = False
    for path, data in outputs:
        if not path.is_file() or path.read_bytes() != data:
            write_atomically(path, data)
            written = True
    for removed in update.removed:  # after the index and card that no longer list them
        (folder / removed).unlink(missing_ok=True)
    return PushResult(None, written or bool(update.removed), file=str(file), replaced=update.replaced)


def _readable(load: Callable[[], Signature]) -> Signature | None:
    """``load()``, or None for a file that is not a readable signature (kept as it is by the push)."""
    try:
        return load()
    except (FisherHubError, OSError, ValueError):
        return None


def _check_hub_adapter(signature: Signature, snapshot: RepoSnapshot, where: str, token: str | None) -> None:
    """``check_adapter_base`` of an adapter repo: its card's ``base_model``, else its ``adapter_config.json``."""
    config = lambda: _adapter_base(lambda: snapshot.download(ADAPTER_CONFIG, token))  # noqa: E731
    check_adapter_base(signature, where, [(snapshot.card_data or {}).get("base_model"), config])


def _adapter_base(file: Callable[[], Path | str]) -> str | None:
    """``base_model_name_or_path`` of the ``adapter_config.json`` that ``file()`` gives (a local file; a Hub repo's
    is one small download), read by the bounded reader; None when it cannot be read."""
    try:
        where = str(path := Path(file()))
        data = read_file(path, where, max_bytes=MAX_ADAPTER_CONFIG_BYTES)
        document = read_json(data, where, max_bytes=MAX_ADAPTER_CONFIG_BYTES)
    except (FisherHubError, OSError):
        return None
    value = document.get("base_model_name_or_path") if isinstance(document, dict) else None
    return value if isinstance(value, str) and value else None


def check_adapter_base(signature: Signature, where: str, named: list[Any]) -> None:
    """Refuse (``OtherBaseModelError``) to list ``signature`` in the adapter ``where`` when it was sketched under
    another base model than the adapter's. ``named``: what names the adapter's base model, in turn (a card's
    ``base_model``, a value or list, or a callable reading the adapter config); the first that names one decides, and
    the signature fits when it is any of the models named there (a local path counts by its folder name, as a push
    publishes it)."""
    sketched = signature.metadata.get("base_model")
    for source in named:
        value = source() if callable(source) else source
        bases = [str(base) for base in ([value] if isinstance(value, str) else value or []) if base]
        if not bases or not sketched:
            continue
        if any(same_base_model(public_name(base), sketched) or same_base_model(base, sketched) for base in bases):
            return
        raise OtherBaseModelError(
            f"{where} is an adapter of {' / '.join(map(repr, bases))}, but the signature was sketched under "
            f"{sketched!r}: listed there, it would advertise a signature of another base model, which selection then "
            f"skips. Sketch the adapter's training data under its base model (fisherhub sketch --model {bases[0]} ...) "
            "and push that, or pass --force (force=True) to push this one anyway"
        )
