"""ρ of the candidates shrunk by empirical Bayes (``core.shrinkage.shrink``), and A = S_a·S_e·ρ̃."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fisherhub.analysis.regime import defined_coupling
from fisherhub.analysis.scores import Scores
from fisherhub.core.alignment import AlignmentResult
from fisherhub.core.geometry import GEOMETRIES
from fisherhub.core.shrinkage import heterogeneity, shrink


def shrunk_coupling(results: Sequence[AlignmentResult], prior_mean: float | None = None) -> list[float]:
    """Empirical-Bayes ρ over the candidates where ρ is defined: ρ̃_i = μ + τ²/(τ² + se_i²)·(ρ_i − μ).

    Without ``prior_mean``, μ is the inverse-variance mean and τ² the DerSimonian–Laird estimate; with it (1:
    toward the separable A = S_a S_e), μ = ``prior_mean`` and τ² = max(0, mean((ρ_i − μ)² − se_i²)). Where ρ is
    undefined, μ (1 when ρ is defined nowhere).
    """
    defined = defined_coupling(results)
    if not defined:
        return [1.0 if prior_mean is None else prior_mean] * len(results)
    coupling = GEOMETRIES["coupling"]
    values = torch.tensor([coupling.value(results[i]) for i in defined], dtype=torch.float64)
    stderr = torch.tensor([coupling.stderr(results[i]) for i in defined], dtype=torch.float64)
    mean = heterogeneity(values, stderr)[2] if prior_mean is None else prior_mean
    shrunk = [mean] * len(results)
    for i, value in zip(defined, shrink(values, stderr, prior_mean).tolist()):
        shrunk[i] = value
    return shrunk


def shrunk_fisher(results: Sequence[AlignmentResult], prior_mean: float | None = None) -> Scores:
    """A = S_a·S_e·ρ̃ with the shrunk ρ̃ (``shrunk_coupling``); standard errors those of the plain A."""
    rho = shrunk_coupling(results, prior_mean)
    name = "fisher_shrunk" if prior_mean is None else "fisher_shrunk_separable"
    stderr = GEOMETRIES[name].stderr
    return Scores(
        name, tuple(r.activation * r.error * c for r, c in zip(results, rho)), tuple(stderr(r) for r in results)
    )
