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
Every signature and pair goes through the bounded-claims checks (``core.plausibility``): a result whose numbers
the math does not allow carries the reason (``AlignmentResult.doubt``), a short signature's noise its own
(``AlignmentResult.noise``).
Optionally (``shrink_coupling=True``) ρ is shrunk toward the separable value 1 by empirical Bayes over the
pairs of the matrix: ρ̃ = 1 + w (ρ̂ − 1), w = τ² / (τ² + se²), τ² = max(0, mean (ρ̂ − 1)² − mean se²) over the
pairs where ρ is reported. Its standard error stays the unshrunk se: the posterior √w · se would claim ρ = 1
exactly wherever τ² is estimated as 0.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from collections.abc import Sequence

import torch

from fisherhub.core import plausibility
from fisherhub.core.alignment_results import AlignmentMatrix, AlignmentResult
from fisherhub.core.registry import SKETCHES
from fisherhub.core.signature import CLAMPED_NORMS_KEY, Signature
from fisherhub.core.errors import ImplausibleAlignmentWarning, InputError
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
    first = signatures[0]
    for other in signatures[1:]:
        first.spec.require_compatible(
            other.spec, base_models=(first.metadata.get("base_model"), other.metadata.get("base_model"))
        )


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
    stderr = cosine_stderr(means, norms, cosine, dominance, constants.as_tensor()[:, None, None])
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
    findings = [signature.findings() for signature in signatures]
    pair_doubts, pair_noise = plausibility.pair_findings(
        cosine, stderr, dominance, [s.num_documents for s in signatures], differing_parts(signatures, means[0], same)
    )
    return AlignmentMatrix(
        names=list(names)
        if names is not None
        else [s.metadata.get("dataset", f"#{i}") for i, s in enumerate(signatures)],
        values=values,
        stderrs=stderrs,
        sketch_id=signatures[0].sketch_id,
        norm_clamped=clamped[:, None] | clamped[None, :],
        signature_doubts=tuple(doubt for doubt, _ in findings),
        signature_noise=tuple(noise for _, noise in findings),
        pair_doubts=pair_doubts,
        pair_noise=pair_noise,
    )


def cosine_stderr(
    means: torch.Tensor, norms: torch.Tensor, cosine: torch.Tensor, dominance: torch.Tensor, c: torch.Tensor
) -> torch.Tensor:
    """(…, n, n) standard errors of the cosines: max(c √(R̂_i R̂_j / m), ``feature_stderr``), with ``dominance``
    the R̂ of each signature (…, n) and ``c`` the calibrated constant (broadcast over the pairs)."""
    m = means.shape[-1]
    floor = c * torch.sqrt(dominance[..., :, None] * dominance[..., None, :] / m)
    return torch.maximum(floor, feature_stderr(means, norms, cosine))


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.double(), b.double()
    return float((a - b).norm()) <= SAME_DATA_TOLERANCE * float(a.norm())


def differing_parts(
    signatures: Sequence[Signature], joints: torch.Tensor, same: torch.Tensor
) -> dict[tuple[int, int], list[str]]:
    """The pairs (i, j), i ≠ j, whose joint sketches agree within ``SAME_DATA_TOLERANCE`` although they are not
    ``same_data``, and what differs between them (``plausibility.parts_doubt``). ``joints``: (n, m) float64."""
    distance = torch.cdist(joints, joints)
    agree = (distance <= SAME_DATA_TOLERANCE * joints.norm(dim=1)[:, None]) & ~same
    parts = {}
    for i, j in agree.nonzero().tolist():
        a, b = signatures[i], signatures[j]
        differing = [f"{name} sketch" for name in SKETCHES[1:] if not _close(getattr(a, name), getattr(b, name))]
        differing += ["split norms"] * (not _close(a.split_norms, b.split_norms))
        differing += ["counts"] * ((a.num_tokens, a.num_documents) != (b.num_tokens, b.num_documents))
        if differing:
            parts[(i, j)] = differing
    return parts


def alignment(source: Signature, target: Signature) -> AlignmentResult:
    """Alignment of two signatures with error bars and the three-factor decomposition A = ρ · S_a · S_e. A result
    whose numbers the math does not allow (``AlignmentResult.doubt``: a signature that fails its own checks, or
    estimates outside what [0, 1] and their error bars allow) is returned flagged, with an
    ``ImplausibleAlignmentWarning``.

    Args:
        source (`Signature`):
            One signature, e.g. a candidate's training data.
        target (`Signature`):
            The other, of the same sketch id (sketch it ``like=`` the source).

    Returns:
        `AlignmentResult`: A, S_a, S_e, ρ and their standard errors, and why they are not to be trusted.

    Raises:
        `IncompatibleSignaturesError`: the signatures differ in sketch id or pilot direction.
    """
    result = alignment_matrix([source, target]).pair(0, 1)
    if result.doubt is not None:
        warnings.warn(f"alignment not to be trusted: {result.doubt}", ImplausibleAlignmentWarning, stacklevel=2)
    return result
