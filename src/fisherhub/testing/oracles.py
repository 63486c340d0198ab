"""Exact oracles for tests and benchmarks: small synthetic tasks (activations and softmax errors from a shared
head) and their sketch."""

from __future__ import annotations

import math

import torch

from fisherhub import SketchSpec, SketchState
from fisherhub.core.batch import HeadBatch


def softmax_errors(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """e = softmax(z) − onehot(y)."""
    errors = torch.softmax(logits.double(), dim=-1)
    errors[torch.arange(len(labels)), labels] -= 1.0
    return errors.float()


def synthetic_task(
    n: int,
    d: int,
    vocab_size: int,
    *,
    seed: int,
    label_block: tuple[int, int] | None = None,
    activations: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A task: activations (shared mean + noise) and errors of a random head whose softmax is
    restricted to ``label_block`` (a masked softmax) when given."""
    generator = torch.Generator().manual_seed(seed)
    if activations is None:
        activations = 1.0 + torch.randn(n, d, generator=generator)
    head = torch.randn(vocab_size, d, generator=torch.Generator().manual_seed(1234)) / d**0.5
    logits = activations.double() @ head.double().T
    if label_block is not None:
        mask = torch.full((vocab_size,), float("-inf"), dtype=torch.float64)
        mask[label_block[0] : label_block[1]] = 0.0
        logits = logits + mask
    labels = torch.multinomial(torch.softmax(logits, -1).float(), 1, generator=generator).squeeze(1)
    return activations, softmax_errors(logits, labels)


def sketch(spec: SketchSpec, activations: torch.Tensor, errors: torch.Tensor, doc_index: torch.Tensor | None = None):
    doc_index = torch.arange(len(activations)) if doc_index is None else doc_index
    return (
        SketchState(spec)
        .update(HeadBatch(activations=activations, doc_index=doc_index, errors=errors))
        .finalize({"dataset": "synthetic"})
    )


def upper_pairs(matrix: torch.Tensor) -> torch.Tensor:
    """The strict upper triangle of a matrix, row by row (one value per unordered pair)."""
    rows, cols = torch.triu_indices(matrix.shape[0], matrix.shape[1], offset=1)
    return matrix[rows, cols]


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    """Spearman's rank correlation (NaN for fewer than 3 values)."""
    from scipy.stats import spearmanr

    return float(spearmanr(x.numpy(), y.numpy()).statistic) if len(x) > 2 else math.nan


def simulated_projection_alignments(exact: dict[str, torch.Tensor], m: int, draws: int, seed: int = 0) -> torch.Tensor:
    """Â of every pair (upper triangle), (draws, pairs), under ``draws`` Gaussian random projections S (m × D)
    of the tasks' exact Fisher matrices F̂_i, with the exact norms given.

    The m rows of (S vec F̂_i / √U_i)_i are i.i.d. N(0, G), G_ij = A_ij off the diagonal and R_i = ‖F̂_i‖² / U_i
    on it, so Â_ij = (1/m) Σ_r Y_ri Y_rj is drawn from G without forming F̂: mean A_ij, variance
    (R_i R_j + A_ij²) / m, i.e. c = 1 in the units √(R_i R_j / m) of the fitted c.
    """
    gram = exact["fisher"].clone()
    gram.diagonal().copy_(exact["self_dominance"])
    eigenvalues, eigenvectors = torch.linalg.eigh(gram)
    root = eigenvectors * eigenvalues.clamp_min(0.0).sqrt()
    generator = torch.Generator().manual_seed(seed)
    alignments = []
    for _ in range(draws):
        rows = torch.randn(m, len(gram), generator=generator, dtype=torch.float64) @ root.T
        alignments.append(upper_pairs(rows.T @ rows / m))
    return torch.stack(alignments)


def random_projection_reference(
    exact: dict[str, torch.Tensor], m: int, draws: int = 400, threshold: float = 0.02
) -> dict[str, float]:
    """What a Gaussian random projection of the exact Fisher matrices, with exact norms, scores: the reference
    for any sketch of m numbers that is linear in F and chosen before the data
    (``simulated_projection_alignments``). Spearman of A over all pairs and over pairs with A ≥ ``threshold``, and MAE:
    mean and 10th–90th percentiles over ``draws`` projections."""
    exact_a = upper_pairs(exact["fisher"])
    strong = exact_a >= threshold
    scores: dict[str, list[float]] = {"spearman_A": [], "spearman_A_strong": [], "mae_A": []}
    for sketch_a in simulated_projection_alignments(exact, m, draws):
        scores["spearman_A"].append(spearman(sketch_a, exact_a))
        scores["spearman_A_strong"].append(spearman(sketch_a[strong], exact_a[strong]))
        scores["mae_A"].append(float((sketch_a - exact_a).abs().mean()))
    summary = {}
    for key, listed in scores.items():
        values = torch.tensor(listed, dtype=torch.float64)
        summary[key] = float(values.mean())
        summary[f"{key}_p10"], summary[f"{key}_p90"] = (float(values.quantile(q)) for q in (0.1, 0.9))
    return summary
