"""A repo's listing of its signatures: ``.fisher_signatures/index.json`` is the source of truth, written in the
same commit as the signature files; the card's ``fisher_signatures:`` block is its rendering (and the
fallback for repos pushed before the index existed). A ``push_to_hub`` that rewrites the card leaves the
index, so the listing survives it. The legacy ``fisher_signatures/index.json`` (fisherhub 0.2.0) is read
after it, for the paths it does not list, and never written.

What is published about a signature never holds the user's directories: a local path in its metadata is
replaced by a Hub id when the path is a Hub cache folder (``.../models--org--name/snapshots/<sha>``), else
by the file or folder name (``published``). Not to be confused with the *signature index*, a base model's
signatures across repos in one dataset (``hub/signature_index/``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from fisherhub.core.bounded import read_file, read_json
from fisherhub.core.signature import Signature
from fisherhub.hub.errors import CardError
from fisherhub.safe_text import printable
from fisherhub.hub.refs import LEGACY_SIGNATURE_FOLDER, SIGNATURE_FOLDER, SIGNATURE_FOLDERS, is_signature_file

LISTING_PATH = f"{SIGNATURE_FOLDER}/index.json"
LEGACY_LISTING_PATH = f"{LEGACY_SIGNATURE_FOLDER}/index.json"
#: each listing and the one folder its entries may point into, in the order they are read
LISTING_FOLDERS = {LISTING_PATH: SIGNATURE_FOLDER, LEGACY_LISTING_PATH: LEGACY_SIGNATURE_FOLDER}
INDEX_KIND = "fisherhub-signature-index"
INDEX_VERSION = 1
#: what an entry says about a signature file (``path`` is from the repo root)
ENTRY_KEYS = ("path", "base_model", "sketch_id", "tokens", "documents", "dataset", "dataset_config", "dataset_split")
_CACHE_FOLDER = re.compile(r"(?:models|datasets|spaces)--([\w.-]+?)--([\w.-]+)")
#: an index larger than this is refused unread (one entry is ~300 bytes)
MAX_INDEX_BYTES = 4 * 2**20


def _is_local_path(value: str) -> bool:
    return (
        os.path.isabs(value)
        or value.startswith(("~", "./", "../", ".\\", "..\\"))
        or bool(re.match(r"[A-Za-z]:[\\/]", value))
    )


def public_name(value: str) -> str:
    """``value`` as it may be published: unchanged unless it is a local path, which becomes the Hub id of a
    Hub cache folder, else the last file or folder name (``/home/me/data/train.jsonl`` -> ``train.jsonl``)."""
    if not _is_local_path(value):
        return value
    parts = [part for part in re.split(r"[\\/]+", value) if part not in ("", ".", "..", "~")]
    for part in reversed(parts):
        if match := _CACHE_FOLDER.fullmatch(part):
            return f"{match.group(1)}/{match.group(2)}"
    return parts[-1] if parts else "local"


def published(signature: Signature) -> Signature:
    """``signature`` with every local path in its metadata replaced by ``public_name`` and control characters
    taken out (the same object when there is none)."""
    metadata = {key: printable(public_name(value)) for key, value in signature.metadata.items()}
    return signature if metadata == signature.metadata else dataclasses.replace(signature, metadata=metadata)


def entry_for(signature: Signature, path: str) -> dict[str, Any]:
    """The entry for a signature file: path, base model, sketch id, token and document counts, dataset."""
    metadata = signature.metadata
    entry = {
        "path": path,
        "base_model": metadata.get("base_model"),
        "sketch_id": signature.sketch_id,
        "tokens": signature.num_tokens,
        "documents": signature.num_documents,
        **{key: metadata.get(key) for key in ("dataset", "dataset_config", "dataset_split")},
    }
    return {key: value for key, value in entry.items() if value not in (None, "")}


def _entry_problem(entry: Any, folders: tuple[str, ...]) -> str | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        return "not a mapping with a `path`"
    if not is_signature_file(entry["path"], folders) or any(
        part in ("", ".", "..") for part in entry["path"].split("/")
    ):
        where = " or ".join(f"{folder}/*.safetensors" for folder in folders)
        return f"path {printable(entry['path'])!r} is not a {where} file of the repo"
    for key, value in entry.items():
        if key in ("tokens", "documents"):
            if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63):
                return f"`{key}` {printable(value)[:40]!r} is not a count"
        elif not isinstance(value, (str, int, float, bool)) and value is not None:
            return f"`{printable(key)[:40]}` is a {type(value).__name__}, not a plain value"
    return None


def check_entries(
    value: Any, where: str, what: str, folders: tuple[str, ...] = SIGNATURE_FOLDERS
) -> list[dict[str, Any]]:
    """``value`` as a list of entries (None: none), text values without control characters; ``CardError``
    naming ``what`` held it when it is not a list of entries with safe paths under ``folders`` and plain values."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise CardError(f"{where}: {what} must be a list of mappings with a `path`, got {printable(repr(value))[:200]}")
    for number, entry in enumerate(value):
        if problem := _entry_problem(entry, folders):
            raise CardError(f"{where}: {what}, entry {number}: {problem}")
    return [{printable(k): printable(v) if isinstance(v, str) else v for k, v in entry.items()} for entry in value]


