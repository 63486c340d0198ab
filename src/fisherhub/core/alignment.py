"""Fisher alignment between signatures (SPEC §1–2) with the split-sample bias correction.

Â(i,j) = ⟨μ̂_i, μ̂_j⟩ / √(⟨μ̂^A_i, μ̂^B_i⟩ ⟨μ̂^A_j, μ̂^B_j⟩); the same for S_a (activation) and S_e (error);
coupling ρ = A / (S_a S_e). Standard error of each sketch ≈ c·√(R̂_i R̂_j / m), with R̂ = ‖μ̂‖²/⟨μ̂^A, μ̂^B⟩
of that sketch and c its own constant (``STDERR_CONSTANTS``, per estimator, reflection and sketch; fitted by
``benchmarks/estimator_accuracy.py`` and on a real LM). For example, folded with the reflection / without it:
A 1.3 / 2.3, S_a 0.8 / 1.2, S_e 1.1. It is never below the pair's own feature-level standard error
(``feature_stderr``), which catches feature products heavier-tailed than the calibration's, e.g. tasks that
share their inputs and differ only in a few labels.

A signature whose split-sample norm was not resolved (``SketchState.finalize`` clamped it, see
``signature.CLAMPED_NORMS_KEY``) gives alignments shrunk toward 0 with wide error bars, flagged ``norm_clamped``.
Optionally (``shrink_coupling=True``) ρ is shrunk toward the separable value 1 by empirical Bayes over the
pairs of the matrix: ρ̃ = 1 + w (ρ̂ − 1), w = τ² / (τ² + se²), τ² = max(0, mean (ρ̂ − 1)² − mean se²) over the
pairs where ρ is reported. Its standard error stays the unshrunk se: the posterior √w · se would claim ρ = 1
exactly wherever τ² is estimated as 0.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from fisherhub.core.registry import SKETCHES
from fisherhub.core.signature import CLAMPED_NORMS_KEY, Signature
from fisherhub.core.errors import InputError
from fisherhub.core.geometry import GEOMETRIES
from fisherhub.core.shrinkage import shrink


@dataclasses.dataclass(frozen=True)
class StderrConstants:
    """c in stderr ≈ c √(R̂_i R̂_j / m) for each sketch (the fields are named as in ``SKETCHES``)."""

    joint: float
    activation: float
    error: float

    def as_tensor(self) -> torch.Tensor:
        """(3,) float64 in ``SKETCHES`` order."""
        return torch.tensor([getattr(self, name) for name in SKETCHES], dtype=torch.float64)


#: c per sketch, keyed by (estimator, reflection used), read from ``calibration.json`` beside this file: each
#: entry records the benchmark runs that fitted it.
CALIBRATION_FILE = Path(__file__).with_name("calibration.json")


def _read_calibration() -> dict[tuple[str, bool], StderrConstants]:
    entries = json.loads(CALIBRATION_FILE.read_text(encoding="utf-8"))["constants"]
    return {
        (entry["estimator"], entry["reflection"]): StderrConstants(*(entry[name] for name in SKETCHES))
        for entry in entries
    }


STDERR_CONSTANTS = _read_calibration()


def stderr_constants(estimator: str, reflection: bool) -> StderrConstants:
    """The calibrated c of each sketch for an estimator with or without the Householder reflection."""
    try:
        return STDERR_CONSTANTS[(estimator, reflection)]
    except KeyError:
        calibrated = ", ".join(f"{e}{' + reflection' if r else ''}" for e, r in STDERR_CONSTANTS)
        raise InputError(
            f"no standard-error constants for estimator {estimator!r} {'with' if reflection else 'without'} the "
            f"reflection (calibrated: {calibrated}); fit them with benchmarks/estimator_accuracy.py and add them to "
            "fisherhub/core/calibration.json, or pass constants= to alignment_matrix"
        ) from None


@dataclasses.dataclass(frozen=True)
class AlignmentResult:
    """The alignment of two signatures, keyed by geometry name (``core.geometry``: A, S_a, S_e, the coupling
    ρ = A / (S_a S_e), and any geometry registered with a kernel), with standard errors (``alignment`` makes
    one; ``AlignmentMatrix.pair`` reads one out of a matrix). ``.fisher``, ``.activation``, ``.error``,
    ``.coupling`` and their ``…stderr`` read the built-in geometries.

    Args:
        values (`dict[str, float | None]`):
            Geometry name -> its value; None where it is undefined (ρ where S_a or S_e is within
            ``SIGNIFICANCE_Z`` standard errors of 0).
        stderrs (`dict[str, float | None]`):
            Geometry name -> its standard error (None with the value).
        sketch_id (`str`):
            The sketch id both signatures share.
        norm_clamped (`bool`, *optional*):
            A split-sample norm of either signature was not resolved: the values are shrunk toward 0, trust
            the standard errors.
    """

    values: dict[str, float | None]
    stderrs: dict[str, float | None]
    sketch_id: str
    norm_clamped: bool = False

    def _number(self, mapping: dict[str, float | None], name: str) -> float:
        value = mapping[name]
        return math.nan if value is None else value

    @property
    def fisher(self) -> float:
        """A, the cosine of the two joint sketches (split-sample corrected): the Fisher alignment."""
        return self._number(self.values, "fisher")

    @property
    def activation(self) -> float:
        """S_a, the cosine of the activation sketches (what the inputs share)."""
        return self._number(self.values, "activation")

    @property
    def error(self) -> float:
        """S_e, the cosine of the error sketches (what the predicted words share)."""
        return self._number(self.values, "error")

    @property
    def coupling(self) -> float | None:
        """ρ = A / (S_a S_e), None where undefined."""
        return self.values["coupling"]

    @property
    def stderr(self) -> float:
        return self._number(self.stderrs, "fisher")

    @property
    def activation_stderr(self) -> float:
        return self._number(self.stderrs, "activation")

    @property
    def error_stderr(self) -> float:
        return self._number(self.stderrs, "error")

    @property
    def coupling_stderr(self) -> float | None:
        return self.stderrs["coupling"]

    @property
    def coupling_significant(self) -> bool:
        """Whether ρ is defined and departs from 1 by more than ``SIGNIFICANCE_Z`` standard errors."""
        coupling, stderr = self.coupling, self.coupling_stderr
        return coupling is not None and bool(GEOMETRIES["coupling"].significant(coupling, stderr))

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AlignmentResult:
        """The result of a flat record (``as_dict``'s; the geometries it holds, ``coupling_significant``
        recomputed)."""
        held = [g for g in GEOMETRIES.values() if g.kernel is not None and g.name in record]
        return cls(
            {g.name: record[g.name] for g in held},
            {g.name: record[g.stderr_field] for g in held},
            record["sketch_id"],
            bool(record.get("norm_clamped", False)),
        )

    def replace(self, **fields: Any) -> AlignmentResult:
        """This result with some values or standard errors replaced, named by their keys in ``as_dict``."""
        record = self.as_dict()
        unknown = sorted(set(fields) - set(record))
        if unknown:
            raise InputError(f"no field {', '.join(unknown)} in an alignment; its fields are {', '.join(record)}")
        return AlignmentResult.from_record({**record, **fields})

    def as_dict(self) -> dict[str, float | bool | str | None]:
        """A flat record: every computed geometry's value, then its standard error (by ``stderr_field``), then
        ``coupling_significant``, ``sketch_id`` and ``norm_clamped``."""
        return {
            **self.values,
            **{GEOMETRIES[name].stderr_field: se for name, se in self.stderrs.items()},
            "coupling_significant": self.coupling_significant,
            "sketch_id": self.sketch_id,
            "norm_clamped": self.norm_clamped,
        }


@dataclasses.dataclass(frozen=True)
class AlignmentMatrix:
    """All-pairs alignments of n signatures (``alignment_matrix`` makes one), keyed by geometry name like
    ``AlignmentResult``: each value and standard error an (n, n) float64 tensor, symmetric (NaN where a
    geometry is undefined); ``pair(i, j)`` reads one pair.

    Args:
        names (`list[str]`):
            The signatures' names, in the order of the rows.
        values (`dict[str, torch.Tensor]`):
            Geometry name -> its value for every pair (A is 1 on the diagonal).
        stderrs (`dict[str, torch.Tensor]`):
            Geometry name -> its standard errors.
        sketch_id (`str`):
            The sketch id all the signatures share.
        norm_clamped (`torch.Tensor`):
            (n, n) bool: either signature of the pair has a clamped split-sample norm.
    """

    names: list[str]
    values: dict[str, torch.Tensor]
    stderrs: dict[str, torch.Tensor]
    sketch_id: str
    norm_clamped: torch.Tensor

    @property
    def fisher(self) -> torch.Tensor:
        return self.values["fisher"]

    @property
    def activation(self) -> torch.Tensor:
        return self.values["activation"]

    @property
    def error(self) -> torch.Tensor:
        return self.values["error"]

    @property
    def coupling(self) -> torch.Tensor:
        return self.values["coupling"]

    @property
    def stderr(self) -> torch.Tensor:
        return self.stderrs["fisher"]

    @property
    def activation_stderr(self) -> torch.Tensor:
        return self.stderrs["activation"]

    @property
    def error_stderr(self) -> torch.Tensor:
        return self.stderrs["error"]

    @property
    def coupling_stderr(self) -> torch.Tensor:
        return self.stderrs["coupling"]

    def pair(self, i: int, j: int) -> AlignmentResult:
        """The alignment of signatures ``i`` and ``j`` (a NaN value, and its standard error, as None)."""
        values: dict[str, float | None] = {}
        stderrs: dict[str, float | None] = {}
        for name, matrix in self.values.items():
            value = float(matrix[i, j])
            defined = not math.isnan(value)
            values[name] = value if defined else None
            stderrs[name] = float(self.stderrs[name][i, j]) if defined else None
        return AlignmentResult(values, stderrs, self.sketch_id, bool(self.norm_clamped[i, j]))


def feature_stderr(means: torch.Tensor, norms: torch.Tensor, cosine: torch.Tensor) -> torch.Tensor:
    """(…, n, n) standard error of each cosine from its own m features (delta method over features).

    With x_r = μ̂_i,r μ̂_j,r, s = √(D_i D_j) (split norms D) and cosine a = Σ_r x_r / s, feature r adds
    g_r = x_r/s − (a/2)(μ̂_i,r²/‖μ̂_i‖² + μ̂_j,r²/‖μ̂_j‖²) (Σ_r g_r = 0), and se² = m/(m−1) Σ_r g_r², as if the
    features were independent; expanded into Gram matrices of powers of μ̂. ``means`` (…, n, m), ``norms``
    (…, n) the split norms D, ``cosine`` (…, n, n).
    """
    m = means.shape[-1]
    squares = means.square()
    length = squares.sum(dim=-1)  # ‖μ̂_i‖²
    fourth = squares.square().sum(dim=-1) / length.square()  # Σ_r μ̂_i,r⁴ / ‖μ̂_i‖⁴
    product_of_squares = squares @ squares.transpose(-1, -2)  # Σ_r μ̂_i,r² μ̂_j,r²
    cube_by_linear = (squares * means) @ means.transpose(-1, -2) / length[..., :, None]  # Σ_r μ̂_i,r³ μ̂_j,r / ‖μ̂_i‖²
    scale_squared = norms[..., :, None] * norms[..., None, :]
    both_lengths = length[..., :, None] * length[..., None, :]
    total = (
        product_of_squares / scale_squared
        + cosine.square() / 4 * (fourth[..., :, None] + fourth[..., None, :] + 2 * product_of_squares / both_lengths)
        - cosine / scale_squared.sqrt() * (cube_by_linear + cube_by_linear.transpose(-1, -2))
    )
    return torch.sqrt(total.clamp_min(0.0) * m / (m - 1))


def sketch_means(signatures: Sequence[Signature]) -> tuple[torch.Tensor, torch.Tensor]:
    """The signatures' means μ̂, (3, n, m), and split norms ⟨μ̂^A, μ̂^B⟩, (3, n), float64, in ``SKETCHES`` order."""
    means = torch.stack([torch.stack([getattr(s, k).double() for s in signatures]) for k in SKETCHES])
    norms = torch.stack([s.split_norms.double() for s in signatures], dim=1)
    return means, norms


