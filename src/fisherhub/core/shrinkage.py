"""Empirical-Bayes shrinkage of noisy estimates, and Cochran's heterogeneity it rests on (SPEC §2, ρ shrinkage).

Each estimate x_i with standard error se_i is shrunk toward a prior mean μ: x̃_i = μ + w_i (x_i − μ),
w_i = τ²/(τ² + se_i²), with τ² the between-estimate variance beyond the noise. Given μ (e.g. 1 for ρ: the
separable value), τ² = max(0, mean (x_i − μ)² − mean se_i²) (method of moments); without it, μ is the
inverse-variance mean and τ² the DerSimonian–Laird estimate.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

#: standard errors below this count as this (an estimate of a signature with itself has se 0)
STDERR_FLOOR = 1e-9


def floored(stderr: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """``stderr`` as float64, at least ``STDERR_FLOOR``."""
    return torch.as_tensor(stderr, dtype=torch.float64).clamp_min(STDERR_FLOOR)


def heterogeneity(
    values: Sequence[float] | torch.Tensor, stderr: Sequence[float] | torch.Tensor
) -> tuple[float, float, float]:
    """Cochran's Q = Σ (x_i − x̄)²/se_i² with x̄ = Σ x_i/se_i² / Σ 1/se_i², its p-value against χ²_{n−1}, and x̄."""
    x, weight = torch.as_tensor(values, dtype=torch.float64), floored(stderr).pow(-2)
    mean = float((weight * x).sum() / weight.sum())
    q = float((weight * (x - mean).square()).sum())
    dof = len(x) - 1
    p = (
        1.0
        if dof == 0
        else float(
            torch.special.gammaincc(
                torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(q / 2, dtype=torch.float64)
            )
        )
    )
    return q, p, mean


def shrink(values: torch.Tensor, stderr: torch.Tensor, prior_mean: float | None = None) -> torch.Tensor:
    """x̃ = μ + τ²/(τ² + se²) (x − μ) of the 1-D estimates ``values`` (module docstring); all μ where τ² = 0."""
    values, stderr = values.double(), stderr.double()
    if prior_mean is None:
        q, _, mean = heterogeneity(values, stderr)
        weight = floored(stderr).pow(-2)
        spread = float(weight.sum() - weight.square().sum() / weight.sum())
        tau2 = max(0.0, (q - (len(values) - 1)) / spread) if spread > 0 else 0.0
    else:
        mean = prior_mean
        tau2 = max(0.0, float((values - mean).square().mean() - stderr.square().mean()))
    if tau2 == 0.0:
        return torch.full_like(values, mean)
    return mean + tau2 / (tau2 + stderr.square()) * (values - mean)
