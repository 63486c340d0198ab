"""Datasets in, tokenized documents with global indices out.

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
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from fisherhub.core.batch import IGNORE_INDEX
from fisherhub.core.errors import InputError
from fisherhub.data.files import file_builder
from fisherhub.options import DataArgs

#: the one split a local data file (or glob) is: ``datasets`` loads ``data_files={split: path}``
DATA_FILE_SPLIT = DataArgs.split



@dataclasses.dataclass(frozen=True)
class Document:
    index: int
    input_ids: list[int]
    labels: list[int]

    @property
    def num_scored(self) -> int:
        return sum(label != IGNORE_INDEX for label in self.labels[1:])


@dataclasses.dataclass
class Batch:
    """Right-padded tensors for ``capture.sketch_batch`` and the position reached."""

    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T)
    labels: torch.Tensor  # (B, T), IGNORE_INDEX at padding and unscored positions
    doc_index: torch.Tensor  # (B,) global document indices
    next_index: int  # global index of the first row not yet looked at (resume from here)

    @property
    def num_scored(self) -> int:
        return int((self.labels[:, 1:] != IGNORE_INDEX).sum())

    def as_model_inputs(self) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "labels": self.labels,
            "doc_index": self.doc_index,
        }


@dataclasses.dataclass
class DocumentCounts:
    """Documents a process looked at (its shard) and how many had no scored token."""

    seen: int = 0
    too_short: int = 0


# -- loading ------------------------------------------------------------------------------------------
def load_source(args: DataArgs):
    """The ``datasets`` object behind ``args`` (map-style, or iterable when ``streaming``)."""
    import datasets

    source = args.dataset
    if isinstance(source, datasets.DatasetDict | datasets.IterableDatasetDict):
        source = _pick_split(source, args.split)
    elif isinstance(source, (str, os.PathLike)):
        source = _load_path_or_id(args)
    elif not isinstance(source, datasets.Dataset | datasets.IterableDataset):
        raise InputError(
            f"dataset must be a Hub id, a path, or a datasets.Dataset/IterableDataset, got {type(source).__name__}"
        )
    if args.streaming and isinstance(source, datasets.Dataset):
        source = source.to_iterable_dataset()
    if isinstance(source, datasets.Dataset) and len(source) == 0:
        raise InputError(f"the dataset {args.provenance()['dataset']!r} (split {args.split!r}) is empty: nothing to sketch")
    _check_column(source, args)
    return source


def dataset_fingerprint(source, args: DataArgs) -> str | None:
    """What identifies the rows (a resume refuses other rows): ``datasets``' own hash (``Hasher``) of a
    map-style dataset (its table, a memory-mapped one by its files, with its indices and format); for a stream
    of files or a Hub dataset, the builder's config id (it hashes the data files with their modification
    times, or the Hub commit); None for an iterable dataset given in memory."""
    import datasets
    from datasets.fingerprint import Hasher

    if isinstance(source, datasets.Dataset):
        return Hasher.hash(source)
    if isinstance(args.dataset, datasets.Dataset):
        return Hasher.hash(args.dataset)
    if not isinstance(args.dataset, (str, os.PathLike)):
        return None
    name = os.fspath(args.dataset)
    path = Path(name)
    if _is_saved_dataset(path):
        return Hasher.hash(_load_saved_dataset(name, args.split))
    builder = file_builder(path)
    if builder is not None:
        return datasets.load_dataset_builder(builder, data_files={args.split: name}).config_id
    return datasets.load_dataset_builder(name, name=args.config, revision=args.revision).config_id


def _pick_split(dataset_dict, split: str):
    if split not in dataset_dict:
        raise InputError(f"split {split!r} not found; available splits: {sorted(dataset_dict)}")
    return dataset_dict[split]


def _is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file())


def _load_saved_dataset(name: str, split: str):
    """A ``save_to_disk`` folder (memory-mapped), its ``split`` when it holds a DatasetDict."""
    import datasets

    loaded = datasets.load_from_disk(name)
    return _pick_split(loaded, split) if isinstance(loaded, datasets.DatasetDict) else loaded


def _load_path_or_id(args: DataArgs):
    import datasets

    name = os.fspath(args.dataset)
    path = Path(name)
    try:
        if _is_saved_dataset(path):
            return _load_saved_dataset(name, args.split)
        builder = file_builder(path)
        if builder is not None:
            if args.split != DATA_FILE_SPLIT:
                raise InputError(
                    f"--split {args.split!r} names a split of a Hub dataset or a saved DatasetDict, but {name!r} is a "
                    f"data file: it is one split ({DATA_FILE_SPLIT!r}). Leave --split out, or pass the file that holds that split"
                )
            if path.is_file() and path.stat().st_size == 0:
                raise InputError(
                    f"the data file {name!r} is empty (0 bytes): nothing to sketch; pass a file with one document "
                    "per row (or line, for .txt)"
                )
            return datasets.load_dataset(builder, data_files={args.split: name}, split=args.split, streaming=args.streaming)
        return datasets.load_dataset(
            name, name=args.config, split=args.split, revision=args.revision, streaming=args.streaming
        )
    except datasets.exceptions.DatasetGenerationError as exc:
        raise _unreadable(name, exc.__cause__ or exc) from exc
    except (OSError, ValueError, ConnectionError) as exc:
        if isinstance(exc, UnicodeDecodeError):
            raise _unreadable(name, exc) from exc
        raise InputError(
            f"cannot load dataset {name!r} (config {args.config!r}, split {args.split!r}): {exc}. Pass a local "
            "folder/file, or a Hub id available offline in the datasets cache."
        ) from exc


def _unreadable(name: str, cause: BaseException) -> InputError:
    """The error for a data file ``datasets`` cannot read (a text encoding other than UTF-8, most often)."""
    if isinstance(cause, UnicodeDecodeError):
        return InputError(f"cannot read {name!r}: it is not UTF-8 text ({cause}); convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8)")
    return InputError(f"cannot read {name!r}: {type(cause).__name__}: {cause}. Check the file's format and encoding (UTF-8)")


def _decoded(rows: Iterable, args: DataArgs) -> Iterator:
    """``rows``, with the errors of undecodable data (read lazily, row by row) as ``InputError``."""
    from datasets.exceptions import DatasetGenerationError

    try:
        yield from rows
    except (UnicodeDecodeError, DatasetGenerationError) as exc:
        cause = exc if isinstance(exc, UnicodeDecodeError) else exc.__cause__ or exc
        raise _unreadable(args.provenance()["dataset"], cause) from exc


def _check_column(source, args: DataArgs) -> None:
    columns = source.column_names
    if columns is None:  # streaming without known features: look at the first row
        first = next(_decoded(source, args), None)
        if first is None:
            raise InputError(f"the dataset {args.provenance()['dataset']!r} is empty: nothing to sketch")
        columns = list(first)
    if args.column not in columns:
        kind = "messages column" if args.messages_column else "text column"
        raise InputError(
            f"{kind} {args.column!r} not found; the dataset has columns {sorted(columns)}. "
            f"Choose one with {'--messages-column' if args.messages_column else '--text-column'}."
        )


# -- tokenization -------------------------------------------------------------------------------------
class DocumentTokenizer:
    """Turns one row into (input_ids, labels), truncated to ``max_length`` tokens."""

    def __init__(self, tokenizer, args: DataArgs):
        self.tokenizer = tokenizer
        self.args = args
        if args.messages_column:
            if not getattr(tokenizer, "chat_template", None):
                raise InputError("a messages column needs a tokenizer with a chat template (tokenizer.chat_template)")
            if not getattr(tokenizer, "is_fast", False):
                raise InputError("the assistant-only mask of chat data needs a fast tokenizer (character offsets)")

    def __call__(self, row: dict[str, Any]) -> tuple[list[int], list[int]]:
        value = row[self.args.column]
        if self.args.messages_column:
            return self._chat(value)
        if not isinstance(value, str):
            raise InputError(f"column {self.args.column!r} must hold strings, got {type(value).__name__}")
        ids = self.tokenizer(value, truncation=True, max_length=self.args.max_length)["input_ids"]
        return list(ids), list(ids)

    def _render(self, messages: list[dict[str, Any]], generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def _chat(self, messages: Any) -> tuple[list[int], list[int]]:
        """Score the characters each assistant turn adds after the generation prompt (its content + end tag)."""
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise InputError(f"column {self.args.column!r} must hold lists of {{'role', 'content'}} messages")
        text = self._render(messages)
        spans = []
        for turn, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            prompt = self._render(messages[:turn], generation_prompt=True)
            through = self._render(messages[: turn + 1])
            if not (through.startswith(prompt) and text.startswith(through)):
                raise InputError(
                    "the tokenizer's chat template does not render conversations incrementally (a prefix of the "
                    "conversation is not a prefix of its rendering), so the assistant tokens cannot be located"
                )
            spans.append((len(prompt), len(through)))
        encoding = self.tokenizer(
            text, add_special_tokens=False, return_offsets_mapping=True, truncation=True, max_length=self.args.max_length
        )
        ids = list(encoding["input_ids"])
        labels = [
            token if any(start <= begin < end for start, end in spans) else IGNORE_INDEX
            for token, (begin, _) in zip(ids, encoding["offset_mapping"])
        ]
        return ids, labels


# -- the documents of one process ------------------------------------------------------------------------
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

    def __init__(self, args: DataArgs, tokenizer, process_index: int = 0, num_processes: int = 1, source=None):
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
        return [sum(1 for _ in _decoded(self._shard(shard), self.args)) for shard in self.own_shards()]

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
        for index, row in _decoded(self._indexed_rows(start_index, reading_state), args):
            if args.max_documents is not None and index >= args.max_documents:
                return
            if args.max_tokens is not None and tokens_so_far >= args.max_tokens:
                return
            self.position = max(self.position, index + 1)
            own = (self.shard_sizes is not None or index % self.num_processes == self.process_index) and index >= start_index
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

    def _indexed_rows(self, start_index: int, reading_state: dict[str, Any] | None) -> Iterator[tuple[int, dict[str, Any]]]:
        """(global index, row) pairs to look at: all rows when counting tokens, else only own rows."""
        import datasets

        if self.shard_sizes is not None:
            return self._own_shard_rows(start_index, reading_state)
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

    def _own_shard_rows(self, start_index: int, reading_state: dict[str, Any] | None) -> Iterator[tuple[int, dict[str, Any]]]:
        """This process's shards (``split_dataset_by_node``: j ≡ k mod N, in order), each row with its global
        index: shard j's rows follow the ``shard_sizes`` of the shards before it."""
        from datasets.distributed import split_dataset_by_node

        rows = split_dataset_by_node(self.source, rank=self.process_index, world_size=self.num_processes)
        offsets = [0, *itertools.accumulate(self.shard_sizes)]
        indices = [range(offsets[shard], offsets[shard + 1]) for shard in self.own_shards()]
        before = sum(min(max(start_index - own.start, 0), len(own)) for own in indices)  # own rows read already
        rows = self._resumed(rows.select_columns([self.args.column]), before, reading_state)
        return zip(itertools.islice(itertools.chain.from_iterable(indices), before, None), rows)

    def batches(self, batch_size: int, start_index: int = 0, reading_state: dict[str, Any] | None = None) -> Iterator[Batch]:
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
            total = self.args.max_documents
            if total is None:
                return None
        if self.args.max_documents is not None:
            total = min(total, self.args.max_documents)
        return len(range(self.process_index, total, self.num_processes))


def _pad_token_id(tokenizer) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return int(candidate)
    return 0


def collate(documents: list[Document], pad_token_id: int, next_index: int) -> Batch:
    """Right-pad documents into a batch (padding has attention 0 and label −100)."""
    length = max(len(d.input_ids) for d in documents)
    shape = (len(documents), length)
    input_ids = torch.full(shape, pad_token_id, dtype=torch.long)
    labels = torch.full(shape, IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros(shape, dtype=torch.long)
    for row, document in enumerate(documents):
        size = len(document.input_ids)
        input_ids[row, :size] = torch.tensor(document.input_ids)
        labels[row, :size] = torch.tensor(document.labels)
        attention_mask[row, :size] = 1
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        labels=labels,
        doc_index=torch.tensor([d.index for d in documents], dtype=torch.long),
        next_index=next_index,
    )


def check_has_documents(seen: int, too_short: int, args: DataArgs, scored_per_half: list[int] | None = None) -> None:
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
