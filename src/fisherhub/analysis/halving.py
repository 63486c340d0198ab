"""A budgeted second stage: successive halving of a shortlist in paired rounds over the target's documents.

The budget B counts full passes over the target's D documents, the base model's pass included. A candidate on one
document is one document-pass; it costs a full pass of that document, or its share s < 1 of one when the layers
below its adapter replay what the base model's pass kept (``shares``; ``selection.target_losses``). The
candidates get C = ``candidate_capacity`` = ⌊(B − 1)·D / max s⌋ document-passes, so the passes never cost more
than (B − 1)·D full ones (``Halving.full_passes``). With n candidates and C ≥ n·D, every candidate is measured on every
document (the measure-all ranking). Otherwise (``halving_plan``):

- f finalists, the largest f < n whose plan below fits with every round before the last on at least
  ``MIN_ROUND_DOCUMENTS`` documents, else on at least one (f ≥ 2 where the budget allows, so that the last
  comparison is between two): the finalists are measured on all D documents (f·D document-passes), which leaves
  E = C − f·D for the rounds before.
- Rounds r = 1 … R over disjoint slices of the documents (a seeded permutation, cut in order), survivors at most
  m₁ = n, m_{r+1} = max(f, ⌈m_r / 2⌉) until m_R = f; the last round's slice is every document left, so a
  finalist has been measured on all of them.
- Each round before the last costs E/(R − 1) beyond the finalists' share: its slice has
  s_r = ⌊E / ((R − 1)(m_r − f))⌋ ≥ 1 documents (the classic successive halving's equal budget per round).
- Slices that would use up the documents before the last round give some back, the largest first; a plan that
  gives some round no document, or still leaves the last round none, is not feasible: f is lowered, and when no
  f fits, the shortlist is cut to the first n' candidates whose plan fits (n' ≥ ⌊C/D⌋ ≥ B − 1: at worst the
  first ⌊C/D⌋ measured on every document; ``rerank = B − 1`` when every share is 1).

After each round, on the documents every survivor has been measured on (all slices so far, paired), a
survivor is dropped when its paired loss difference from the leader (the lowest loss) is at least
``clear_gap_threshold(d)`` standard errors, the standard error estimated from those d documents: the Student-t
quantile at the one-sided level of ``CLEAR_GAP_Z`` (SPEC §2), 4.5 at 3 documents, → 2 at many (a spread
estimated from a handful of documents is itself noisy, and a normal threshold on it drops the best too often).
If more survivors remain than the plan's m_{r+1}, the highest losses go too, so the budget holds whatever the
differences. A candidate the oracle cannot measure (its losses not finite) is dropped at once, never picked.
The ranking: finalists by their loss on all documents, then the others by the round they were dropped in
(later first) and their loss on the documents they were measured on.

The oracle ``losses(candidates, documents)`` gives the NLL sums (candidates × documents) and the documents'
scored-token counts; ``BASE`` (−1) is the base model, measured once on every document (pass 1 of the budget).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import torch

from fisherhub.core.errors import InputError
from fisherhub.core.geometry import clear_gap_threshold
from fisherhub.core.registry import FIRST_STAGE_RECALL

#: the candidate id of the base model in the oracle's calls
BASE = -1
#: the seed of the permutation that cuts the documents into slices
SLICE_SEED = 0
#: the fewest documents a round before the last gets where a plan of as many candidates allows it: a paired
#: difference is judged against its spread over the documents seen (``clear_gap_threshold``: 14 standard errors
#: at 2 documents, 4.5 at 3), so on fewer a round drops candidates by their loss alone
MIN_ROUND_DOCUMENTS = 3

#: (candidates, documents) → NLL sums (len(candidates), len(documents)) and scored tokens (len(documents),)
LossOracle = Callable[[Sequence[int], Sequence[int]], tuple[torch.Tensor, torch.Tensor]]


def check_budget(budget: int) -> int:
    """``budget`` (full passes over the target's documents, the base model's included), refused below 2."""
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 2:
        raise InputError(
            f"the budget counts full passes over the target's documents, the base model's included: it must be an "
            f"int ≥ 2 (2: the base model and one adapter), got {budget!r}"
        )
    return budget


@dataclasses.dataclass(frozen=True)
class HalvingPlan:
    """The candidates measured (the shortlist's first ``candidates``), the most survivors of each round
    (``survivors[0]`` = ``candidates``, the last = the finalists) and each round's number of documents."""

    candidates: int
    survivors: tuple[int, ...]
    slices: tuple[int, ...]

    @property
    def passes(self) -> int:
        """Document-passes of the candidates at most (the base model's D are not counted here)."""
        return sum(m * s for m, s in zip(self.survivors, self.slices))


def check_shares(shares: Sequence[float], candidates: int) -> tuple[float, ...]:
    """Each candidate's cost of one document in full passes (``shares``: one per candidate, each in (0, 1]; none:
    every one costs a full pass)."""
    shares = tuple(float(share) for share in shares)
    if shares and (len(shares) != candidates or not all(0 < share <= 1 for share in shares)):
        raise InputError(f"shares must give each of the {candidates} candidates a cost in (0, 1], got {shares!r}")
    return shares


def candidate_capacity(budget: int, documents: int, shares: Sequence[float] = ()) -> int:
    """The document-passes the candidates get within ``budget`` full passes over ``documents``, beside the base
    model's: ⌊(B − 1)·D / max s⌋ over the ``shares`` s (each candidate's document at its share of a full pass;
    (B − 1)·D without shares)."""
    spare = (check_budget(budget) - 1) * documents
    return math.floor(spare / max(shares, default=1.0) + 1e-9)


def _plan(n: int, finalists: int, documents: int, capacity: int, least: int = 1) -> HalvingPlan | None:
    """The plan with ``finalists`` of ``n`` within ``capacity`` document-passes (module docstring), None where
    it is not feasible or gives a round before the last fewer than ``least`` documents."""
    if finalists >= n:
        return HalvingPlan(n, (n,), (documents,)) if n * documents <= capacity else None
    survivors = [n]
    while survivors[-1] > finalists:
        survivors.append(max(finalists, math.ceil(survivors[-1] / 2)))
    extra, early = capacity - finalists * documents, len(survivors) - 1
    slices = [extra // (early * (m - finalists)) for m in survivors[:-1]]
    while sum(slices) >= documents and max(slices) > 1:  # more than the documents: the largest slices give some back
        slices[slices.index(max(slices))] -= 1
    if min(slices) < least or sum(slices) >= documents:
        return None
    return HalvingPlan(n, tuple(survivors), (*slices, documents - sum(slices)))


def halving_plan(candidates: int, documents: int, budget: int, shares: Sequence[float] = ()) -> HalvingPlan:
    """The schedule for ``candidates`` over ``documents`` within ``budget`` passes, each candidate's document
    costing its one of ``shares`` (module docstring)."""
    budget = check_budget(budget)
    if candidates < 1:
        raise InputError("the shortlist is empty: the first stage found no adapter to measure")
    if documents < 1:
        raise InputError("the target has no documents to measure the adapters' loss on")
    capacity = candidate_capacity(budget, documents, check_shares(shares, candidates))
    for n in range(candidates, 0, -1):
        for least in (MIN_ROUND_DOCUMENTS, 1):
            for finalists in range(n, 0, -1):
                plan = _plan(n, finalists, documents, capacity, least)
                if plan is not None:
                    return plan
    raise AssertionError("unreachable: one candidate on every document always fits a budget of 2")


@dataclasses.dataclass(frozen=True)
class HalvingRound:
    """One round: its documents, the candidates measured on them, and those dropped after it: clearly behind
    the leader (``clearly_behind``), for the budget (``over_budget``) or not measurable (``unmeasurable``)."""

    documents: tuple[int, ...]
    measured: tuple[int, ...]
    clearly_behind: tuple[int, ...]
    over_budget: tuple[int, ...]
    unmeasurable: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Halving:
    """The outcome: the measured candidates best first (``order``; the unmeasurable left out), their NLL sums
    per document (candidates × D, NaN where not measured), the base model's, the documents' scored tokens, the
    rounds, the plan, the document-passes spent (the base model's included) and what they cost in full passes
    over the documents (``full_passes``: each candidate's document at its share)."""

    order: tuple[int, ...]
    nll: torch.Tensor
    base_nll: torch.Tensor
    tokens: torch.Tensor
    rounds: tuple[HalvingRound, ...]
    plan: HalvingPlan
    passes: int
    full_passes: float

    def documents(self, candidate: int) -> int:
        """The number of documents ``candidate`` was measured on."""
        return int(torch.isfinite(self.nll[candidate]).sum())

    def loss(self, candidate: int) -> float:
        """``candidate``'s mean loss per scored token over the documents it was measured on."""
        measured = torch.isfinite(self.nll[candidate])
        return float(self.nll[candidate, measured].sum() / self.tokens[measured].sum())

    @property
    def finalists(self) -> tuple[int, ...]:
        """The candidates measured on every document, best first."""
        return tuple(c for c in self.order if self.documents(c) == len(self.tokens))


def paired_gap_z(nll: torch.Tensor, leader: torch.Tensor, tokens: torch.Tensor) -> float:
    """(L − L_leader) over its standard error, L = Σ nll / Σ tokens over the same documents: the ratio
    estimator's linearised variance over documents, Σ (x_d − Δ t_d)² · D/(D − 1) / (Σ t)², x = nll − leader.
    0 with fewer than two documents; inf when every document agrees exactly."""
    if len(tokens) < 2:
        return 0.0
    difference = nll - leader
    gap = float(difference.sum() / tokens.sum())
    residual = difference - gap * tokens
    stderr = float((residual.square().sum() * len(tokens) / (len(tokens) - 1)).sqrt() / tokens.sum())
    if stderr > 0:
        return gap / stderr
    return math.inf if gap > 0 else 0.0


def _survivors_after(
    survivors: list[int], nll: torch.Tensor, tokens: torch.Tensor, seen: list[int], keep: int
) -> tuple[list[int], list[int], list[int]]:
    """The survivors of a round (at most ``keep``, lowest loss first), and those dropped as clearly behind the
    leader and for the budget, judged on the documents ``seen`` so far."""
    columns = torch.tensor(seen)
    losses = {c: float(nll[c, columns].sum() / tokens[columns].sum()) for c in survivors}
    ranked = sorted(survivors, key=lambda c: losses[c])
    leader = nll[ranked[0], columns]
    threshold = clear_gap_threshold(len(seen))
    behind = [c for c in ranked[1:] if paired_gap_z(nll[c, columns], leader, tokens[columns]) >= threshold]
    remaining = [c for c in ranked if c not in behind]
    return remaining[:keep], behind, remaining[keep:]


def _round_cost(measured: Sequence[int], shares: Sequence[float], size: int) -> float:
    """Document-passes in full passes of one round over ``size`` documents: each of the ``measured`` at its share
    (each 1 without ``shares``)."""
    return float(size * (sum(shares[c] for c in measured) if shares else len(measured)))


def successive_halving(
    candidates: int, documents: int, budget: int, losses: LossOracle, shares: Sequence[float] = ()
) -> Halving:
    """The shortlist's ``candidates`` (ids 0 … n − 1, first-stage order) ranked by their loss on the target's
    ``documents`` within ``budget`` full passes, the base model's included, candidate c's document costing
    ``shares[c]`` of a full pass (module docstring); ``losses`` is the oracle. ``InputError`` for a budget below
    2, no candidate, no document or a share outside (0, 1]."""
    shares = check_shares(shares, candidates)
    plan = halving_plan(candidates, documents, budget, shares)
    order = torch.randperm(documents, generator=torch.Generator().manual_seed(SLICE_SEED)).tolist()
    base_nll, tokens = losses([BASE], list(range(documents)))
    base_nll, tokens = base_nll[0].double(), tokens.double()
    nll = torch.full((plan.candidates, documents), math.nan, dtype=torch.float64)
    passes, cost, start, seen = documents, float(documents), 0, []
    survivors = list(range(plan.candidates))
    rounds: list[HalvingRound] = []
    dropped: list[list[int]] = []
    for r, size in enumerate(plan.slices):
        chunk = order[start : start + size]
        start += size
        measured = tuple(survivors)
        nll[torch.tensor(measured)[:, None], torch.tensor(chunk)[None, :]] = losses(measured, chunk)[0].double()
        passes += len(measured) * len(chunk)
        cost += _round_cost(measured, shares, len(chunk))
        seen += chunk
        broken = [c for c in survivors if not bool(torch.isfinite(nll[c, torch.tensor(seen)]).all())]
        survivors = [c for c in survivors if c not in broken]
        nll[torch.tensor(broken, dtype=torch.long)] = math.nan
        behind: list[int] = []
        over: list[int] = []
        if survivors and r + 1 < len(plan.slices):  # the last round's survivors are the finalists
            survivors, behind, over = _survivors_after(survivors, nll, tokens, seen, plan.survivors[r + 1])
        rounds.append(HalvingRound(tuple(chunk), measured, tuple(behind), tuple(over), tuple(broken)))
        dropped.append(behind + over)
        if not survivors:
            break
    outcome = Halving((), nll, base_nll, tokens, tuple(rounds), plan, passes, cost / documents)
    ranked = sorted(survivors, key=outcome.loss)
    for out in reversed(dropped):
        ranked += sorted(out, key=outcome.loss)
    return dataclasses.replace(outcome, order=tuple(ranked))


@dataclasses.dataclass(frozen=True)
class BestChance:
    """P(the pick is the best of every candidate) = ``recall`` (the first stage's recall at the shortlist measured:
    the chance the best was measured at all) × ``measured_share`` (the chance it beats every measured one)."""

    recall: float
    measured_share: float

    @property
    def probability(self) -> float:
        return self.recall * self.measured_share


def first_stage_recall(entered: int, candidates: int) -> float:
    """The chance that the best of ``candidates`` is among the first stage's first ``entered``: 1 when all
    entered, else ``FIRST_STAGE_RECALL`` at ``entered`` (its last value beyond its length)."""
    if entered >= candidates:
        return 1.0
    return FIRST_STAGE_RECALL[min(entered, len(FIRST_STAGE_RECALL)) - 1]


def best_chance(
    outcome: Halving, candidates: int, *, draws: int, seed: int, truth_documents: int | None = None
) -> BestChance:
    """P(``outcome``'s pick is the best of ``candidates``): ``first_stage_recall`` at the shortlist it measured ×
    the share of bootstrap resamples of the target's documents in which the pick's loss is below every other
    measured candidate's, each compared on the documents both were measured on (paired). With
    ``truth_documents``, each resample is sampled again down to that many documents (a double bootstrap): the
    chance of being the best on a finite sample of that size, what a benchmark's held-out documents observe."""
    documents = len(outcome.tokens)
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(documents, (draws, documents), generator=generator)
    if truth_documents is not None:
        resampled = torch.randint(documents, (draws, truth_documents), generator=generator)
        picks = torch.gather(picks, 1, resampled)
    weights = torch.zeros(draws, documents, dtype=torch.float64)
    weights.scatter_add_(1, picks, torch.ones_like(picks, dtype=torch.float64))
    pick, beaten = outcome.order[0], torch.zeros(draws, dtype=torch.bool)
    for other in outcome.order[1:]:
        seen = torch.isfinite(outcome.nll[other]) & torch.isfinite(outcome.nll[pick])
        difference = weights[:, seen] @ (outcome.nll[other, seen] - outcome.nll[pick, seen])
        beaten |= (weights[:, seen] @ outcome.tokens[seen] > 0) & (difference < 0)
    share = 1.0 - float(beaten.double().mean())
    return BestChance(first_stage_recall(outcome.plan.candidates, candidates), share)
