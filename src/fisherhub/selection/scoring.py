"""Regime-aware scoring of candidate sources for one target: pure functions over alignments.

Each candidate's alignment with the target gives, per *geometry*, a score with a standard error: the head
Fisher alignment A (``"fisher"``), its activation factor S_a (``"activation"``) and error factor S_e
(``"error"``), and, where such signatures exist, A of the head-input signature (a, δ = Wᵀe;
``"head_input"``) and of the network-level signature (``"network"``). From these:

- ``separation``: whether a geometry tells the candidates apart, with its evidence. Cochran's
  heterogeneity Q = Σ_i (x_i − x̄)²/se_i² (x̄ the inverse-variance mean) against χ²_{n−1}, and the largest
  score in standard errors against the one-sided Bonferroni z for the maximum of n (is any alignment
  there at all).
- ``regime``: which head geometry carries the signal: coupled, separable, activation-dark, error-flat or
  no-signal (``REGIMES``), from the separation of S_a and S_e and whether ρ = A/(S_a S_e) differs from 1.
- ``shrunk_coupling`` / ``shrunk_fisher``: ρ shrunk toward the cohort's mean by empirical Bayes
  (DerSimonian–Laird between-candidate variance), and A = S_a S_e ρ̂.
- ``auto_geometry``: ``score="auto"``: the geometry to score by, in a fixed order of preference.
- ``verdict``: for one selection, the gap between #1 and #2 in standard errors, the probability that #1
  is the best under the error bars against 1/n for random choice, which geometries pick the same
  candidate, and "no candidate is clearly better" when that is what the numbers say.
- ``rank_nearest``: the signatures most aligned with a target among many (datasets or adapters).

Standard errors of different candidates are treated as independent; they share the target's sketch,
so the tests are approximate and a little conservative for differences.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist

import torch

from fisherhub.core.alignment import AlignmentResult, alignment_matrix
from fisherhub.core.errors import InputError
from fisherhub.core.signature import Signature

#: significance level of every test here (separation, coupling); Bonferroni-corrected over candidates
ALPHA = 0.05
#: #1 is "clearly better" when it leads #2 by at least this many standard errors of the difference
CLEAR_GAP_Z = 2.0
#: Monte Carlo draws (seeded) for the probability that #1 is the best
DRAWS = 20_000
#: standard errors below this count as this (a candidate identical to the target has se 0)
STDERR_FLOOR = 1e-9
#: ``score="auto"`` takes the first geometry in this order that has signal; the head regime decides
#: among "fisher", "error" and "activation" (``REGIME_GEOMETRY``)
AUTO_ORDER = ("network", "head", "head_input")
#: the head geometry each regime scores by (None: the head has no signal)
REGIME_GEOMETRY = {
    "coupled": "fisher", "separable": "fisher", "activation-dark": "error", "error-flat": "activation",
    "no-signal": None,
}
REGIMES = tuple(REGIME_GEOMETRY)
#: when no geometry separates the candidates, auto scores by the least flat of these (smallest heterogeneity p)
FALLBACK_GEOMETRIES = ("network", "fisher", "head_input")
#: the AlignmentResult fields of the head geometries: (score, standard error)
HEAD_FIELDS = {"fisher": ("fisher", "stderr"), "activation": ("activation", "activation_stderr"),
               "error": ("error", "error_stderr")}


@dataclasses.dataclass(frozen=True)
class Scores:
    """One geometry's score of each candidate (larger = more aligned with the target) and its standard error."""

    geometry: str
    values: tuple[float, ...]
    stderr: tuple[float, ...]

    def __post_init__(self):
        if len(self.values) != len(self.stderr) or not self.values:
            raise InputError(f"{self.geometry}: need one standard error per score and at least one candidate, got "
                             f"{len(self.values)} scores and {len(self.stderr)} standard errors")

    @classmethod
    def of(cls, geometry: str, results: Sequence[AlignmentResult]) -> Scores:
        """A head geometry ("fisher", "activation", "error") of the candidates' alignments with the target, or
        the Fisher alignment A of another signature kind under ``geometry`` (e.g. "head_input", "network")."""
        value, stderr = HEAD_FIELDS.get(geometry, HEAD_FIELDS["fisher"])
        return cls(geometry, tuple(getattr(r, value) for r in results), tuple(getattr(r, stderr) for r in results))

    def __len__(self) -> int:
        return len(self.values)

    def order(self) -> list[int]:
        """Candidate indices from the highest score down (ties keep the candidates' order)."""
        return sorted(range(len(self)), key=lambda i: -self.values[i])


