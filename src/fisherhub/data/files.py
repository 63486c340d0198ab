"""Local data files by suffix (torch-free, so a missing file is reported before anything heavy is imported)."""

from __future__ import annotations

import os
from pathlib import Path

#: file suffix -> ``datasets`` builder, for local data files; each may also end in a compression suffix
#: that fsspec knows (``.gz``, ``.bz2``, ``.xz``, ...: ``fsspec.utils.compressions``), e.g. ``data.jsonl.gz``,
#: which ``datasets`` decompresses by extension
FILE_BUILDERS = {
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".parquet": "parquet",
    ".txt": "text",
    ".arrow": "arrow",
}
GLOB_CHARACTERS = frozenset("*?[")


def file_builder(path: Path) -> str | None:
    """The ``datasets`` builder of a data file or glob by its suffix, after a compression suffix."""
    from fsspec.utils import compressions

    suffixes = [suffix.lower() for suffix in path.suffixes]
    if suffixes and suffixes[-1].lstrip(".") in compressions:
        suffixes.pop()
    return FILE_BUILDERS.get(suffixes[-1]) if suffixes else None


def missing_data_file(dataset) -> str | None:
    """The path when ``dataset`` names a local data file (by its suffix, not a glob) that does not exist."""
    if not isinstance(dataset, (str, os.PathLike)):
        return None
    name = os.fspath(dataset)
    if GLOB_CHARACTERS & set(name) or file_builder(Path(name)) is None or os.path.exists(name):
        return None
    return name
