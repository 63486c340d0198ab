"""What the numbers in fisherhub's tables and figures mean: the legend lines shown under them, each only where
the case it explains occurs.

A cell is significant when it is more than ``SIGNIFICANCE_Z`` standard errors from its null value: 0 for A, S_a,
S_e (no alignment), 1 for ρ (activations and errors couple as if independent). Exact cells (standard error 0:
a signature with itself) are always significant.
"""

from __future__ import annotations

import torch

from fisherhub.core.alignment import SIGNIFICANCE_Z, AlignmentMatrix

ABOVE_ONE = (
    "values above 1: sampling noise around 1 (within the error bar), or two tasks that share documents (a half "
    "against its whole, one dataset sketched twice): the shared documents' own noise enters the inner product but "
    "not the bias-corrected norms, so such pairs reach up to the self-dominance R̂ ≥ 1. Not an error: read them as 1"
)
BLANK_COUPLING = (
    f"ρ — (blank): undefined, S_a or S_e is within {SIGNIFICANCE_Z:g} standard errors of 0, and ρ = A / (S_a S_e) "
    "would divide by noise"
)
NOT_SIGNIFICANT = (
    f"hatched grey: not significant, within {SIGNIFICANCE_Z:g} standard errors of 0 (A, S_a, S_e) or of 1 (ρ, the "
    "value for independent activations and errors); the number is shown, the colour is not"
)


def significant(values: torch.Tensor, stderr: torch.Tensor, null: float) -> torch.Tensor:
    """Boolean mask: more than ``SIGNIFICANCE_Z`` standard errors from ``null``, or exact (stderr 0);
    False where the value is NaN."""
    return ((values - null).abs() > SIGNIFICANCE_Z * stderr) | (stderr == 0)


def above_one(values: torch.Tensor) -> bool:
    """Whether any alignment (A, S_a or S_e) exceeds 1."""
    return bool((values > 1.0).any())


def matrix_legend(matrix: AlignmentMatrix, hatched: bool = False) -> list[str]:
    """The legend lines that apply to ``matrix`` (``hatched``: the figure greys out non-significant cells)."""
    lines = []
    if any(above_one(getattr(matrix, field)) for field in ("fisher", "activation", "error")):
        lines.append(ABOVE_ONE)
    if bool(matrix.coupling.isnan().any()):
        lines.append(BLANK_COUPLING)
    if hatched and not all(bool(mask.all()) for mask in matrix_significance(matrix).values()):
        lines.append(NOT_SIGNIFICANT)
    return lines


def matrix_significance(matrix: AlignmentMatrix) -> dict[str, torch.Tensor]:
    """Per field of the heatmap (fisher, activation, error, coupling), the mask of significant cells (a blank
    ρ counts as significant: it is drawn blank, not hatched)."""
    masks = {
        field: significant(getattr(matrix, field), getattr(matrix, stderr_field), 0.0)
        for field, stderr_field in (("fisher", "stderr"), ("activation", "activation_stderr"), ("error", "error_stderr"))
    }
    masks["coupling"] = significant(matrix.coupling, matrix.coupling_stderr, 1.0) | matrix.coupling.isnan()
    return masks