def candidate_scores(head: Sequence[AlignmentResult], **other: Sequence[AlignmentResult]) -> dict[str, Scores]:
    """Every geometry of the candidates: the head's three from ``head`` (candidate ↔ target alignments of head
    signatures), and A of each other signature kind given by keyword (``head_input=``, ``network=``), one
    result per candidate in the same order."""
    scores = {name: Scores.of(name, head) for name in HEAD_FIELDS}
    for name, results in other.items():
        if len(results) != len(head):
            raise InputError(f"{name}: {len(results)} alignments for {len(head)} candidates; give one per candidate, "
                             "in the same order")
        scores[name] = Scores.of(name, results)
    return scores


def _floored(stderr: Sequence[float]) -> torch.Tensor:
    return torch.tensor(stderr, dtype=torch.float64).clamp_min(STDERR_FLOOR)


def bonferroni_z(alpha: float, comparisons: int, two_sided: bool = False) -> float:
    """The z beyond which one of ``comparisons`` normal tests is significant at family level ``alpha``."""
    tail = alpha / max(comparisons, 1) / (2 if two_sided else 1)
    return NormalDist().inv_cdf(1.0 - tail)


def heterogeneity(values: Sequence[float], stderr: Sequence[float]) -> tuple[float, float, float]:
    """Cochran's Q = Σ (x_i − x̄)²/se_i² with x̄ = Σ x_i/se_i² / Σ 1/se_i², its p-value against χ²_{n−1}, and x̄."""
    x, weight = torch.tensor(values, dtype=torch.float64), _floored(stderr).pow(-2)
    mean = float((weight * x).sum() / weight.sum())
    q = float((weight * (x - mean).square()).sum())
    dof = len(values) - 1
    p = 1.0 if dof == 0 else float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                                           torch.tensor(q / 2, dtype=torch.float64)))
    return q, p, mean


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

    def as_dict(self) -> dict:
        return dataclasses.asdict(self) | {"separates": self.separates}


def separation(scores: Scores) -> Separation:
    """The evidence that ``scores`` separate the candidates (``Separation``)."""
    q, p, _ = heterogeneity(scores.values, scores.stderr)
    se = _floored(scores.stderr)
    best = scores.order()[0]
    x = torch.tensor(scores.values, dtype=torch.float64)
    return Separation(
        geometry=scores.geometry, q=q, p_value=p, best_z=float(x[best] / se[best]),
        detection_z=bonferroni_z(ALPHA, len(scores)), range_z=float((x.max() - x.min()) / se.square().mean().sqrt()),
    )


@dataclasses.dataclass(frozen=True)
class Regime:
    """Which head geometry carries the signal, with the evidence.

    ``coupling_z``: the largest |ρ_i − 1|/se(ρ_i) over the candidates where ρ is defined (None: nowhere),
    against ``coupling_threshold``, the two-sided Bonferroni z over those candidates.
    """

    name: str
    activation: Separation
    error: Separation
    coupling_z: float | None
    coupling_threshold: float | None
    reason: str

    @property
    def geometry(self) -> str | None:
        """The head geometry to score by in this regime (None for no-signal)."""
        return REGIME_GEOMETRY[self.name]

    def as_dict(self) -> dict:
        return {"name": self.name, "geometry": self.geometry, "activation": self.activation.as_dict(),
                "error": self.error.as_dict(), "coupling_z": self.coupling_z,
                "coupling_threshold": self.coupling_threshold, "reason": self.reason}


