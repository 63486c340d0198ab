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
        return {
            "base": self.base.tolist(),
            "adapted": self.adapted.tolist(),
            "counts": self.counts.tolist(),
            "relative_perplexity": self.relative_perplexity,
        }


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
        spearman.append(
            0.0
            if np.ptp(guess) <= TIE_TOLERANCE * max(1.0, np.abs(guess).max())
            else float(stats.spearmanr(guess, truth).statistic)
        )
    return SelectionScore(
        top1=float(np.mean(top1)),
        mean_regret=float(np.mean(regret)),
        max_regret=float(np.max(regret)),
        mean_spearman=float(np.mean(spearman)),
        per_target_top1=top1,
        per_target_regret=regret,
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
        top1=float(np.mean(top1)),
        mean_regret=float(np.mean(regret)),
        max_regret=float(draws_regret.max(axis=0).mean()),
        mean_spearman=0.0,
        per_target_top1=top1,
        per_target_regret=regret,
    )


def combine(per_seed: list[SelectionScore]) -> SelectionScore:
    """Scores of repeated ground truths (seeds): means of the per-seed scalars, per-target lists joined."""
    return SelectionScore(
        top1=float(np.mean([s.top1 for s in per_seed])),
        mean_regret=float(np.mean([s.mean_regret for s in per_seed])),
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


#: bootstrap resamples of every suite (fixed before any result)
BOOTSTRAP_DRAWS, BOOTSTRAP_SEED = 2000, 0


def _choice_weights(score: np.ndarray) -> np.ndarray:
    """(S, T): for each target column, 1/|tied best| on the candidates a score picks (ties split evenly); a score
    per LoRA seed (R, S, T) gives (R, S, T)."""
    if score.ndim == 3:
        return np.stack([_choice_weights(per_seed) for per_seed in score])
    n = score.shape[0]
    weights = np.zeros_like(score, dtype=np.float64)
    for target in range(score.shape[1]):
        candidates = _candidates(n, target)
        chosen = candidates[_tied_best(score[candidates, target])]
        weights[chosen, target] = 1.0 / len(chosen)
    return weights


def _per_target(weights: np.ndarray, transfer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-1 and regret (…, T) of choice ``weights`` (S, T) against transfers (…, S, T) (the diagonal excluded)."""
    n = transfer.shape[-2]
    truth = np.where(np.eye(n, dtype=bool), -np.inf, transfer)
    best = truth.max(axis=-2, keepdims=True)
    is_best = truth >= best - TIE_TOLERANCE * np.maximum(1.0, np.abs(best))
    top1 = (weights * is_best).sum(axis=-2)
    regret = best[..., 0, :] - (weights * np.where(np.isfinite(truth), truth, 0.0)).sum(axis=-2)
    return top1, regret


def paired_bootstrap(
    scores: dict[str, torch.Tensor], truth: HeldOutLosses, draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED
) -> dict:
    """Top-1, mean and max regret of every method (and "random": every candidate tied) with 95% percentile
    intervals, and the same for every difference between two methods, from one paired bootstrap: each draw
    resamples the targets and, within each target, its held-out units (documents or prompts), so the ground
    truth's own noise is in the intervals; every method is scored on the same draws. Metrics are means over
    the LoRA seeds. A method's score is [source, target], or [seed, source, target] where its picks differ by
    seed (a second stage measures that seed's adapters)."""
    rng = np.random.default_rng(seed)
    n_targets = truth.counts.shape[0]
    valid = truth.counts > 0
    methods = {k: _choice_weights(np.asarray(v, dtype=np.float64)) for k, v in scores.items()}
    methods["random"] = 1.0 / (n_targets - 1) * (1.0 - np.eye(n_targets))
    samples = {k: {"top1": [], "mean_regret": [], "max_regret": []} for k in methods}
    for _ in range(draws):
        targets = np.bincount(rng.integers(0, n_targets, n_targets), minlength=n_targets)
        unit_weights = np.zeros_like(truth.counts)
        for t in range(n_targets):
            units = np.flatnonzero(valid[t])
            unit_weights[t, units] = np.bincount(rng.integers(0, len(units), len(units)), minlength=len(units))
        transfer = truth.transfer(unit_weights)  # (R, S, T)
        for key, weights in methods.items():
            top1, regret = _per_target(weights, transfer)  # (R, T)
            drawn = targets > 0
            samples[key]["top1"].append(float((top1 @ targets).mean() / n_targets))
            samples[key]["mean_regret"].append(float((regret @ targets).mean() / n_targets))
            samples[key]["max_regret"].append(float(regret[:, drawn].max(axis=1).mean()))
    point = {}
    transfer = truth.transfer()
    for key, weights in methods.items():
        top1, regret = _per_target(weights, transfer)
        point[key] = {
            "top1": float(top1.mean()),
            "mean_regret": float(regret.mean()),
            "max_regret": float(regret.max(axis=1).mean()),
        }
    arrays = {k: {m: np.array(v) for m, v in s.items()} for k, s in samples.items()}

    def interval(values: np.ndarray) -> list[float]:
        return [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]

    keys = list(methods)
    return {
        "draws": draws,
        "seed": seed,
        "methods": {k: {m: {"value": point[k][m], "ci95": interval(arrays[k][m])} for m in point[k]} for k in keys},
        "differences": {
            f"{a} - {b}": {
                m: {"value": point[a][m] - point[b][m], "ci95": interval(arrays[a][m] - arrays[b][m])} for m in point[a]
            }
            for a in keys
            for b in keys
            if a != b
        },
    }
