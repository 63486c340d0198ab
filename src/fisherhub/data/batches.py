"""Tokenized documents with their global indices, and right-padded batches of them for the capture."""

from __future__ import annotations

import dataclasses

import torch

from fisherhub.core.batch import IGNORE_INDEX


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