def regime(results: Sequence[AlignmentResult]) -> Regime:
    """The head regime of the candidates' alignments with one target (module docstring)."""
    if not results:
        raise InputError("no candidates to read a regime from")
    activation, error = (separation(Scores.of(name, results)) for name in ("activation", "error"))
    defined = [r for r in results if r.coupling is not None and r.coupling_stderr]
    coupling_z = max((abs(r.coupling - 1.0) / r.coupling_stderr for r in defined), default=None)
    threshold = bonferroni_z(ALPHA, len(defined), two_sided=True) if defined else None

    def evidence(s: Separation) -> str:
        return (f"S_{s.geometry[0]} {'separates' if s.separates else 'does not separate'} the candidates "
                f"(heterogeneity p = {s.p_value:.2g}, best {s.best_z:.1f} se vs {s.detection_z:.1f})")

    if activation.separates and error.separates:
        coupled = coupling_z is not None and coupling_z > threshold
        name = "coupled" if coupled else "separable"
        detail = (f"ρ differs from 1 by {coupling_z:.1f} se (threshold {threshold:.1f})" if coupled else
                  "ρ is consistent with 1: A tracks S_a·S_e" if coupling_z is not None else "ρ is defined nowhere")
    elif error.separates:
        name, detail = "activation-dark", "the activations do not tell the candidates apart; the errors do"
    elif activation.separates:
        name, detail = "error-flat", "the errors do not tell the candidates apart; the activations do"
    else:
        name, detail = "no-signal", "neither factor tells the candidates apart"
    return Regime(name, activation, error, coupling_z, threshold, f"{detail}; {evidence(activation)}; {evidence(error)}")


def shrunk_coupling(results: Sequence[AlignmentResult], prior_mean: float | None = None) -> list[float]:
    """Empirical-Bayes ρ over the candidates where ρ is defined: ρ̂_i = μ + τ²/(τ² + se_i²)·(ρ_i − μ).

    Without ``prior_mean``, μ is the inverse-variance mean and τ² = max(0, (Q − (n − 1)) / (Σw − Σw²/Σw)),
    w = 1/se² (DerSimonian–Laird); with it (1: toward the separable A = S_a S_e), μ = ``prior_mean`` and
    τ² = max(0, mean((ρ_i − μ)² − se_i²)). Where ρ is undefined, μ (1 when ρ is defined nowhere).
    """
    defined = [i for i, r in enumerate(results) if r.coupling is not None and r.coupling_stderr]
    if not defined:
        return [1.0 if prior_mean is None else prior_mean] * len(results)
    values = [results[i].coupling for i in defined]
    stderr = [results[i].coupling_stderr for i in defined]
    if prior_mean is None:
        q, _, mean = heterogeneity(values, stderr)
        weight = _floored(stderr).pow(-2)
        spread = float(weight.sum() - weight.square().sum() / weight.sum())
        tau2 = max(0.0, (q - (len(defined) - 1)) / spread) if spread > 0 else 0.0
    else:
        mean = prior_mean
        tau2 = max(0.0, sum((v - mean) ** 2 - se * se for v, se in zip(values, stderr)) / len(values))
    shrunk = [mean] * len(results)
    for i, value, se in zip(defined, values, stderr):
        shrunk[i] = mean + tau2 / (tau2 + se * se) * (value - mean) if tau2 > 0 else mean
    return shrunk


def shrunk_fisher(results: Sequence[AlignmentResult], prior_mean: float | None = None) -> Scores:
    """A = S_a·S_e·ρ̂ with the shrunk ρ̂ (``shrunk_coupling``); standard errors those of the plain A."""
    rho = shrunk_coupling(results, prior_mean)
    name = "fisher_shrunk" if prior_mean is None else "fisher_shrunk_separable"
    return Scores(name, tuple(r.activation * r.error * c for r, c in zip(results, rho)), tuple(r.stderr for r in results))


