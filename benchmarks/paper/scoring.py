"""Source-selection scores against a transfer ground truth.

``transfer[s, t]`` is how much source s helps target t (larger is better); ``score[s, t]`` is a
method's similarity. For each target the candidates are the other sources. Ties in a method's score
are broken uniformly at random, in expectation: a method that gives every candidate the same score
gets top-1 = 1/(number of candidates), exactly like random choice.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from scipy import stats

#: scores within this relative distance of the best count as tied.
TIE_TOLERANCE = 1e-9


@dataclasses.dataclass(frozen=True)
class HeldOutLosses:
    """The ground truth as held-out loss sums per unit (a document or a prompt) of each target.

    ``base[t, u]`` and ``adapted[r, s, t, u]`` (LoRA seed r, source s) are Σ −log p over unit u of target t,
    ``counts[t, u]`` its scored tokens (0 pads targets with fewer units). Transfer is the drop of the
    target's mean held-out loss in nats, or with ``relative_perplexity`` 1 − ppl_s/ppl_base = 1 − exp(−drop).
    ``weights[t, u]`` (how often each unit is drawn: a bootstrap resample) reweights the units.
    """

    base: np.ndarray
    adapted: np.ndarray
    counts: np.ndarray
    relative_perplexity: bool

    def transfer(self, weights: np.ndarray | None = None) -> np.ndarray:
        """Transfer [seed, source, target]."""
        weights = np.ones_like(self.counts) if weights is None else weights
        tokens = (weights * self.counts).sum(axis=-1)
        drop = (weights * self.base).sum(axis=-1) / tokens - (weights * self.adapted).sum(axis=-1) / tokens
        return -np.expm1(-drop) if self.relative_perplexity else drop

    def as_dict(self) -> dict:
        return {"base": self.base.tolist(), "adapted": self.adapted.tolist(), "counts": self.counts.tolist(),
                "relative_perplexity": self.relative_perplexity}


@dataclasses.dataclass(frozen=True)
class SelectionScore:
    """Top-1 accuracy, regret (transfer of the best source minus that of the chosen one) and the
    per-target Spearman correlation between score and transfer (mean over targets; a constant score
    has no rank correlation and counts as 0)."""

    top1: float
    mean_regret: float
    max_regret: float
    mean_spearman: float
    per_target_top1: list[float]
    per_target_regret: list[float]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _candidates(n: int, target: int) -> np.ndarray:
    return np.array([s for s in range(n) if s != target])


def _tied_best(values: np.ndarray) -> np.ndarray:
    best = values.max()
    return np.flatnonzero(values >= best - TIE_TOLERANCE * max(1.0, abs(best)))


def selection_score(score: torch.Tensor, transfer: torch.Tensor) -> SelectionScore:
    """Evaluate a (n, n) score matrix against a (n, n) transfer matrix, one target per column."""
    score, transfer = np.asarray(score, dtype=np.float64), np.asarray(transfer, dtype=np.float64)
    top1, regret, spearman = [], [], []
    for target in range(transfer.shape[1]):
        candidates = _candidates(transfer.shape[0], target)
        truth, guess = transfer[candidates, target], score[candidates, target]
        chosen, best = _tied_best(guess), _tied_best(truth)
        top1.append(float(np.isin(chosen, best).mean()))
        regret.append(float(truth.max() - truth[chosen].mean()))
        spearman.append(0.0 if np.ptp(guess) <= TIE_TOLERANCE * max(1.0, np.abs(guess).max())
                        else float(stats.spearmanr(guess, truth).statistic))
    return SelectionScore(
        top1=float(np.mean(top1)), mean_regret=float(np.mean(regret)), max_regret=float(np.max(regret)),
        mean_spearman=float(np.mean(spearman)), per_target_top1=top1, per_target_regret=regret,
    )


def random_selection(transfer: torch.Tensor, draws: int = 20000, seed: int = 0) -> SelectionScore:
    """Random choice: exact expected top-1 and mean regret; expected max regret by Monte Carlo."""
    transfer = np.asarray(transfer, dtype=np.float64)
    n = transfer.shape[0]
    top1, regret, truths = [], [], []
    for target in range(transfer.shape[1]):
        truth = transfer[_candidates(n, target), target]
        truths.append(truth)
        top1.append(len(_tied_best(truth)) / len(truth))
        regret.append(float(truth.max() - truth.mean()))
    rng = np.random.default_rng(seed)
    draws_regret = np.stack([t.max() - t[rng.integers(0, len(t), draws)] for t in truths])
    return SelectionScore(
        top1=float(np.mean(top1)), mean_regret=float(np.mean(regret)),
        max_regret=float(draws_regret.max(axis=0).mean()), mean_spearman=0.0,
        per_target_top1=top1, per_target_regret=regret,
    )


def combine(per_seed: list[SelectionScore]) -> SelectionScore:
    """Scores of repeated ground truths (seeds): means of the per-seed scalars, per-target lists joined."""
    return SelectionScore(
        top1=float(np.mean([s.top1 for s in per_seed])), mean_regret=float(np.mean([s.mean_regret for s in per_seed])),
        max_regret=float(np.mean([s.max_regret for s in per_seed])),
        mean_spearman=float(np.mean([s.mean_spearman for s in per_seed])),
        per_target_top1=[v for s in per_seed for v in s.per_target_top1],
        per_target_regret=[v for s in per_seed for v in s.per_target_regret],
    )


def pooled_spearman(score: torch.Tensor, transfer: torch.Tensor, symmetric: bool = False) -> tuple[float, float]:
    """Spearman correlation and its two-sided p-value over all ordered pairs s ≠ t, or with ``symmetric``
    over the unordered pairs, each with the mean of its two directions (the p-value then does not count
    a symmetric score's value twice)."""
    score, transfer = np.asarray(score, dtype=np.float64), np.asarray(transfer, dtype=np.float64)
    if symmetric:
        score, transfer = (score + score.T) / 2, (transfer + transfer.T) / 2
        pairs = np.triu(np.ones_like(score, dtype=bool), k=1)
    else:
        pairs = ~np.eye(len(score), dtype=bool)
    if np.ptp(score[pairs]) == 0:
        return 0.0, 1.0
    result = stats.spearmanr(score[pairs], transfer[pairs])
    return float(result.statistic), float(result.pvalue)


def finite_or_none(value: float) -> float | None:
    return None if value is None or math.isnan(value) else value
