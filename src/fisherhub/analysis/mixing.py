"""Mixing weights of candidate adapters from their alignments with the target."""

from __future__ import annotations

from collections.abc import Sequence

from fisherhub.analysis.separation import aligned
from fisherhub.core.errors import InputError
from fisherhub.core.geometry import ALPHA, bonferroni_z


def mixing_weights(
    scores: Sequence[float], stderrs: Sequence[float], temperature: float = 1.0, comparisons: int | None = None
) -> list[float]:
    """Mixing weights from alignments: w_i ∝ A_i^(1/temperature) for the candidates significantly aligned with the
    target (``separation.aligned``: above the one-sided Bonferroni z over ``comparisons`` candidates, default
    these, the rule of the verdict's separation), w_i = 0 for the others; Σ w_i = 1. temperature 1 weighs by the
    alignment itself, → 0 keeps the best only, → ∞ weighs the significant ones equally. ``InputError`` when none
    is significant."""
    if not isinstance(temperature, (int, float)) or not temperature > 0:
        raise InputError(f"temperature must be a positive number, got {temperature!r}")
    significant = aligned(scores, stderrs, comparisons)
    if not any(significant):
        count = len(scores) if comparisons is None else comparisons
        raise InputError(
            f"no candidate's score is significantly above 0 ({bonferroni_z(ALPHA, count):.2f} standard errors, family level "
            f"{ALPHA:g} over {count} candidates): nothing to mix. Sketch more target data, or load the best adapter "
            "alone (Selection.load)"
        )
    best = max(score for score, keep in zip(scores, significant) if keep)
    raw = [(score / best) ** (1 / temperature) if keep else 0.0 for score, keep in zip(scores, significant)]
    total = sum(raw)
    return [value / total for value in raw]