@dataclasses.dataclass(frozen=True)
class AutoChoice:
    """What ``score="auto"`` scores by, and why."""

    geometry: str
    regime: Regime
    separations: dict[str, Separation]
    reason: str


def auto_geometry(scores: Mapping[str, Scores], head: Sequence[AlignmentResult]) -> AutoChoice:
    """The geometry carrying the signal. In ``AUTO_ORDER``: network-level A when given and it separates the
    candidates; else the head geometry of the regime (coupled / separable: A, activation-dark: S_e,
    error-flat: S_a); else head-input A when given and it separates; else nothing separates, and it scores
    by the least flat of ``FALLBACK_GEOMETRIES`` (the verdict then says no candidate is clearly better)."""
    head_regime = regime(head)
    separations = {name: separation(s) for name, s in scores.items()}
    for step in AUTO_ORDER:
        if step == "head" and head_regime.geometry is not None:
            return AutoChoice(head_regime.geometry, head_regime, separations,
                              f"head regime {head_regime.name}: {head_regime.reason}")
        if step in scores and separations[step].separates:
            return AutoChoice(step, head_regime, separations, f"{step} A separates the candidates "
                              f"(heterogeneity p = {separations[step].p_value:.2g}); head regime {head_regime.name}")
    fallback = min((name for name in FALLBACK_GEOMETRIES if name in scores), key=lambda name: separations[name].p_value)
    return AutoChoice(fallback, head_regime, separations,
                      f"no geometry separates the candidates (head regime {head_regime.name}); scored by {fallback}, "
                      f"the least flat (heterogeneity p = {separations[fallback].p_value:.2g})")


def auto_scores(scores: Mapping[str, Scores], head: Sequence[AlignmentResult]) -> tuple[Scores, AutoChoice]:
    """The scores ``score="auto"`` ranks by (those of ``auto_geometry``'s choice) and the choice."""
    choice = auto_geometry(scores, head)
    return scores[choice.geometry], choice


def _unique_top(scores: Scores) -> int | None:
    """The candidate a geometry ranks first, or None when it ties for first (a flat geometry picks nothing)."""
    order = scores.order()
    if len(order) > 1 and scores.values[order[0]] == scores.values[order[1]]:
        return None
    return order[0]


def probability_best(scores: Scores, draws: int = DRAWS, seed: int = 0) -> list[float]:
    """P(candidate i has the highest true score) with true scores ~ N(value, se²), independent (seeded Monte Carlo)."""
    generator = torch.Generator().manual_seed(seed)
    x, se = torch.tensor(scores.values, dtype=torch.float64), _floored(scores.stderr)
    sampled = x + se * torch.randn(draws, len(x), generator=generator, dtype=torch.float64)
    return (torch.bincount(sampled.argmax(dim=1), minlength=len(x)).double() / draws).tolist()


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

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def verdict(scored: Scores, scores: Mapping[str, Scores] | None = None, names: Sequence[str] | None = None,
            no_signal: bool = False) -> Verdict:
    """The verdict on picking the top of ``scored`` (``Verdict``); ``scores`` are the geometries to check
    agreement with, ``names`` the candidates' names for the message, ``no_signal`` when no geometry separates
    the candidates (the message then says so)."""
    names = list(names) if names is not None else [f"#{i}" for i in range(len(scored))]
    order = scored.order()
    best = order[0]
    runner_up = order[1] if len(order) > 1 else None
    gap_z = None
    if runner_up is not None:
        gap = scored.values[best] - scored.values[runner_up]
        gap_z = gap / math.hypot(max(scored.stderr[best], STDERR_FLOOR), max(scored.stderr[runner_up], STDERR_FLOOR))
    p_best = probability_best(scored)[best]
    scores = dict(scores or {}) | {scored.geometry: scored}
    agreeing = tuple(name for name, s in scores.items() if _unique_top(s) == best)
    clear = gap_z is None or (gap_z >= CLEAR_GAP_Z and not no_signal)
    random_top1 = 1.0 / len(scored)
    if runner_up is None:
        message = f"{names[best]} is the only candidate"
    elif clear:
        message = (f"{names[best]} is clearly better: {gap_z:.1f} se ahead of {names[runner_up]} by {scored.geometry}, "
                   f"P(best) {p_best:.0%} vs {random_top1:.0%} at random")
    else:
        why = "no geometry separates the candidates" if no_signal else (
            f"{names[best]} leads {names[runner_up]} by only {gap_z:.1f} se by {scored.geometry}")
        message = f"no candidate is clearly better: {why}; P(best) {p_best:.0%} vs {random_top1:.0%} at random"
    message += f"; {len(agreeing)} of {len(scores)} geometries agree ({', '.join(agreeing)})"
    return Verdict(scored.geometry, best, runner_up, gap_z, p_best, random_top1, agreeing, tuple(scores), clear, message)


