"""Signatures in a local folder (an adapter's ``save_pretrained`` / ``output_dir`` folder): the same
``.fisher_signatures/`` files, index and card section as in a Hub repo, so that uploading the folder
(``upload_folder``, the Trainer's push of ``output_dir``) publishes them as they are. ``PeftModel.push_to_hub``
uploads a fresh ``save_pretrained`` instead and carries none: push the signature after it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock

from fisherhub.core.atomic import atomic_path
from fisherhub.core.errors import InputError
from fisherhub.hub.cards import CARD_NAME, card_text, parse_card, signature_entries
from fisherhub.hub.listing import LISTING_FOLDERS, index_bytes, merge_entries, parse_listing
from fisherhub.hub.refs import ADAPTER_CONFIG, SIGNATURE_FOLDER, SIGNATURE_FOLDERS


def folder_signature_files(folder: Path) -> dict[str, int]:
    """``.fisher_signatures/*.safetensors`` (and the legacy ``fisher_signatures/*.safetensors``) of ``folder``
    (paths from the folder root) and their sizes."""
    return {
        f"{name}/{file.name}": file.stat().st_size
        for name in SIGNATURE_FOLDERS
        for file in sorted((folder / name).glob("*.safetensors"))
        if file.is_file()
    }


def folder_card(folder: Path) -> str | None:
    """The text of the folder's README.md (``card_text``'s bound), None without one."""
    card = folder / CARD_NAME
    return card_text(card, str(folder)) if card.is_file() else None


def folder_entries(folder: Path) -> list[dict[str, Any]]:
    """The entries the folder's indexes list (``.fisher_signatures/index.json``, then the legacy
    ``fisher_signatures/index.json`` for paths it does not list), else its card's block (none without either)."""
    indexes = [path for path in LISTING_FOLDERS if (folder / path).is_file()]
    if indexes:
        return merge_entries(
            *(parse_listing(index_bytes(folder / path, str(folder), path), str(folder), path) for path in indexes)
        )
    text = folder_card(folder)
    if text is None:
        return []
    return signature_entries(parse_card(text, str(folder), folder_repo_type(folder)).data, str(folder))


def folder_repo_type(folder: Path) -> str:
    """``model`` for an adapter folder (it has ``adapter_config.json``), else ``dataset``."""
    return "model" if (folder / ADAPTER_CONFIG).is_file() else "dataset"


#: the lock that makes pushes into one folder take turns; under ``.cache/huggingface/``, which uploads of the
#: folder (``upload_folder``, the Trainer's ``push_to_hub``) always leave out
LOCK_PATH = ".cache/huggingface/fisher_signatures.lock"


@contextlib.contextmanager
def locked_folder(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s push lock, so that processes pushing into one folder read and rewrite its index one
    after the other (each keeps the entries of the others). ``SIGNATURE_FOLDER`` must be a folder of its own:
    a symbolic link (which would write elsewhere) or a file in its place is refused."""
    signatures = folder / SIGNATURE_FOLDER
    if signatures.is_symlink():
        raise InputError(
            f"{signatures} is a symbolic link (to {os.readlink(signatures)}): push writes only inside {folder}; "
            "replace the link with a folder (copy what it points to)"
        )
    if signatures.exists() and not signatures.is_dir():
        raise InputError(f"{signatures} is a file, not a folder: move it away, then push again")
    lock = folder / LOCK_PATH
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        held = FileLock(lock)
        held.acquire()
    except OSError as exc:
        raise _unwritable(folder, exc) from exc
    try:
        yield
    finally:
        held.release()


def _unwritable(path: Path, exc: OSError) -> InputError:
    return InputError(f"cannot write {path} ({exc.strerror or exc}): make it writable, or push into another folder")


def write_atomically(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` or what it held before, never a partial file; ``InputError`` when it cannot be
    written (a read-only folder, a full disk)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(path.parent, exc) from exc
    with atomic_path(path) as temporary:
        Path(temporary).write_bytes(data)
