"""Fisher alignment between signatures (SPEC §1–2) with the split-sample bias correction.

Â(i,j) = ⟨μ̂_i, μ̂_j⟩ / √(⟨μ̂^A_i, μ̂^B_i⟩ ⟨μ̂^A_j, μ̂^B_j⟩); the same for S_a (activation) and S_e (error);
coupling ρ = A / (S_a S_e). Standard error ≈ c·√(R̂_i R̂_j / m) with R̂ = ‖μ̂‖²/⟨μ̂^A, μ̂^B⟩ and c
calibrated per estimator by ``benchmarks/estimator_accuracy.py``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from fishersketch.core.signature import Signature
from fishersketch.core.state import SKETCHES
from fishersketch.errors import IncompatibleSignaturesError, InputError

#: c in stderr ≈ c √(R̂_i R̂_j / m), keyed by (estimator, reflection used); fitted on synthetic
#: tasks by benchmarks/estimator_accuracy.py (see benchmarks/results/estimator_accuracy.json).
STDERR_CONSTANTS = {
    ("maclaurin-srht", False): 2.1,
    ("maclaurin-srht", True): 1.2,
    ("maclaurin-folded", False): 2.3,
    ("maclaurin-folded", True): 1.2,
}
#: ρ is reported only where S_a and S_e exceed this many standard errors.
SIGNIFICANCE_Z = 2.0


def stderr_constant(signature: Signature) -> float:
    return STDERR_CONSTANTS[(signature.spec.estimator, signature.spec.reflection is not None)]


@dataclasses.dataclass(frozen=True)
class AlignmentResult:
    """Fisher alignment A, its factors S_a, S_e, the coupling ρ and standard errors."""

    fisher: float
    activation: float
    error: float
    coupling: float | None
    stderr: float
    activation_stderr: float
    error_stderr: float
    coupling_stderr: float | None
    coupling_significant: bool
    sketch_id: str

    def as_dict(self) -> dict[str, float | bool | str | None]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class AlignmentMatrix:
    """All-pairs alignments; each field an (n, n) float64 tensor (coupling NaN where undefined)."""

    names: list[str]
    fisher: torch.Tensor
    activation: torch.Tensor
    error: torch.Tensor
    coupling: torch.Tensor
    stderr: torch.Tensor
    activation_stderr: torch.Tensor
    error_stderr: torch.Tensor
    coupling_stderr: torch.Tensor
    sketch_id: str

    def pair(self, i: int, j: int) -> AlignmentResult:
        coupling = float(self.coupling[i, j])
        defined = not math.isnan(coupling)
        coupling_se = float(self.coupling_stderr[i, j])
        return AlignmentResult(
            fisher=float(self.fisher[i, j]),
            activation=float(self.activation[i, j]),
            error=float(self.error[i, j]),
            coupling=coupling if defined else None,
            stderr=float(self.stderr[i, j]),
            activation_stderr=float(self.activation_stderr[i, j]),
            error_stderr=float(self.error_stderr[i, j]),
            coupling_stderr=coupling_se if defined else None,
            coupling_significant=defined and abs(coupling - 1.0) > SIGNIFICANCE_Z * coupling_se,
            sketch_id=self.sketch_id,
        )


def check_compatible(signatures: Sequence[Signature]) -> None:
    """Raise ``IncompatibleSignaturesError`` naming the differing fields unless all share a sketch id."""
    if not signatures:
        raise InputError("no signatures given")
    for signature in signatures:
        if not isinstance(signature, Signature):
            raise InputError(f"expected a Signature, got {type(signature).__name__}; load it with load_signature()")
    first = signatures[0]
    for other in signatures[1:]:
        differences = first.spec.differences(other.spec)
        if differences:
            raise IncompatibleSignaturesError(differences)


def _same_data(a: Signature, b: Signature) -> bool:
    return a is b or (
        torch.equal(a.joint, b.joint) and torch.equal(a.split_norms, b.split_norms) and a.num_tokens == b.num_tokens
    )


def alignment_matrix(signatures: Sequence[Signature], names: Sequence[str] | None = None) -> AlignmentMatrix:
    """Pairwise alignments of compatible signatures.

    A pair of identical signatures uses the unbiased self inner product ⟨μ̂^A, μ̂^B⟩, so it is 1 with
    stderr 0. ρ is NaN where S_a or S_e is within ``SIGNIFICANCE_Z`` standard errors of 0.
    """
    signatures = list(signatures)
    check_compatible(signatures)
    m = signatures[0].spec.m
    means = torch.stack([torch.stack([getattr(s, k).double() for s in signatures]) for k in SKETCHES])
    norms = torch.stack([s.split_norms.double() for s in signatures], dim=1)  # (3, n)
    gram = means @ means.transpose(1, 2)  # (3, n, n)
    scale = torch.sqrt(norms[:, :, None] * norms[:, None, :])
    same = torch.tensor([[_same_data(a, b) for b in signatures] for a in signatures])
    cosine = torch.where(same, torch.ones_like(gram), gram / scale)
    dominance = torch.diagonal(gram, dim1=1, dim2=2) / norms  # R̂, (3, n)
    constants = torch.tensor([stderr_constant(s) for s in signatures], dtype=torch.float64)
    c = torch.sqrt(constants[:, None] * constants[None, :])
    stderr = c * torch.sqrt(dominance[:, :, None] * dominance[:, None, :] / m)
    stderr = torch.where(same, torch.zeros_like(stderr), stderr)
    fisher, activation, error = cosine
    defined = same | ((activation > SIGNIFICANCE_Z * stderr[1]) & (error > SIGNIFICANCE_Z * stderr[2]))
    nan = torch.full_like(fisher, math.nan)
    coupling = torch.where(defined, fisher / (activation * error), nan)
    relative = torch.sqrt(
        (stderr[0] / fisher.abs().clamp_min(1e-300)) ** 2
        + (stderr[1] / activation.abs().clamp_min(1e-300)) ** 2
        + (stderr[2] / error.abs().clamp_min(1e-300)) ** 2
    )
    coupling_stderr = torch.where(defined, coupling.abs() * relative, nan)
    return AlignmentMatrix(
        names=list(names) if names is not None else [s.metadata.get("dataset", f"#{i}") for i, s in enumerate(signatures)],
        fisher=fisher,
        activation=activation,
        error=error,
        coupling=coupling,
        stderr=stderr[0],
        activation_stderr=stderr[1],
        error_stderr=stderr[2],
        coupling_stderr=coupling_stderr,
        sketch_id=signatures[0].sketch_id,
    )


def alignment(source: Signature, target: Signature) -> AlignmentResult:
    """Alignment of two signatures with error bars and the three-factor decomposition."""
    return alignment_matrix([source, target]).pair(0, 1)
