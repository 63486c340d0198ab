"""What the numbers in fisherhub's tables and figures mean: the legend lines shown under them, each only where
the case it explains occurs.

A cell is significant by its geometry's rule (``fisherhub.core.geometry``): more than ``SIGNIFICANCE_Z`` standard
errors above 0 for A, S_a, S_e (no alignment), or from 1 for ρ (activations and errors couple as if
independent). Exact cells (standard error 0: a signature with itself) are always shown as significant.
"""

from __future__ import annotations

import torch

from fisherhub.core.alignment import AlignmentMatrix
from fisherhub.core.geometry import DECOMPOSITION, GEOMETRIES, HEAD_SCORES, SIGNIFICANCE_Z
from fisherhub.core.registry import GENERATED_SOURCE

ABOVE_ONE = (
    "values above 1: sampling noise around 1 (within the error bar), or two tasks that share documents (a half "
    "against its whole, one dataset sketched twice): the shared documents' own noise enters the inner product but "
    "not the bias-corrected norms, so such pairs reach up to the self-dominance R̂ ≥ 1. Not an error: read them as 1"
)
BLANK_COUPLING = (
    f"ρ — (blank): undefined, S_a or S_e is within {SIGNIFICANCE_Z:g} standard errors of 0, and ρ = A / (S_a S_e) "
    "would divide by noise"
)
DOUBTED = (
    "! (red, crossed out): not to be trusted: a signature fails its own consistency checks, or the estimate lies "
    "outside what [0, 1] and its error bars allow; the number is shown, not to be read (the reasons follow)"
)
FROM_GENERATIONS = "from its generations"
GENERATED_FALLBACK = (
    f"signed {FROM_GENERATIONS}: the signature sketches samples drawn from the adapter, its card naming no "
    "data that could be read; a fallback, less sure than a signature of its training data (docs/SPEC.md §3b)"
)


def generation_words(metadata: dict[str, str]) -> str | None:
    """How a signature sketched from an adapter's generations says so (its prompt set, samples, seed, tokens
    per sample), None for any other signature."""
    if metadata.get("source") != GENERATED_SOURCE:
        return None
    return (
        f"{FROM_GENERATIONS} ({metadata.get('generation_samples', '?')} samples of "
        f"{metadata.get('generation_max_new_tokens', '?')} tokens, prompts {metadata.get('generation_prompts', '?')}, "
        f"seed {metadata.get('generation_seed', '?')})"
    )


NOT_SIGNIFICANT = (
    f"hatched grey: not significant, not more than {SIGNIFICANCE_Z:g} standard errors above 0 (A, S_a, S_e) or away "
    "from 1 (ρ, the value for independent activations and errors); the number is shown, the colour is not"
)


def shown_significant(name: str, values: torch.Tensor, stderr: torch.Tensor) -> torch.Tensor:
    """Boolean mask of the cells of geometry ``name`` drawn as significant: its rule
    (``Geometry.significant``), or exact (stderr 0); False where the value is NaN."""
    return GEOMETRIES[name].significant(values, stderr) | ((stderr == 0) & ~values.isnan())


def above_one(values: torch.Tensor) -> bool:
    """Whether any alignment (A, S_a or S_e) exceeds 1."""
    return bool((values > 1.0).any())


def matrix_legend(matrix: AlignmentMatrix, hatched: bool = False) -> list[str]:
    """The legend lines that apply to ``matrix`` (``hatched``: the figure greys out non-significant cells); with
    doubted cells, ``DOUBTED`` and their reasons (``doubt_lines``) last."""
    lines = []
    trusted = ~matrix.doubted()
    if any(above_one(GEOMETRIES[name].value(matrix)[trusted]) for name in HEAD_SCORES):
        lines.append(ABOVE_ONE)
    if bool(matrix.coupling.isnan().any()):
        lines.append(BLANK_COUPLING)
    if hatched and not all(bool(mask.all()) for mask in matrix_significance(matrix).values()):
        lines.append(NOT_SIGNIFICANT)
    reasons = doubt_lines(matrix)
    return [*lines, *([DOUBTED, *reasons] if reasons else [])]


def doubt_lines(matrix: AlignmentMatrix) -> list[str]:
    """Why each doubted signature and pair of ``matrix`` is not to be trusted, one line each ("NAME: reason",
    "NAME vs NAME: reason")."""
    return _reason_lines(matrix.names, matrix.signature_doubts, matrix.pair_doubts)


def noise_lines(matrix: AlignmentMatrix) -> list[str]:
    """The signatures of ``matrix`` whose unresolved split norms make their alignments noise ("NAME: noise"), then
    the pairs whose estimates are out of range with too few documents to tell ("NAME vs NAME: noise")."""
    return _reason_lines(matrix.names, matrix.signature_noise, matrix.pair_noise)


def _reason_lines(names, per_signature, per_pair) -> list[str]:
    n = len(names)
    lines = [f"{name}: {reason}" for name, reason in zip(names, per_signature) if reason]
    for i in range(n):
        for j in range(i + 1, n):
            if reason := per_pair[i][j] or per_pair[j][i]:
                lines.append(f"{names[i]} vs {names[j]}: {reason}")
    return lines


def matrix_significance(matrix: AlignmentMatrix) -> dict[str, torch.Tensor]:
    """Per panel of the heatmap (each shown geometry: fisher, activation, error, coupling), the mask of
    significant cells (an undefined cell, a blank ρ, counts as significant: it is drawn blank, not hatched)."""
    masks = {}
    for name in DECOMPOSITION:
        values = GEOMETRIES[name].value(matrix)
        masks[name] = shown_significant(name, values, GEOMETRIES[name].stderr(matrix)) | values.isnan()
    return masks
