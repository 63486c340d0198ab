"""Checkpoints of a sketching run: per process, its state and the global document index it reached, written so
that a kill at any point leaves a consistent pair, and checked on resume against the run they belong to."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import torch

from fisherhub.core.atomic import atomic_path
from fisherhub.core.errors import InputError
from fisherhub.core.spec import SketchSpec
from fisherhub.core.state import SketchState
from fisherhub.data.stream import DocumentCounts


@dataclasses.dataclass
class Progress:
    """Where a process stands: its global position and the documents it looked at."""

    next_index: int = 0
    batches: int = 0
    counts: DocumentCounts = dataclasses.field(default_factory=DocumentCounts)
    reading_state: dict[str, Any] | None = None  # DocumentStream.reading_state() at next_index
    own_shard_sizes: list[int] | None = None  # DocumentStream.count_own_shards() when reading by shards


#: what a checkpoint record (``rank{k}-of{N}.json``) holds
_RECORD_KEYS = frozenset({"run", "state_file", "next_index", "batches", "counts"})


class Checkpointer:
    """Per-process checkpoints in a folder: ``rank{k}-of{N}.json`` names the state file it goes with.

    The state is written first (atomically, under a new name), then the JSON (atomically), then the
    previous state file is removed; a kill at any point leaves a consistent (state, position) pair.
    """

    def __init__(self, folder: str | os.PathLike, rank: int, world: int, run_key: dict[str, Any], every: int):
        self.folder = Path(folder)
        self.world = world
        self.prefix = f"rank{rank}-of{world}"
        self.run_key = run_key
        self.every = every

    @property
    def _index_file(self) -> Path:
        return self.folder / f"{self.prefix}.json"

    def save(self, state: SketchState, progress: Progress) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the --checkpoint folder {self.folder} ({exc.strerror})") from exc
        previous = self._read_index()
        state_file = f"{self.prefix}-batch{progress.batches}.safetensors"
        state.save(self.folder / state_file)
        record = {  # _RECORD_KEYS, and where a stream stands
            "run": self.run_key,
            "state_file": state_file,
            "next_index": progress.next_index,
            "batches": progress.batches,
            "counts": dataclasses.asdict(progress.counts),
            "reading_state": progress.reading_state,
            "own_shard_sizes": progress.own_shard_sizes,
        }
        with atomic_path(self._index_file) as temporary:
            Path(temporary).write_text(json.dumps(record, sort_keys=True))
        if previous and previous["state_file"] != state_file:
            (self.folder / previous["state_file"]).unlink(missing_ok=True)

    def _check_no_other_process_count(self) -> None:
        others = sorted(
            path.name for path in self.folder.glob("rank*-of*.json") if not path.name.endswith(f"-of{self.world}.json")
        )
        if others:
            world = others[0].removesuffix(".json").rpartition("-of")[2]
            raise InputError(
                f"the checkpoint in {self.folder} was written by {world} processes ({', '.join(others)}); resume it with "
                f"{world} processes (accelerate launch --num_processes {world}), or start over in a new --checkpoint folder"
            )

    def _read_index(self) -> dict[str, Any] | None:
        if not self._index_file.is_file():
            return None
        try:
            record = json.loads(self._index_file.read_text())
            if not isinstance(record, dict) or not _RECORD_KEYS <= set(record):
                raise ValueError(f"it holds no {sorted(_RECORD_KEYS)}")
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(
                f"{self._index_file} is not a readable checkpoint record ({exc}): the checkpoint is damaged; delete "
                f"the folder {self.folder} to start over"
            ) from exc
        return record

    def remove(self) -> None:
        """Delete this process's files (the run is complete; the folder itself is left to the caller)."""
        record = self._read_index()
        if record is not None:
            (self.folder / record["state_file"]).unlink(missing_ok=True)
        self._index_file.unlink(missing_ok=True)

    def load(self, spec: SketchSpec, device: torch.device) -> tuple[SketchState, Progress]:
        """The saved state and position; a fresh start when this process had not checkpointed yet.

        Refused: a checkpoint of another run (``run_key`` differs), or one written by another number of
        processes (their shards of the documents differ, so their positions cannot be continued)."""
        record = self._read_index()
        if record is None:
            self._check_no_other_process_count()
            return SketchState(spec, device=device), Progress()
        if record["run"] != self.run_key:
            differing = sorted(
                k for k in set(record["run"]) | set(self.run_key) if record["run"].get(k) != self.run_key.get(k)
            )
            values = "; ".join(
                f"{k} {record['run'].get(k)!r} in the checkpoint, {self.run_key.get(k)!r} now" for k in differing
            )
            raise InputError(
                f"the checkpoint in {self.folder} is from a different run (differs in {differing}): {values}. Resume "
                "with the same model, data, sketch options and number of processes, or use a new --checkpoint folder"
            )
        state = SketchState.load(self.folder / record["state_file"], device=device)
        progress = Progress(
            record["next_index"],
            record["batches"],
            DocumentCounts(**record["counts"]),
            record.get("reading_state"),
            record.get("own_shard_sizes"),
        )
        return state, progress


def has_checkpoint(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a checkpoint record of any process."""
    path = Path(folder)
    return path.is_dir() and any(path.glob("rank*-of*.json"))


def check_checkpoint_folder(folder: str | os.PathLike, *, resume: bool) -> None:
    """Refuse, before the model loads, a ``--checkpoint`` that is a file, and a ``--resume`` from a folder with no
    checkpoint in it (a mistyped path would otherwise start again from the first document without a word)."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise InputError(f"--checkpoint {path} is a file, not a folder: give a folder (it is created if missing)")
    if resume and not has_checkpoint(path):
        found = "no such folder" if not path.exists() else "no rank*-of*.json checkpoint record in it"
        raise InputError(
            f"--resume: {path} holds no checkpoint ({found}, from {os.getcwd()}): check the --checkpoint path, or "
            "drop --resume to start from the first document"
        )


def remove_checkpoints(folder: str | os.PathLike, rank: int, world: int) -> None:
    """Delete process ``rank``'s checkpoint files of a complete run."""
    Checkpointer(folder, rank, world, run_key={}, every=1).remove()


def remove_if_empty(folder: str | os.PathLike) -> None:
    """Remove the checkpoint folder when nothing else is in it (a folder that holds other files stays)."""
    path = Path(folder)
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()
