"""Whether a geometry tells the candidates apart: Cochran's heterogeneity Q = Σ_i (x_i − x̄)²/se_i² (x̄ the
inverse-variance mean) against χ²_{n−1}, and the largest score in standard errors against the one-sided
Bonferroni z for the maximum of n (is any alignment there at all)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from fisherhub.analysis.scores import Scores
from fisherhub.core.geometry import ALPHA, bonferroni_z
from fisherhub.core.shrinkage import floored, heterogeneity


@dataclasses.dataclass(frozen=True)
class Separation:
    """Whether a geometry tells the candidates apart.

    ``q`` and ``p_value``: Cochran's heterogeneity (are the scores more different than their error bars
    allow?); ``best_z``: the largest score over its standard error; ``detection_z``: the one-sided Bonferroni
    z for the maximum of n at ``ALPHA``; ``range_z``: (max − min) over the root-mean-square standard error.
    It separates when both tests pass: the scores differ, and some candidate is aligned at all.
    """

    geometry: str
    q: float
    p_value: float
    best_z: float
    detection_z: float
    range_z: float

    @property
    def heterogeneous(self) -> bool:
        return self.p_value < ALPHA

    @property
    def detected(self) -> bool:
        return self.best_z > self.detection_z

    @property
    def separates(self) -> bool:
        return self.heterogeneous and self.detected

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"separates": self.separates}


def aligned(values: Sequence[float], stderr: Sequence[float], comparisons: int | None = None) -> list[bool]:
    """Which candidates are significantly aligned with the target: score over (floored) standard error above the
    one-sided Bonferroni z over ``comparisons`` candidates (default: these), the ``Separation.detected`` rule."""
    z = torch.tensor(values, dtype=torch.float64) / floored(stderr)
    threshold = bonferroni_z(ALPHA, len(values) if comparisons is None else comparisons)
    return (z > threshold).tolist()


def separation(scores: Scores) -> Separation:
    """The evidence that ``scores`` separate the candidates (``Separation``)."""
    q, p, _ = heterogeneity(scores.values, scores.stderr)
    se = floored(scores.stderr)
    best = scores.order()[0]
    x = torch.tensor(scores.values, dtype=torch.float64)
    return Separation(
        geometry=scores.geometry,
        q=q,
        p_value=p,
        best_z=float(x[best] / se[best]),
        detection_z=bonferroni_z(ALPHA, len(scores)),
        range_z=float((x.max() - x.min()) / se.square().mean().sqrt()),
    )