@dataclasses.dataclass(frozen=True)
class ScoredSelection:
    """A selection scored by one geometry: the candidates' scores in it, the auto choice (when auto) and the verdict."""

    scores: Scores
    choice: AutoChoice | None
    verdict: Verdict

    def as_dict(self) -> dict:
        choice = None if self.choice is None else {
            "geometry": self.choice.geometry, "regime": self.choice.regime.as_dict(), "reason": self.choice.reason,
            "separations": {k: v.as_dict() for k, v in self.choice.separations.items()}}
        return {"scores": dataclasses.asdict(self.scores), "choice": choice, "verdict": self.verdict.as_dict()}


def score_selection(head: Sequence[AlignmentResult], score: str = "auto", names: Sequence[str] | None = None,
                    **other: Sequence[AlignmentResult]) -> ScoredSelection:
    """Score the candidates of one target by ``score`` ("auto", a head geometry, "fisher_shrunk",
    "fisher_shrunk_separable" or a key of ``other``) and give the verdict. ``head``: each candidate's head alignment with the target; ``other``:
    alignments of other signature kinds (``head_input=``, ``network=``), one per candidate."""
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
    geometries = {k: v for k, v in scores.items() if not k.startswith("fisher_shrunk")}
    return ScoredSelection(scored, choice, verdict(scored, geometries, names, no_signal=no_signal))


@dataclasses.dataclass(frozen=True)
class Neighbour:
    """A signature near the target: its name, alignment with the target and rank (0 = nearest)."""

    name: str
    alignment: AlignmentResult
    rank: int


def rank_nearest(target: Signature, signatures: Mapping[str, Signature], limit: int | None = None,
                 score: str = "fisher") -> list[Neighbour]:
    """The signatures most aligned with ``target`` (by head A, or ``score`` a head geometry), those with the
    target's sketch id only (the others cannot be compared) and not the target itself, nearest first; ``limit``
    keeps the first ones."""
    if score not in HEAD_FIELDS:
        raise InputError(f"unknown score {score!r} for nearest signatures; choose one of {', '.join(HEAD_FIELDS)}")
    own = target.to_bytes()
    comparable = [(name, s) for name, s in signatures.items() if s.sketch_id == target.sketch_id and s.to_bytes() != own]
    if not comparable:
        raise InputError(f"none of the {len(signatures)} signatures has the target's sketch id {target.sketch_id}; "
                         "sketch the target with the same spec as the candidates")
    matrix = alignment_matrix([target] + [s for _, s in comparable], ["target"] + [n for n, _ in comparable])
    results = [matrix.pair(i + 1, 0) for i in range(len(comparable))]
    field = HEAD_FIELDS[score][0]
    order = sorted(range(len(comparable)), key=lambda i: -getattr(results[i], field))
    return [Neighbour(comparable[i][0], results[i], rank) for rank, i in enumerate(order[:limit])]
