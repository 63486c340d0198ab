"""Which rows of an index's shards are its rows, and how an update pushes its own.

An update pushes one more shard (``DELTA_PREFIX``) holding the rows of the repos it read, in the same commit as
the card and state file; the rows they replace stay where they are, and the state file says which shard holds
each repo's rows (``live_rows`` drops the rest on reading). So an update sends what it read, not the whole
index. Once the rows left behind would pass ``STALE_SHARE`` of the rows stored, or the updates' shards
``MAX_DELTAS``, the update pushes the whole index again instead (``datasets`` deletes every older shard)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fisherhub.hub.signature_index.schema import DELTA_NAME, DELTA_PREFIX, SPLIT

#: an update appends a shard while the rows it leaves behind stay at most this share of the rows stored
STALE_SHARE = 0.1
#: an update appends a shard while the index has fewer update shards than this (each is one more download)
MAX_DELTAS = 16


def delta_path(commit: str) -> str:
    """The shard of the update of the index's commit ``commit``."""
    return f"{DELTA_PREFIX}{commit[:12]}.parquet"


def repo_shards(state: dict[str, Any]) -> dict[tuple[str, str], str | None]:
    """(repo type, repo id) -> the update shard holding the repo's rows (None: the build's), for every repo the
    state file lists."""
    return {(entry["repo_type"], entry["repo_id"]): entry.get("shard") for entry in state["repos"]}


def live_rows(table, path: str, state: dict[str, Any], shards: dict[tuple[str, str], str | None]):
    """The rows of the shard ``path`` that are the index's: all of them in an index no update appended to (no
    ``deltas`` in its state file); else those of a repo the state file lists, holding them in this shard
    (``shards``: ``repo_shards``)."""
    import pyarrow as pa

    if "deltas" not in state:
        return table
    own = path if path in state["deltas"] else None
    keys = zip(table.column("repo_type").to_pylist(), table.column("repo_id").to_pylist())
    return table.filter(pa.array([shards.get(key, "") == own for key in keys], type=pa.bool_()))


@dataclasses.dataclass(frozen=True)
class Replacement:
    """An index at ``commit`` (its ``state`` file, ``stored_rows`` rows in its shards) with the rows of the repos
    ``replaced`` (type, id) dropped and the rows read now after its ``kept`` rows."""

    commit: str
    state: dict[str, Any]
    stored_rows: int
    replaced: frozenset[tuple[str, str]]
    kept: int

    def appends(self, new_rows: int) -> bool:
        """Whether the update pushes its ``new_rows`` as one more shard (else the whole index; also when the
        commit is not the 40 hex a shard is named after)."""
        behind = self.stored_rows - self.kept  # rows in the shards that are not the index's after the update
        deltas = self.state.get("deltas", [])
        named = DELTA_NAME.fullmatch(self.path) is not None and self.path not in deltas
        return named and len(deltas) < MAX_DELTAS and behind <= STALE_SHARE * (self.stored_rows + new_rows)

    @property
    def path(self) -> str:
        return delta_path(self.commit)

    def deltas(self) -> list[str]:
        """The update shards after this update appends its own."""
        return [*self.state.get("deltas", []), self.path]

    def entries(self, repos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The state file's ``repos`` (the work folder's entries) with the shard holding each one's rows: this
        update's for the repos it replaced, the one before for the others."""
        before = repo_shards(self.state)
        out = []
        for entry in repos:
            key = (entry["repo_type"], entry["repo_id"])
            shard = self.path if key in self.replaced else before.get(key)
            out.append({**entry, "shard": shard} if shard is not None else entry)
        return out


def counted_card(metadata: dict[str, Any], stored_rows: int, added_bytes: int) -> dict[str, Any]:
    """The card's metadata with ``datasets``' record of the split (``dataset_info``, which ``load_dataset``
    checks the rows against) counting the ``stored_rows`` of every shard, ``added_bytes`` more downloaded."""
    info = metadata.get("dataset_info")
    if not isinstance(info, dict):
        return metadata
    splits = [
        {**split, "num_examples": stored_rows} if isinstance(split, dict) and split.get("name") == SPLIT else split
        for split in info.get("splits") or []
    ]
    size = info.get("download_size")
    return {
        **metadata,
        "dataset_info": {
            **info,
            "splits": splits,
            **({"download_size": size + added_bytes} if isinstance(size, int) else {}),
        },
    }
