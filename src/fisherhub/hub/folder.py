"""Signatures in a local folder (an adapter's ``save_pretrained`` / ``output_dir`` folder): the same
``.fisher_signatures/`` files, index and card section as in a Hub repo, so that uploading the folder
(``upload_folder``, the Trainer's push of ``output_dir``) publishes them as they are. ``PeftModel.push_to_hub``
uploads a fresh ``save_pretrained`` instead and carries none: push the signature after it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


from fisherhub.hub.cards import CARD_CLASSES, CARD_NAME, signature_entries
from fisherhub.hub.errors import CardError
from fisherhub.hub.index import INDEX_FOLDERS, merge_entries, parse_index
from fisherhub.hub.refs import ADAPTER_CONFIG, SIGNATURE_FOLDERS


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
    card = folder / CARD_NAME
    return card.read_text(encoding="utf-8-sig") if card.is_file() else None


def folder_entries(folder: Path) -> list[dict[str, Any]]:
    """The entries the folder's indexes list (``.fisher_signatures/index.json``, then the legacy
    ``fisher_signatures/index.json`` for paths it does not list), else its card's block (none without either)."""
    indexes = [path for path in INDEX_FOLDERS if (folder / path).is_file()]
    if indexes:
        return merge_entries(*(parse_index((folder / path).read_bytes(), str(folder), path) for path in indexes))
    text = folder_card(folder)
    if text is None:
        return []
    try:
        return signature_entries(CARD_CLASSES[folder_repo_type(folder)](text).data, str(folder))
    except ValueError as exc:  # the card classes raise ValueError on a malformed header
        raise CardError(f"{folder}: {CARD_NAME} has a malformed YAML header ({exc})") from exc


def folder_repo_type(folder: Path) -> str:
    """``model`` for an adapter folder (it has ``adapter_config.json``), else ``dataset``."""
    return "model" if (folder / ADAPTER_CONFIG).is_file() else "dataset"


def write_atomically(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` or what it held before, never a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
