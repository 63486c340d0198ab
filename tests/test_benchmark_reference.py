"""The accuracy benchmark's reference (``fisherhub.testing.oracles``, used by benchmarks/estimator_accuracy.py): Gaussian random projections of the
exact Fisher matrices, simulated from their Gram matrix, must match projections done for real."""

import torch

from fisherhub.testing.oracles import random_projection_reference, simulated_projection_alignments


def _tasks(num_tasks: int = 4, dim: int = 30):
    """Vectors x_i standing for vec F̂_i (sharing a common part) and U-statistic norms U_i = ‖x_i‖² / R_i."""
    generator = torch.Generator().manual_seed(0)
    shared = torch.randn(dim, generator=generator, dtype=torch.float64)
    vectors = shared + 0.8 * torch.randn(num_tasks, dim, generator=generator, dtype=torch.float64)
    self_dominance = torch.tensor([1.2, 1.5, 2.0, 3.0], dtype=torch.float64)[:num_tasks]
    u_statistics = vectors.pow(2).sum(1) / self_dominance
    fisher = vectors @ vectors.T / torch.sqrt(u_statistics[:, None] * u_statistics[None, :])
    fisher.fill_diagonal_(1.0)
    return vectors, u_statistics, {"fisher": fisher, "self_dominance": self_dominance}


def test_simulated_projections_match_real_gaussian_projections():
    vectors, u_statistics, exact = _tasks()
    m, draws = 8, 20_000
    simulated = simulated_projection_alignments(exact, m, draws)
    projection = torch.randn(
        draws, m, vectors.shape[1], generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    sketched = projection @ vectors.T  # (draws, m, tasks)
    products = sketched.transpose(1, 2) @ sketched / m / torch.sqrt(u_statistics[:, None] * u_statistics[None, :])
    rows, cols = torch.triu_indices(len(vectors), len(vectors), offset=1)
    real = products[:, rows, cols]
    exact_a = exact["fisher"][rows, cols]
    r = exact["self_dominance"]
    predicted_variance = (r[rows] * r[cols] + exact_a**2) / m
    for draws_of in (simulated, real):
        assert torch.allclose(draws_of.mean(0), exact_a, atol=4 * float(predicted_variance.max().sqrt()) / draws**0.5)
        assert torch.allclose(draws_of.var(0), predicted_variance, rtol=0.06)
    assert torch.allclose(simulated.var(0), real.var(0), rtol=0.08)


def test_reference_scores_fall_with_noise():
    _, _, exact = _tasks()
    small, large = (random_projection_reference(exact, m, draws=200) for m in (16, 4096))
    assert large["mae_A"] < small["mae_A"] / 10
    assert large["spearman_A"] > 0.99 > small["spearman_A"]
    assert small["spearman_A_p10"] < small["spearman_A_p90"]
