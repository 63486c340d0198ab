"""Scored positions of a batch (SPEC §1), following the Hugging Face convention.

``labels`` has the shape of ``input_ids`` and is shifted inside: position t is scored when
``labels[:, t+1] != -100`` and ``attention_mask[:, t] == attention_mask[:, t+1] == 1``; its next token is
``y_t = labels[:, t+1]``. Every row carries its global document index (``doc_index``, (B,)).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping

import torch

from fisherhub.core.batch import IGNORE_INDEX
from fisherhub.core.errors import InputError
from fisherhub.lm.head import text_config
from fisherhub.options import DataOptions


@dataclasses.dataclass(frozen=True)
class ScoredPositions:
    """The N scored tokens of a batch (int64 tensors, each (N,), in row-major order)."""

    rows: torch.Tensor  # batch row
    positions: torch.Tensor  # position t in the (padded) row
    document_positions: torch.Tensor  # t minus the padding before it: the position within the document
    targets: torch.Tensor  # next token y_t = labels[row, t + 1]

    def __len__(self) -> int:
        return self.rows.numel()


def _integer_matrix(batch: Mapping, key: str, shape: torch.Size | None = None) -> torch.Tensor:
    tensor = batch[key]
    if not isinstance(tensor, torch.Tensor) or tensor.ndim != 2 or tensor.is_floating_point():
        raise InputError(f"batch[{key!r}] must be a 2-D integer tensor (B, T), got {describe(tensor)}")
    if shape is not None and tensor.shape != shape:
        raise InputError(f"batch[{key!r}] has shape {tuple(tensor.shape)}, expected that of input_ids {tuple(shape)}")
    return tensor


def describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def attention_mask(batch: Mapping) -> torch.Tensor:
    input_ids = _integer_matrix(batch, "input_ids")
    if batch.get("attention_mask") is None:
        return torch.ones_like(input_ids)
    return _integer_matrix(batch, "attention_mask", input_ids.shape)


def scored_positions(batch: Mapping) -> ScoredPositions:
    """Scored tokens of a batch: t with labels[:, t+1] ≠ −100 and attention_mask[:, t] = attention_mask[:, t+1] = 1.

    Without ``labels`` the labels are ``input_ids`` with padding (attention mask 0) masked.
    """
    if "input_ids" not in batch:
        raise InputError(f"the batch has no 'input_ids' (keys: {sorted(batch)})")
    input_ids = _integer_matrix(batch, "input_ids")
    mask = attention_mask(batch).to(input_ids.device)
    if batch.get("labels") is None:
        labels = input_ids.masked_fill(mask == 0, IGNORE_INDEX)
    else:
        labels = _integer_matrix(batch, "labels", input_ids.shape).to(input_ids.device)
    next_labels = labels[:, 1:]
    keep = (next_labels != IGNORE_INDEX) & (mask[:, :-1] == 1) & (mask[:, 1:] == 1)
    rows, positions = keep.nonzero(as_tuple=True)
    targets = next_labels[rows, positions]
    if (targets < 0).any():
        raise InputError(f"labels must be token ids or {IGNORE_INDEX}, found {int(targets.min())}")
    document_positions = (mask.cumsum(dim=1) - 1)[rows, positions]
    return ScoredPositions(rows=rows, positions=positions, document_positions=document_positions, targets=targets)


def document_indices(batch: Mapping, batch_size: int) -> torch.Tensor:
    """The rows' global document indices (B,), int64 on the CPU."""
    doc_index = batch.get("doc_index")
    if doc_index is None:
        raise InputError(
            "the batch has no 'doc_index': give every row its global document index (B,); "
            "the split half is doc_index mod 2, so it must not depend on batching"
        )
    doc_index = torch.as_tensor(doc_index)
    if doc_index.shape != (batch_size,) or doc_index.is_floating_point() or doc_index.dtype == torch.bool:
        raise InputError(
            f"batch['doc_index'] must be an integer tensor of shape ({batch_size},), got {describe(doc_index)}"
        )
    if (doc_index < 0).any() or (doc_index >= 2**31).any():
        raise InputError("batch['doc_index'] must hold global document indices in [0, 2**31)")
    return doc_index.long().cpu()


#: config attributes that bound a model's positions (learned or tabled position embeddings index by them)
MAX_POSITION_ATTRIBUTES = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def max_positions(model: torch.nn.Module) -> int | None:
    """The most positions ``model`` takes (its config's ``max_position_embeddings`` or alike), None if unstated."""
    config = text_config(model)
    for name in MAX_POSITION_ATTRIBUTES:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 2:
            return value
    return None


def within_model_context(data: DataOptions, model: torch.nn.Module) -> DataOptions:
    """``data``, with ``max_length`` lowered to the model's position limit where that is smaller (with a warning:
    a longer document would index past the model's position embeddings)."""
    limit = max_positions(model)
    if limit is None or data.max_length <= limit:
        return data
    warnings.warn(
        f"max_length {data.max_length} exceeds the model's {limit} positions (its config); documents are truncated "
        f"to {limit} tokens",
        stacklevel=3,
    )
    return dataclasses.replace(data, max_length=limit)
