"""The documents of one process, in dataset order, with global indices, as batches.

A *document* is one row of the dataset. Its global index i is its position in the dataset (after the
split is chosen), so the split half ``i mod 2`` (SPEC §2) does not depend on batching or on the number of
processes; process k of N sketches the documents i ≡ k (mod N). Labels follow the Hugging Face convention
(aligned with ``input_ids``, −100 = not scored; the model predicts ``labels[t]`` from positions < t), so a
document has ``#{t ≥ 1 : labels[t] ≠ −100}`` scored tokens and needs at least 2 tokens.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Iterator
from typing import Any

from fisherhub.core.errors import InputError
from fisherhub.data.batches import Batch, Document, collate
from fisherhub.data.sources import dataset_fingerprint, decoded, load_source
from fisherhub.data.tokenization import DocumentTokenizer
from fisherhub.options import DataOptions


@dataclasses.dataclass
class DocumentCounts:
    """Documents a process looked at (its shard) and how many had no scored token."""

    seen: int = 0
    too_short: int = 0


class DocumentStream:
    """The documents of process k of N (global indices i ≡ k mod N), in dataset order, tokenized.
    ``source``: the loaded dataset when it was already checked (``load_source``), else it is loaded here.

    A stream whose shard count is a multiple of N (and no ``max_tokens``, which counts in global order) is
    read by shards instead: process k reads only its shards j ≡ k (mod N) (``split_dataset_by_node``), and
    each row keeps its global index (the rows of the shards before it, ``shard_sizes``, plus its position in
    the shard). The sketcher sets ``shard_sizes`` from every process's ``count_own_shards()`` first.
    ``reading_state()`` is where a stream stands (``IterableDataset.state_dict()``); ``documents`` resumes
    there without reading the rows before it again.
    """

    def __init__(self, args: DataOptions, tokenizer, process_index: int = 0, num_processes: int = 1, source=None):
        if not 0 <= process_index < num_processes:
            raise InputError(f"process index {process_index} out of range for {num_processes} processes")
        self.args = args
        self.source = load_source(args) if source is None else source
        self.fingerprint = dataset_fingerprint(self.source, args)
        self.tokenize = DocumentTokenizer(tokenizer, args)
        self.pad_token_id = _pad_token_id(tokenizer)
        self.process_index = process_index
        self.num_processes = num_processes
        self.counts = DocumentCounts()
        self.position = 0  # global index after the last row looked at: resume from here
        self.shard_sizes: list[int] | None = None  # rows of every shard, when reading by shards
        self._reading = None  # the IterableDataset being read (for its state_dict)

    @functools.cached_property
    def fingerprint(self) -> str | None:
        """``dataset_fingerprint`` (resolved only when a checkpoint needs it)."""
        return dataset_fingerprint(self.source, self.args)

    @property
    def reads_own_shards(self) -> bool:
        import datasets

        return (
            self.num_processes > 1
            and isinstance(self.source, datasets.IterableDataset)
            and self.source.num_shards % self.num_processes == 0
            and self.args.max_tokens is None
        )

    def own_shards(self) -> range:
        return range(self.process_index, self.source.num_shards, self.num_processes)

    def _shard(self, shard: int):
        return self.source.shard(num_shards=self.source.num_shards, index=shard).select_columns([self.args.column])

    def count_own_shards(self) -> list[int]:
        """The rows of each own shard (read, not tokenized), in ``own_shards()`` order."""
        return [sum(1 for _ in decoded(self._shard(shard), self.args)) for shard in self.own_shards()]

    def reading_state(self) -> dict[str, Any] | None:
        """Where the stream being read stands (``IterableDataset.state_dict()``, JSON-able), for
        ``documents(reading_state=...)``; None for a map-style dataset, or a stream resumed by skipping rows."""
        return None if self._reading is None else self._reading.state_dict()

    def documents(self, start_index: int = 0, reading_state: dict[str, Any] | None = None) -> Iterator[Document]:
        """Own documents with global index ≥ ``start_index``; ``counts`` covers those looked at.
        ``reading_state``: of a stream, where it stood at ``start_index`` (else its rows up to there are skipped)."""
        args = self.args
        tokens_so_far = 0
        self.position = start_index
        for index, row in decoded(self._indexed_rows(start_index, reading_state), args):
            if args.max_documents is not None and index >= args.max_documents:
                return
            if args.max_tokens is not None and tokens_so_far >= args.max_tokens:
                return
            self.position = max(self.position, index + 1)
            own = (
                self.shard_sizes is not None or index % self.num_processes == self.process_index
            ) and index >= start_index
            if not own and args.max_tokens is None:
                continue
            document = Document(index, *self.tokenize(row))
            tokens_so_far += document.num_scored
            if not own:
                continue
            self.counts.seen += 1
            if document.num_scored == 0:
                self.counts.too_short += 1
                continue
            yield document

    def _indexed_rows(
        self, start_index: int, reading_state: dict[str, Any] | None
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """(global index, row) pairs to look at: all rows when counting tokens, else only own rows."""
        import datasets

        if self.shard_sizes is not None:
            return self._own_shard_rows(self.shard_sizes, start_index, reading_state)
        rows = self.source.select_columns([self.args.column])
        if self.args.max_tokens is not None:
            return enumerate(rows)
        if isinstance(rows, datasets.Dataset):
            stop = len(rows) if self.args.max_documents is None else min(len(rows), self.args.max_documents)
            first = start_index + (self.process_index - start_index) % self.num_processes
            indices = range(first, stop, self.num_processes)
            return zip(indices, rows.select(indices)) if indices else iter(())
        return enumerate(self._resumed(rows, start_index, reading_state), start=start_index)

    def _resumed(self, rows, skip: int, reading_state: dict[str, Any] | None):
        """``rows`` (a stream) from its saved ``reading_state``, else after skipping ``skip`` rows."""
        if reading_state is not None:
            rows.load_state_dict(reading_state)
        elif skip:
            self._reading = None
            return rows.skip(skip)
        self._reading = rows
        return rows

    def _own_shard_rows(
        self, shard_sizes: list[int], start_index: int, reading_state: dict[str, Any] | None
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """This process's shards (``split_dataset_by_node``: j ≡ k mod N, in order), each row with its global
        index: shard j's rows follow the ``shard_sizes`` of the shards before it."""
        from datasets.distributed import split_dataset_by_node

        rows = split_dataset_by_node(self.source, rank=self.process_index, world_size=self.num_processes)
        offsets = [0, *itertools.accumulate(shard_sizes)]
        indices = [range(offsets[shard], offsets[shard + 1]) for shard in self.own_shards()]
        before = sum(min(max(start_index - own.start, 0), len(own)) for own in indices)  # own rows read already
        rows = self._resumed(rows.select_columns([self.args.column]), before, reading_state)
        return zip(itertools.islice(itertools.chain.from_iterable(indices), before, None), rows)

    def batches(
        self, batch_size: int, start_index: int = 0, reading_state: dict[str, Any] | None = None
    ) -> Iterator[Batch]:
        if batch_size < 1:
            raise InputError(f"batch_size must be ≥ 1, got {batch_size}")
        pending: list[Document] = []
        for document in self.documents(start_index, reading_state):
            pending.append(document)
            if len(pending) == batch_size:
                yield collate(pending, self.pad_token_id, self.position)
                pending = []
        if pending:
            yield collate(pending, self.pad_token_id, self.position)

    def estimated_documents(self) -> int | None:
        """This process's share of the documents, for progress bars (None when unknown)."""
        if self.shard_sizes is not None:
            return sum(self.shard_sizes[shard] for shard in self.own_shards())
        try:
            total = len(self.source)
        except TypeError:
            if self.args.max_documents is None:
                return None
            total = self.args.max_documents
        if self.args.max_documents is not None:
            total = min(total, self.args.max_documents)
        return len(range(self.process_index, total, self.num_processes))


