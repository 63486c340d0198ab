"""What this client checked when it pushed a commit of an index, kept in the index's work folder
(``pushed/<commit>.json``): the rows it left out (with their reason) and the rows the card's heatmap shows. An
update of that commit (the index's head: a commit id pins its files) checks only the rows it adds, and draws the
heatmap again only when its rows change. A commit this client did not push has no record: all its rows are
checked."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from fisherhub.core.atomic import atomic_path
from fisherhub.hub.signature_index.rows import RowKey, row_key

_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclasses.dataclass(frozen=True)
class PushRecord:
    """``left_out``: ``rows.row_key`` -> why the row was left out; ``figure``: the keys of the heatmap's rows, in
    its order (None: no heatmap was pushed)."""

    commit: str
    left_out: dict[RowKey, str]
    figure: tuple[RowKey, ...] | None


def record_path(root: Path, commit: str) -> Path:
    return Path(root) / "pushed" / f"{commit}.json"


def read_record(root: Path, commit: str) -> PushRecord | None:
    """The record of ``commit`` in the work folder ``root``, None when this client did not push it from there (or
    the record cannot be read: its rows are then checked, as a stranger's)."""
    path = record_path(root, commit)
    if not _COMMIT.fullmatch(commit) or not path.is_file():
        return None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        left_out = {row_key(*entry[:4]): str(entry[4]) for entry in document["left_out"]}
        figure = document["figure"]
        return PushRecord(commit, left_out, None if figure is None else tuple(row_key(*key) for key in figure))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def write_record(root: Path, record: PushRecord) -> None:
    """Keep ``record`` in the work folder ``root`` (written whole or not at all)."""
    path = record_path(root, record.commit)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "left_out": [[*key, reason] for key, reason in sorted(record.left_out.items())],
        "figure": None if record.figure is None else [list(key) for key in record.figure],
    }
    with atomic_path(path) as temporary:
        Path(temporary).write_text(json.dumps(document), encoding="utf-8")
