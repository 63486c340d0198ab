"""Datasets in, tokenized documents with global indices out.

A *document* is one row of the dataset. Its global index i is its position in the dataset (after the
split is chosen), so the split half ``i mod 2`` (SPEC §2) does not depend on batching or on the number of
processes; process k of N sketches the documents i ≡ k (mod N). Labels follow the Hugging Face convention
(aligned with ``input_ids``, −100 = not scored; the model predicts ``labels[t]`` from positions < t), so a
document has ``#{t ≥ 1 : labels[t] ≠ −100}`` scored tokens and needs at least 2 tokens.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from fisherhub.core.batch import IGNORE_INDEX
from fisherhub.core.errors import InputError

#: file suffix -> ``datasets`` builder, for local data files
FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text", ".arrow": "arrow"}


@dataclasses.dataclass
class DataArgs:
    """Which documents to sketch.

    ``dataset``: a Hub id, a local folder (``save_to_disk`` or a dataset script/folder), a data file or glob
    (json/jsonl/csv/parquet/txt/arrow), or an in-memory ``datasets.Dataset`` / ``IterableDataset``.
    ``messages_column``: a chat column (list of {role, content}) rendered with the tokenizer's chat template;
    only assistant tokens are scored. Otherwise ``text_column`` is scored whole.
    ``max_tokens`` stops once that many scored tokens are reached (the last document kept whole), counted
    in global order, so the same documents are used whatever the number of processes.
    """

    dataset: Any
    config: str | None = None
    split: str = "train"
    revision: str | None = None
    text_column: str = "text"
    messages_column: str | None = None
    streaming: bool = False
    max_documents: int | None = None
    max_tokens: int | None = None
    max_length: int = 512

    def __post_init__(self) -> None:
        for name in ("max_documents", "max_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise InputError(f"DataArgs.{name} must be a positive int or None, got {value!r}")
        if not isinstance(self.max_length, int) or self.max_length < 2:
            raise InputError(f"DataArgs.max_length must be an int ≥ 2 (a scored token needs a context), got {self.max_length!r}")

    @property
    def column(self) -> str:
        return self.messages_column or self.text_column

    def provenance(self) -> dict[str, str]:
        """Signature metadata describing the data (SPEC §3)."""
        if isinstance(self.dataset, (str, os.PathLike)):
            name = os.fspath(self.dataset)
        else:
            info = getattr(self.dataset, "info", None)
            name = getattr(info, "dataset_name", None) or "<in-memory dataset>"
        metadata = {
            "dataset": name,
            "dataset_config": self.config or "",
            "dataset_split": self.split,
            "dataset_revision": self.revision or "",
            "text_column": self.column,
            "max_length": str(self.max_length),
        }
        if self.messages_column:
            metadata["scored"] = "assistant tokens (chat template)"
        return metadata


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


def _pick_split(dataset_dict, split: str):
    if split not in dataset_dict:
        raise InputError(f"split {split!r} not found; available splits: {sorted(dataset_dict)}")
    return dataset_dict[split]


def _load_path_or_id(args: DataArgs):
    import datasets

    name = os.fspath(args.dataset)
    path = Path(name)
    try:
        if path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file()):
            loaded = datasets.load_from_disk(name)
            return _pick_split(loaded, args.split) if isinstance(loaded, datasets.DatasetDict) else loaded
        builder = FILE_BUILDERS.get(path.suffix.lower())
        if builder is not None:
            return datasets.load_dataset(builder, data_files={args.split: name}, split=args.split, streaming=args.streaming)
        return datasets.load_dataset(
            name, name=args.config, split=args.split, revision=args.revision, streaming=args.streaming
        )
    except (OSError, ValueError, ConnectionError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(
            f"cannot load dataset {name!r} (config {args.config!r}, split {args.split!r}): {exc}. Pass a local "
            "folder/file, or a Hub id available offline in the datasets cache."
        ) from exc


def _check_column(source, args: DataArgs) -> None:
    columns = source.column_names
    if columns is None:  # streaming without known features: look at the first row
        first = next(iter(source), None)
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
    """The documents of process k of N (global indices i ≡ k mod N), in dataset order, tokenized."""

    def __init__(self, args: DataArgs, tokenizer, process_index: int = 0, num_processes: int = 1):
        if not 0 <= process_index < num_processes:
            raise InputError(f"process index {process_index} out of range for {num_processes} processes")
        self.args = args
        self.source = load_source(args)
        self.tokenize = DocumentTokenizer(tokenizer, args)
        self.pad_token_id = _pad_token_id(tokenizer)
        self.process_index = process_index
        self.num_processes = num_processes
        self.counts = DocumentCounts()
        self.position = 0  # global index after the last row looked at: resume from here

    def documents(self, start_index: int = 0) -> Iterator[Document]:
        """Own documents with global index ≥ ``start_index``; ``counts`` covers those looked at."""
        args = self.args
        tokens_so_far = 0
        self.position = start_index
        for index, row in self._indexed_rows(start_index):
            if args.max_documents is not None and index >= args.max_documents:
                return
            if args.max_tokens is not None and tokens_so_far >= args.max_tokens:
                return
            self.position = max(self.position, index + 1)
            own = index % self.num_processes == self.process_index and index >= start_index
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

    def _indexed_rows(self, start_index: int) -> Iterator[tuple[int, dict[str, Any]]]:
        """(global index, row) pairs to look at: all rows when counting tokens, else only own rows."""
        import datasets

        rows = self.source.select_columns([self.args.column])
        if self.args.max_tokens is not None:
            return enumerate(rows)
        if isinstance(rows, datasets.Dataset):
            stop = len(rows) if self.args.max_documents is None else min(len(rows), self.args.max_documents)
            first = start_index + (self.process_index - start_index) % self.num_processes
            indices = range(first, stop, self.num_processes)
            return zip(indices, rows.select(indices))
        return enumerate(rows.skip(start_index), start=start_index)

    def batches(self, batch_size: int, start_index: int = 0) -> Iterator[Batch]:
        if batch_size < 1:
            raise InputError(f"batch_size must be ≥ 1, got {batch_size}")
        pending: list[Document] = []
        for document in self.documents(start_index):
            pending.append(document)
            if len(pending) == batch_size:
                yield collate(pending, self.pad_token_id, self.position)
                pending = []
        if pending:
            yield collate(pending, self.pad_token_id, self.position)

    def estimated_documents(self) -> int | None:
        """This process's share of the documents, for progress bars (None when unknown)."""
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


def check_has_documents(seen: int, too_short: int, args: DataArgs) -> None:
    """Raise a clear error when no document had a scored token (totals over all processes)."""
    name = args.provenance()["dataset"]
    if seen == 0:
        raise InputError(f"the dataset {name!r} (split {args.split!r}) has no documents to sketch (empty or max_* = 0)")
    if too_short == seen:
        raise InputError(
            f"all {seen} documents of {name!r} are shorter than 2 tokens after tokenization "
            f"(column {args.column!r}{', assistant turns only' if args.messages_column else ''}): "
            "nothing to score. Check the column, or the max_length."
        )