def merge_entries(*listings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries of each listing in turn, less those whose path an earlier listing has."""
    merged: dict[str, dict[str, Any]] = {}
    for entries in listings:
        for entry in entries:
            merged.setdefault(entry["path"], entry)
    return list(merged.values())


def written_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries that go into the index a push writes: those under ``.fisher_signatures/`` (legacy ones stay
    listed by the legacy index and the card)."""
    return [entry for entry in entries if is_signature_file(entry["path"], (SIGNATURE_FOLDER,))]


def with_entry(entries: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    """``entries`` with ``entry`` in place of the one with the same path (others stay), else appended."""
    index = next((i for i, old in enumerate(entries) if old["path"] == entry["path"]), len(entries))
    return [*entries[:index], entry, *entries[index + 1 :]]


#: the entry fields a signature of a repo can be chosen by (``load_signature``'s keywords, ``pull``'s flags)
CHOICE_KEYS = ("base_model", "sketch_id", "dataset", "dataset_config", "dataset_split")


def entry_matches(
    entry: dict[str, Any], base_model: str | None = None, sketch_id: str | None = None, **others: str | None
) -> bool:
    """Whether ``entry`` has every value given (None: any) among ``CHOICE_KEYS``."""
    wanted = {"base_model": base_model, "sketch_id": sketch_id, **others}
    return all(value is None or entry.get(key) == value for key, value in wanted.items())


def distinguishing_choice(
    entry: dict[str, Any], entries: list[dict[str, Any]], given: Mapping[str, str | None] | None = None
) -> dict[str, str] | None:
    """The fewest ``CHOICE_KEYS`` values (besides those ``given``), in that order of preference, that choose
    ``entry`` alone among ``entries``; None when no values do (two files that differ in none of them: only the
    path tells them apart)."""
    given = {key: value for key, value in (given or {}).items() if value is not None}
    free = [key for key in CHOICE_KEYS if key not in given and entry.get(key) not in (None, "")]
    for size in range(len(free) + 1):
        for keys in itertools.combinations(free, size):
            values = {key: str(entry[key]) for key in keys}
            if sum(entry_matches(other, **given, **values) for other in entries) == 1:
                return values
    return None


def render_listing(entries: list[dict[str, Any]]) -> bytes:
    """The bytes of ``index.json`` (stable: equal entries give equal bytes)."""
    document = {"kind": INDEX_KIND, "version": INDEX_VERSION, "signatures": entries}
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def index_bytes(file: str | os.PathLike, where: str, index_path: str = LISTING_PATH) -> bytes:
    """The bytes of the listing file ``file`` (``index_path`` of ``where``), refused unread (``CardError``) when it
    is larger than ``MAX_INDEX_BYTES``."""
    return read_file(file, f"{where}: {index_path}", max_bytes=MAX_INDEX_BYTES, error=CardError)


def parse_listing(data: bytes, where: str, index_path: str = LISTING_PATH) -> list[dict[str, Any]]:
    """The entries of the listing file at ``index_path`` (a key of ``LISTING_FOLDERS``), each under that listing's
    folder, read by ``read_json`` (at most ``MAX_INDEX_BYTES``); ``CardError`` when it is not one this version
    reads."""
    try:
        document = read_json(data, f"{where}: {index_path}", max_bytes=MAX_INDEX_BYTES, error=CardError)
    except CardError as exc:
        raise CardError(f"{printable(exc)}; push a signature again to rewrite it") from exc
    if not isinstance(document, dict) or document.get("kind") != INDEX_KIND:
        raise CardError(f"{where}: {index_path} is not a fisherhub signature index (no kind {INDEX_KIND!r})")
    if document.get("version") != INDEX_VERSION:
        raise CardError(
            f"{where}: {index_path} has version {printable(repr(document.get('version')))[:40]}; this fisherhub reads version "
            f"{INDEX_VERSION} (upgrade fisherhub)"
        )
    return check_entries(
        document.get("signatures"), where, f"{index_path}'s `signatures`", (LISTING_FOLDERS[index_path],)
    )


#: the names of ``render_listing``, ``parse_listing`` and the paths before fisherhub 0.3, kept for one release
render_index, parse_index = render_listing, parse_listing
INDEX_PATH, LEGACY_INDEX_PATH, INDEX_FOLDERS = LISTING_PATH, LEGACY_LISTING_PATH, LISTING_FOLDERS
