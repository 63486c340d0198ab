"""Small synthetic tasks for the core tests: activations and softmax errors from a shared head."""

from __future__ import annotations

import torch

from fisherhub.core.batch import HeadBatch
from fisherhub import SketchSpec, SketchState


def softmax_errors(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """e = softmax(z) − onehot(y)."""
    errors = torch.softmax(logits.double(), dim=-1)
    errors[torch.arange(len(labels)), labels] -= 1.0
    return errors.float()


def synthetic_task(
    n: int, d: int, vocab_size: int, *, seed: int, label_block: tuple[int, int] | None = None,
    activations: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A task: activations (shared mean + noise) and errors of a random head whose softmax is
    restricted to ``label_block`` (a masked softmax) when given."""
    generator = torch.Generator().manual_seed(seed)
    if activations is None:
        activations = 1.0 + torch.randn(n, d, generator=generator)
    head = torch.randn(vocab_size, d, generator=torch.Generator().manual_seed(1234)) / d**0.5
    logits = activations.double() @ head.double().T
    if label_block is not None:
        mask = torch.full((vocab_size,), float("-inf"), dtype=torch.float64)
        mask[label_block[0] : label_block[1]] = 0.0
        logits = logits + mask
    labels = torch.multinomial(torch.softmax(logits, -1).float(), 1, generator=generator).squeeze(1)
    return activations, softmax_errors(logits, labels)


def sketch(spec: SketchSpec, activations: torch.Tensor, errors: torch.Tensor, doc_index: torch.Tensor | None = None):
    doc_index = torch.arange(len(activations)) if doc_index is None else doc_index
    return SketchState(spec).update(HeadBatch(activations=activations, doc_index=doc_index, errors=errors)).finalize({"dataset": "synthetic"})