def _pad_token_id(tokenizer) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return int(candidate)
    return 0


def check_has_documents(seen: int, too_short: int, args: DataOptions, scored_per_half: list[int] | None = None) -> None:
    """Raise a clear error when no document had a scored token (totals over all processes), or, given the
    scored documents of each split half (i mod 2), when every row of a half had none although it has rows."""
    name = args.provenance()["dataset"]
    if seen == 0:
        raise InputError(f"the dataset {name!r} (split {args.split!r}) has no documents to sketch (empty or max_* = 0)")
    if too_short == seen:
        raise InputError(
            f"all {seen} documents of {name!r} are shorter than 2 tokens after tokenization "
            f"(column {args.column!r}{', assistant turns only' if args.messages_column else ''}): "
            "nothing to score. Check the column, or the max_length."
        )
    rows_per_half = ((seen + 1) // 2, seen // 2)  # the rows seen are the global indices 0 .. seen-1
    for half, (rows, scored) in enumerate(zip(rows_per_half, scored_per_half or rows_per_half)):
        if rows and not scored:
            raise InputError(
                f"half {'AB'[half]} got no scored tokens because every {('even', 'odd')[half]}-indexed row is empty or "
                f"shorter than 2 tokens ({rows} of the {seen} documents given); the split-sample norm needs scored "
                "documents at even and at odd positions. Drop the empty rows first (e.g. "
                f"dataset.filter(lambda row: bool(row[{args.column!r}].strip())))"
            )
