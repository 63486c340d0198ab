"""Compressed data files (``.jsonl.gz``, ``.csv.bz2``, ``.txt.xz``, ...) load like their plain versions."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma

import pytest

from fisherhub.data.sources import load_source
from fisherhub.data.files import file_builder
from fisherhub.options import DataArgs

TEXTS = [f"document {i}: the quick brown fox" for i in range(7)]


def _jsonl() -> bytes:
    return "".join(json.dumps({"text": text}) + "\n" for text in TEXTS).encode()


def _csv() -> bytes:
    return ("text\n" + "".join(f'"{text}"\n' for text in TEXTS)).encode()


def _txt() -> bytes:
    return "".join(text + "\n" for text in TEXTS).encode()


WRITERS = {
    "data.jsonl.gz": lambda path: path.write_bytes(gzip.compress(_jsonl())),
    "data.json.bz2": lambda path: path.write_bytes(bz2.compress(_jsonl())),
    "data.csv.xz": lambda path: path.write_bytes(lzma.compress(_csv())),
    "data.txt.gz": lambda path: path.write_bytes(gzip.compress(_txt())),
    "data.JSONL.GZ": lambda path: path.write_bytes(gzip.compress(_jsonl())),
}


@pytest.mark.parametrize("name", sorted(WRITERS))
@pytest.mark.parametrize("streaming", [False, True])
def test_compressed_file_loads_like_plain(tmp_path, name, streaming):
    path = tmp_path / name
    WRITERS[name](path)
    source = load_source(DataArgs(str(path), streaming=streaming))
    assert [row["text"] for row in source] == TEXTS


def test_compressed_glob(tmp_path):
    for part in range(2):
        (tmp_path / f"part{part}.jsonl.gz").write_bytes(gzip.compress(_jsonl()))
    source = load_source(DataArgs(str(tmp_path / "*.jsonl.gz")))
    assert [row["text"] for row in source] == TEXTS + TEXTS


@pytest.mark.parametrize(
    ("name", "builder"),
    [
        ("a.jsonl", "json"),
        ("a.jsonl.gz", "json"),
        ("a.b.csv.xz", "csv"),
        ("a.parquet", "parquet"),
        ("a.txt.bz2", "text"),
        ("a.gz", None),
        ("org/name", None),
        ("a.tar", None),
    ],
)
def test_file_builder(name, builder):
    from pathlib import Path

    assert file_builder(Path(name)) == builder