def check_compatible(signatures: Sequence[Signature]) -> None:
    """Raise ``IncompatibleSignaturesError`` naming the differing fields unless all are ``compatible_with`` each other."""
    if not signatures:
        raise InputError("no signatures given")
    for signature in signatures:
        if not isinstance(signature, Signature):
            raise InputError(f"expected a Signature, got {type(signature).__name__}; load it with load_signature()")
    for other in signatures[1:]:
        signatures[0].spec.require_compatible(other.spec)


#: two signatures with the same counts whose sketches and split norms agree within this relative distance are
#: of the same data: the same sums added in another order (N processes, another batch size) differ by a few
#: float32 roundings (≤ 1e-7), the same data in another precision by ~1e-2, other data by far more
SAME_DATA_TOLERANCE = 1e-6


def same_data(a: Signature, b: Signature) -> bool:
    """Whether ``a`` and ``b`` are sketches of the same documents (``SAME_DATA_TOLERANCE``): their alignment is
    then 1 exactly, not the ≈ R̂ ≥ 1 of two sketches of independent data."""
    if a is b:
        return True
    if (a.num_tokens, a.num_documents) != (b.num_tokens, b.num_documents):
        return False
    pairs = [(x.double(), y.double()) for x, y in zip((*a.sketches(), a.split_norms), (*b.sketches(), b.split_norms))]
    return all(float((x - y).norm()) <= SAME_DATA_TOLERANCE * float(x.norm()) for x, y in pairs)


