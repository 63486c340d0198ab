"""``HeadBatch``: the one value that crosses from a model into the core (SPEC §1).

N scored tokens: head inputs a (N, d), global document indices (N,), and either the logit gradients
e = ∂ℓ/∂z (N, K), or the head outputs z (N, K) with the next tokens y (N,; −100 = not scored), from which
the core projects e = softmax(z) − onehot(y) without forming it.
"""

from __future__ import annotations

import dataclasses

import torch

from fisherhub.core.errors import InputError

#: targets of rows that are not scored (the cross-entropy convention of PyTorch and Hugging Face).
IGNORE_INDEX = -100


@dataclasses.dataclass(frozen=True)
class HeadBatch:
    """Scored tokens of one batch, the seam between a model and the math (``SketchState.update``):
    ``activations`` and ``doc_index`` with ``errors``, or with ``logits`` and ``targets`` (e is then never
    formed). ``check`` validates it against the spec's d and K.

    Args:
        activations (`torch.Tensor`):
            a, the head's inputs, (N, d).
        doc_index (`torch.Tensor`):
            The global document index of each row, (N,) int64.
        errors (`torch.Tensor`, *optional*):
            e = ∂loss/∂z, (N, K); not with ``logits``.
        logits (`torch.Tensor`, *optional*):
            z, (N, K), with ``targets``: e = softmax(z) − onehot(y).
        targets (`torch.Tensor`, *optional*):
            y, (N,) int64; rows with y = −100 (``IGNORE_INDEX``) are not scored.
    """

    activations: torch.Tensor
    doc_index: torch.Tensor
    errors: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    targets: torch.Tensor | None = None

    @property
    def from_logits(self) -> bool:
        return self.errors is None

    def __len__(self) -> int:
        return int(self.doc_index.shape[0]) if isinstance(self.doc_index, torch.Tensor) else 0

    def scored_rows(self) -> torch.Tensor | None:
        """Indices of the rows with a target (None when every row is scored, or the batch carries e)."""
        if not self.from_logits:
            return None
        assert self.targets is not None  # from_logits: logits with targets
        scored = (self.targets != IGNORE_INDEX).nonzero().flatten()
        return None if len(scored) == len(self.targets) else scored

    def check(self, d: int, vocab_size: int) -> None:
        """Refuse what cannot be sketched with a head of K = ``vocab_size`` rows and d columns: shapes, dtypes,
        NaN/inf, targets outside [0, K), empty batches."""
        if (self.errors is None) == (self.logits is None):
            raise InputError(
                "a HeadBatch carries either errors (N, K) or logits (N, K) with targets, not both or neither"
            )
        name, values = ("logits", self.logits) if self.from_logits else ("errors", self.errors)
        if not isinstance(values, torch.Tensor) or values.ndim != 2 or values.shape[1] != vocab_size:
            raise InputError(
                f"{name} must be a tensor of shape (N, K={vocab_size}), got "
                f"{tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__}: "
                "they must span the whole vocabulary of the head"
            )
        if self.from_logits:
            _check_targets(self.targets, values, vocab_size)
        _check_rows(self.activations, self.doc_index, values.shape[0], d)
        if self.from_logits:
            _check_floating(name, values)  # NaN/inf in z is caught on the projections (one pass fewer)
        else:
            check_finite(name, values)

    def scored(self) -> HeadBatch:
        """The batch with only its scored rows of activations, doc_index and targets (the logits stay whole:
        the core reads their scored rows in place)."""
        rows = self.scored_rows()
        if rows is None:
            return self
        assert self.targets is not None  # rows only from targets
        return dataclasses.replace(
            self, activations=self.activations[rows], doc_index=self.doc_index[rows], targets=self.targets[rows]
        )


def _check_rows(activations, doc_index, n: int, d: int) -> None:
    """activations (N, d) finite floats and doc_index (N,) non-negative integers, N = ``n`` > 0."""
    for name, tensor in (("activations", activations), ("doc_index", doc_index)):
        if not isinstance(tensor, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if activations.ndim != 2 or activations.shape[1] != d:
        raise InputError(f"activations must have shape (N, d={d}), got {tuple(activations.shape)}")
    if doc_index.ndim != 1:
        raise InputError(f"doc_index must be 1-D (N,), got shape {tuple(doc_index.shape)}")
    if activations.shape[0] == 0:
        raise InputError("empty batch: no scored tokens; skip the update instead")
    if n != activations.shape[0] or doc_index.shape[0] != activations.shape[0]:
        raise InputError(
            f"row counts differ: activations {activations.shape[0]}, errors/logits {n}, doc_index {doc_index.shape[0]}"
        )
    check_finite("activations", activations)
    if doc_index.is_floating_point() or doc_index.dtype == torch.bool:
        raise InputError(f"doc_index must be an integer tensor, got {doc_index.dtype}")
    if (doc_index < 0).any():
        raise InputError("doc_index must hold non-negative global document indices")


def _check_targets(targets, logits: torch.Tensor, vocab_size: int) -> None:
    if not isinstance(targets, torch.Tensor) or targets.shape != logits.shape[:1] or targets.is_floating_point():
        raise InputError(f"targets must be an integer tensor of shape ({logits.shape[0]},) (next-token ids or -100)")
    valid = (targets == IGNORE_INDEX) | ((targets >= 0) & (targets < vocab_size))
    if not valid.all():
        raise InputError(
            f"targets must be token ids in [0, K={vocab_size}) or {IGNORE_INDEX}, found "
            f"{int(targets[~valid][0])}: the labels come from another tokenizer"
        )
    if not (targets != IGNORE_INDEX).any():
        raise InputError(f"no scored rows: every target is {IGNORE_INDEX}; skip the update instead")


def _check_floating(name: str, tensor: torch.Tensor) -> None:
    if not tensor.is_floating_point():
        raise InputError(f"{name} must be a floating tensor, got {tensor.dtype}")


def check_finite(name: str, tensor: torch.Tensor) -> None:
    """Refuse NaN/inf by one fast pass over row sums (they propagate) instead of an (N, K) mask."""
    _check_floating(name, tensor)
    row_sums = tensor.sum(dim=1)
    if not torch.isfinite(row_sums).all():
        bad = (~torch.isfinite(row_sums)).nonzero().flatten()[:5].tolist()
        raise InputError(
            f"{name} contain NaN or inf (or overflow) in rows {bad}; run the model in float32 or check the inputs"
        )
