"""How far to trust one selection: the gap between #1 and #2 in standard errors, the probability that #1 is the
best under the error bars against 1/n for random choice, which geometries pick the same candidate, and "no
candidate is clearly better" when that is what the numbers say; ``score_selection`` scores the candidates of
one target by a geometry (or ``"auto"``) and gives its verdict."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from fisherhub.analysis.auto import AutoChoice, auto_scores
from fisherhub.analysis.scores import Scores, candidate_scores
from fisherhub.analysis.separation import separation
from fisherhub.analysis.shrinkage import shrunk_fisher
from fisherhub.core.alignment import AlignmentResult
from fisherhub.core.errors import InputError
from fisherhub.core.geometry import CLEAR_GAP_Z, SHRUNK
from fisherhub.core.shrinkage import STDERR_FLOOR, floored

#: Monte Carlo draws (seeded) for the probability that #1 is the best
DRAWS = 20_000


def _unique_top(scores: Scores) -> int | None:
    """The candidate a geometry ranks first, or None when it ties for first (a flat geometry picks nothing)."""
    order = scores.order()
    if len(order) > 1 and scores.values[order[0]] == scores.values[order[1]]:
        return None
    return order[0]


def probability_best(scores: Scores, draws: int = DRAWS, seed: int = 0) -> list[float]:
    """P(candidate i has the highest true score) with true scores ~ N(value, se²), independent (seeded Monte Carlo)."""
    generator = torch.Generator().manual_seed(seed)
    x, se = torch.tensor(scores.values, dtype=torch.float64), floored(scores.stderr)
    sampled = x + se * torch.randn(draws, len(x), generator=generator, dtype=torch.float64)
    probabilities: list[float] = (torch.bincount(sampled.argmax(dim=1), minlength=len(x)).double() / draws).tolist()
    return probabilities


@dataclasses.dataclass(frozen=True)
class Verdict:
    """How far to trust one selection.

    ``gap_z``: (#1 − #2) / √(se₁² + se₂²) in the geometry scored by; ``probability_best``: P(#1 is the best under
    the error bars) against ``random_top1`` = 1/n; ``agreeing``: the geometries whose top candidate is #1 (out
    of ``geometries``); ``clear``: gap_z ≥ ``CLEAR_GAP_Z``.
    """

    geometry: str
    best: int
    runner_up: int | None
    gap_z: float | None
    probability_best: float
    random_top1: float
    agreeing: tuple[str, ...]
    geometries: tuple[str, ...]
    clear: bool
    message: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def verdict(
    scored: Scores,
    scores: Mapping[str, Scores] | None = None,
    names: Sequence[str] | None = None,
    no_signal: bool = False,
) -> Verdict:
    """The verdict on picking the top of ``scored`` (``Verdict``); ``scores`` are the geometries to check
    agreement with, ``names`` the candidates' names for the message, ``no_signal`` when no geometry separates
    the candidates (the message then says so)."""
    names = list(names) if names is not None else [f"#{i}" for i in range(len(scored))]
    order = scored.order()
    best = order[0]
    runner_up = order[1] if len(order) > 1 else None
    p_best = probability_best(scored)[best]
    scores = dict(scores or {}) | {scored.geometry: scored}
    agreeing = tuple(name for name, s in scores.items() if _unique_top(s) == best)
    random_top1 = 1.0 / len(scored)
    gap_z = None
    if runner_up is None:
        clear, message = True, f"{names[best]} is the only candidate"
    else:
        gap = scored.values[best] - scored.values[runner_up]
        gap_z = gap / math.hypot(max(scored.stderr[best], STDERR_FLOOR), max(scored.stderr[runner_up], STDERR_FLOOR))
        clear = gap_z >= CLEAR_GAP_Z and not no_signal
        if clear:
            message = (
                f"{names[best]} is clearly better: {gap_z:.1f} se ahead of {names[runner_up]} by "
                f"{scored.geometry}, P(best) {p_best:.0%} vs {random_top1:.0%} at random"
            )
        else:
            why = (
                "no geometry separates the candidates"
                if no_signal
                else (f"{names[best]} leads {names[runner_up]} by only {gap_z:.1f} se by {scored.geometry}")
            )
            message = f"no candidate is clearly better: {why}; P(best) {p_best:.0%} vs {random_top1:.0%} at random"
    message += f"; {len(agreeing)} of {len(scores)} geometries agree ({', '.join(agreeing)})"
    return Verdict(
        scored.geometry, best, runner_up, gap_z, p_best, random_top1, agreeing, tuple(scores), clear, message
    )


@dataclasses.dataclass(frozen=True)
class ScoredSelection:
    """A selection scored by one geometry: the candidates' scores in it, the auto choice (when auto) and the verdict."""

    scores: Scores
    choice: AutoChoice | None
    verdict: Verdict

    def as_dict(self) -> dict[str, Any]:
        choice = (
            None
            if self.choice is None
            else {
                "geometry": self.choice.geometry,
                "regime": self.choice.regime.as_dict(),
                "reason": self.choice.reason,
                "separations": {k: v.as_dict() for k, v in self.choice.separations.items()},
            }
        )
        return {"scores": dataclasses.asdict(self.scores), "choice": choice, "verdict": self.verdict.as_dict()}


def score_selection(
    head: Sequence[AlignmentResult],
    score: str = "auto",
    names: Sequence[str] | None = None,
    **other: Sequence[AlignmentResult],
) -> ScoredSelection:
    """Score the candidates of one target by ``score`` ("auto", a head geometry, "fisher_shrunk",
    "fisher_shrunk_separable" or a key of ``other``) and give the verdict. ``head``: each candidate's head
    alignment with the target; ``other``: alignments of other signature kinds (``head_input=``, ``network=``),
    one per candidate."""
    scores = candidate_scores(head, **other)
    scores["fisher_shrunk"], scores["fisher_shrunk_separable"] = shrunk_fisher(head), shrunk_fisher(head, 1.0)
    choice = None
    if score == "auto":
        scored, choice = auto_scores(scores, head)
        no_signal = not choice.separations[choice.geometry].separates and choice.regime.geometry is None
    elif score in scores:
        scored, no_signal = scores[score], not separation(scores[score]).separates
    else:
        raise InputError(f"unknown score {score!r}; choose 'auto' or one of {', '.join(scores)}")
    geometries = {k: v for k, v in scores.items() if k not in SHRUNK}
    return ScoredSelection(scored, choice, verdict(scored, geometries, names, no_signal=no_signal))