def shrink_toward_separable(coupling: torch.Tensor, stderr: torch.Tensor) -> torch.Tensor:
    """ρ shrunk toward 1 (``shrinkage.shrink`` with prior mean 1) over the finite off-diagonal entries;
    NaN where ρ is NaN, the diagonal (a signature with itself: ρ = 1 exactly) unchanged."""
    off_diagonal = ~torch.eye(coupling.shape[0], dtype=torch.bool)
    reported = off_diagonal & coupling.isfinite() & stderr.isfinite()
    if not reported.any():
        return coupling
    shrunk = coupling.clone()
    shrunk[reported] = shrink(coupling[reported], stderr[reported], prior_mean=1.0)
    return shrunk


def alignment_matrix(
    signatures: Sequence[Signature],
    names: Sequence[str] | None = None,
    *,
    constants: StderrConstants | None = None,
    shrink_coupling: bool = False,
) -> AlignmentMatrix:
    """Pairwise alignments of compatible signatures.

    A pair of sketches of the same data (``same_data``: identical, or equal within float rounding) is 1 with
    stderr 0. ρ is NaN where S_a or S_e is within ``SIGNIFICANCE_Z`` standard errors of 0.

    Args:
        signatures (`Sequence[Signature]`):
            Signatures of one sketch id (and pilot direction).
        names (`Sequence[str]`, *optional*):
            A name per signature (default: each signature's ``dataset`` metadata, else ``#i``).
        constants (`StderrConstants`, *optional*):
            Replaces the calibrated c of the signatures' estimator (all ones: the stderr fields are
            max(√(R̂_i R̂_j / m), ``feature_stderr``)).
        shrink_coupling (`bool`, *optional*, defaults to `False`):
            Shrink ρ toward 1 (``shrink_toward_separable``).

    Returns:
        `AlignmentMatrix`: every pair's A, S_a, S_e, ρ and their standard errors.

    Raises:
        `IncompatibleSignaturesError`: the signatures differ in sketch id or pilot direction.
        `InputError`: no signatures, or something that is not a ``Signature``.
    """
    signatures = list(signatures)
    check_compatible(signatures)
    means, norms = sketch_means(signatures)
    gram = means @ means.transpose(1, 2)  # (3, n, n)
    scale = torch.sqrt(norms[:, :, None] * norms[:, None, :])
    same = torch.tensor([[same_data(a, b) for b in signatures] for a in signatures])
    cosine = torch.where(same, torch.ones_like(gram), gram / scale)
    dominance = torch.diagonal(gram, dim1=1, dim2=2) / norms  # R̂, (3, n)
    spec = signatures[0].spec
    if constants is None:
        constants = stderr_constants(spec.estimator, spec.reflection is not None)
    c = constants.as_tensor()[:, None, None]
    stderr = c * torch.sqrt(dominance[:, :, None] * dominance[:, None, :] / spec.m)
    stderr = torch.maximum(stderr, feature_stderr(means, norms, cosine))
    stderr = torch.where(same, torch.zeros_like(stderr), stderr)
    by_sketch = dict(zip(SKETCHES, cosine))
    stderr_by_sketch = dict(zip(SKETCHES, stderr))
    values, stderrs = {}, {}
    for geometry in GEOMETRIES.values():
        if geometry.kernel is not None:
            values[geometry.name], stderrs[geometry.name] = geometry.kernel(by_sketch, stderr_by_sketch, same)
    if shrink_coupling:
        values["coupling"] = shrink_toward_separable(values["coupling"], stderrs["coupling"])
    clamped = torch.tensor([bool(s.metadata.get(CLAMPED_NORMS_KEY)) for s in signatures])
    return AlignmentMatrix(
        names=list(names)
        if names is not None
        else [s.metadata.get("dataset", f"#{i}") for i, s in enumerate(signatures)],
        values=values,
        stderrs=stderrs,
        sketch_id=signatures[0].sketch_id,
        norm_clamped=clamped[:, None] | clamped[None, :],
    )


def alignment(source: Signature, target: Signature) -> AlignmentResult:
    """Alignment of two signatures with error bars and the three-factor decomposition A = ρ · S_a · S_e.

    Args:
        source (`Signature`):
            One signature, e.g. a candidate's training data.
        target (`Signature`):
            The other, of the same sketch id (sketch it ``like=`` the source).

    Returns:
        `AlignmentResult`: A, S_a, S_e, ρ and their standard errors.

    Raises:
        `IncompatibleSignaturesError`: the signatures differ in sketch id or pilot direction.
    """
    return alignment_matrix([source, target]).pair(0, 1)
