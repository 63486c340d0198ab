"""The budgeted second stage's schedule (``analysis.halving``) against an oracle of synthetic per-document losses:
the budget is never exceeded (document-passes counted at the oracle), a budget of the shortlist's size + 1 gives
exactly the measure-all ranking, rounds are paired over disjoint slices, the clearly worse go early, broken
candidates are never picked, and bad budgets are refused."""

from __future__ import annotations

import math

import pytest
import torch

from fisherhub.analysis.halving import (
    BASE,
    SLICE_SEED,
    best_chance,
    candidate_capacity,
    first_stage_recall,
    halving_plan,
    paired_gap_z,
    successive_halving,
)
from fisherhub.core.errors import InputError
from fisherhub.core.geometry import CLEAR_GAP_Z, clear_gap_threshold, student_t_cdf
from fisherhub.core.registry import FIRST_STAGE_RECALL, HALVING_SHORTLIST


class CountingOracle:
    """Per-document NLL sums of candidates whose true loss per token is ``means[c]`` (the base model's
    ``base``), with per-document noise of sd ``noise`` per token; every document-pass it serves is counted."""

    def __init__(self, means, documents: int, noise: float = 0.05, seed: int = 0, broken=(), shares=()):
        generator = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(20, 60, (documents,), generator=generator).double()
        shared = noise * torch.randn(documents, generator=generator)  # a document hard for every model
        own = noise * torch.randn(len(means) + 1, documents, generator=generator)
        per_token = torch.tensor([*means, max(means) + 0.5]).double()[:, None] + shared + own
        self.table = per_token * self.tokens
        self.broken, self.passes, self.calls = set(broken), 0, []
        self.shares, self.cost = list(shares) or [1.0] * len(means), 0.0

    def __call__(self, candidates, documents):
        self.calls.append((tuple(candidates), tuple(documents)))
        self.passes += len(candidates) * len(documents)
        # the base model runs the full pass (keeping the lower layers), each candidate its share
        self.cost += len(documents) * sum(1.0 if c == BASE else self.shares[c] for c in candidates)
        rows = [self.table[-1 if c == BASE else c, list(documents)].clone() for c in candidates]
        for row, c in zip(rows, candidates):
            if c in self.broken:
                row[0] = math.nan
        return torch.stack(rows), self.tokens[list(documents)]


def measure_all_order(oracle: CountingOracle, n: int) -> list[int]:
    losses = oracle.table[:n].sum(dim=1) / oracle.tokens.sum()
    return sorted(range(n), key=lambda c: float(losses[c]))


@pytest.mark.parametrize("candidates", [1, 2, 5, 11, 32])
@pytest.mark.parametrize("documents", [1, 3, 8, 17, 32])
@pytest.mark.parametrize("budget", [2, 3, 4, 6, 12, 40])
def test_the_budget_is_never_exceeded(candidates, documents, budget):
    means = torch.linspace(2.0, 2.3, candidates).tolist()
    oracle = CountingOracle(means, documents, seed=candidates * 100 + documents)
    outcome = successive_halving(candidates, documents, budget, oracle)
    assert oracle.passes == outcome.passes <= budget * documents
    assert outcome.passes <= documents + outcome.plan.passes
    assert outcome.full_passes == outcome.passes / documents
    assert outcome.finalists, "some candidate is measured on every document"
    for c in outcome.finalists:
        assert outcome.documents(c) == documents


@pytest.mark.parametrize("candidates", [1, 2, 5, 11, 32])
@pytest.mark.parametrize("documents", [1, 3, 8, 17, 32])
@pytest.mark.parametrize("budget", [2, 3, 4, 6, 12])
def test_cheaper_passes_buy_more_documents_and_never_cost_more_than_the_budget(candidates, documents, budget):
    generator = torch.Generator().manual_seed(candidates * 1000 + documents * 10 + budget)
    levels = [0.35, 0.57, 0.8, 1.0]  # shares of a full pass: adapters starting at different layers
    for shares in ([0.57] * candidates, [levels[int(i)] for i in torch.randint(3, (candidates,), generator=generator)]):
        means = torch.linspace(2.0, 2.3, candidates).tolist()
        oracle = CountingOracle(means, documents, seed=candidates + documents, shares=shares)
        outcome = successive_halving(candidates, documents, budget, oracle, shares)
        assert outcome.full_passes == pytest.approx(oracle.cost / documents) and outcome.passes == oracle.passes
        assert outcome.full_passes <= budget + 1e-9
        assert outcome.finalists and all(outcome.documents(c) == documents for c in outcome.finalists)


def test_the_candidates_capacity_is_the_spare_passes_over_the_largest_share():
    assert candidate_capacity(4, 32) == candidate_capacity(4, 32, [1.0] * 11) == 96
    assert candidate_capacity(4, 32, [0.5] * 11) == 96 / 0.5
    assert candidate_capacity(4, 32, [0.5, 1.0]) == 96  # one at a full pass: no gain promised
    assert candidate_capacity(4, 32, [0.5, 0.6]) == int(96 / 0.6)
    assert candidate_capacity(2, 32, [0.95] * 3) == 33
    assert halving_plan(11, 32, 4, [0.565] * 11).passes > halving_plan(11, 32, 4).passes
    assert halving_plan(11, 32, 4, [1.0] * 11) == halving_plan(11, 32, 4)
    for bad in ([0.5] * 10, [0.0] * 11, [1.5] * 11):
        with pytest.raises(InputError, match="shares must give each"):
            halving_plan(11, 32, 4, bad)


@pytest.mark.parametrize("candidates", [1, 4, 11, 32])
def test_a_budget_of_the_shortlist_plus_one_is_the_measure_all_ranking(candidates):
    means = (2.0 + 0.01 * torch.randperm(candidates, generator=torch.Generator().manual_seed(1))).tolist()
    for budget in (candidates + 1, candidates + 5):
        oracle = CountingOracle(means, 17, noise=0.2, seed=candidates)
        outcome = successive_halving(candidates, 17, budget, oracle)
        assert list(outcome.order) == measure_all_order(oracle, candidates)
        assert oracle.passes == (candidates + 1) * 17
        assert len(outcome.rounds) == 1 and outcome.finalists == outcome.order


def test_rounds_are_paired_over_disjoint_slices_and_the_base_model_is_measured_on_every_document():
    oracle = CountingOracle(torch.linspace(2.0, 2.5, 11).tolist(), 32, noise=0.02)
    outcome = successive_halving(11, 32, 4, oracle)
    assert oracle.calls[0] == ((BASE,), tuple(range(32)))
    slices = [set(r.documents) for r in outcome.rounds]
    assert sum(len(s) for s in slices) == 32 and set().union(*slices) == set(range(32))
    for r, (call, round_) in enumerate(zip(oracle.calls[1:], outcome.rounds)):
        assert call == (round_.measured, round_.documents), "every survivor of a round on the same documents"
        if r + 1 < len(outcome.rounds):
            assert set(outcome.rounds[r + 1].measured) <= set(round_.measured)
    assert len(outcome.rounds) > 1 and outcome.order[0] == 0


def test_the_clearly_worse_are_dropped_before_the_budget_needs_it_and_the_best_survives():
    means = [2.0] + [3.0] * 10  # ten candidates a nat per token worse: clearly behind after a few documents
    oracle = CountingOracle(means, 32, noise=0.02, seed=3)
    outcome = successive_halving(11, 32, 8, oracle)  # the plan keeps 6 after round one
    first = outcome.rounds[0]
    assert len(first.clearly_behind) == 10 and not first.over_budget
    assert outcome.order[0] == 0 and oracle.passes < outcome.plan.passes + 32


def test_when_nothing_is_clearly_behind_the_worst_half_goes_for_the_budget():
    oracle = CountingOracle([2.0] * 11, 32, noise=0.3, seed=4)
    outcome = successive_halving(11, 32, 4, oracle)
    first = outcome.rounds[0]
    assert len(first.documents) == 1 and not first.clearly_behind  # one document: no standard error, no verdict
    assert len(first.over_budget) == 11 - outcome.plan.survivors[1]
    assert oracle.passes <= 4 * 32


def test_a_broken_candidate_is_dropped_at_once_and_never_picked():
    means = [1.0] + torch.linspace(2.0, 2.5, 10).tolist()  # the broken one would be the best
    oracle = CountingOracle(means, 17, broken={0})
    outcome = successive_halving(11, 17, 4, oracle)
    assert 0 not in outcome.order and outcome.rounds[0].unmeasurable == (0,)
    assert outcome.order[0] == 1
    everything_broken = CountingOracle([2.0, 2.1], 5, broken={0, 1})
    assert successive_halving(2, 5, 4, everything_broken).order == ()


def test_a_candidate_that_breaks_in_the_last_round_is_dropped_and_the_rest_still_ranked():
    oracle = CountingOracle(torch.linspace(2.0, 2.5, 11).tolist(), 32, noise=0.01)
    first = successive_halving(11, 32, 4, oracle)
    assert first.rounds[1].clearly_behind == (1, 2, 3, 4, 5) and first.rounds[-1].measured == (0,)
    oracle.table[0, first.rounds[-1].documents[-1]] = math.nan  # the only finalist fails on its last document
    outcome = successive_halving(11, 32, 4, oracle)
    assert outcome.rounds[-1].unmeasurable == (0,) and 0 not in outcome.order
    assert outcome.order[:3] == (1, 2, 3) and outcome.finalists == ()  # those dropped last, lowest loss first


def test_paired_gap_z_is_the_difference_over_its_standard_error():
    tokens = torch.tensor([10.0, 20.0, 30.0, 40.0])
    leader = torch.tensor([20.0, 40.0, 60.0, 80.0])
    shifted = leader + 0.1 * tokens + torch.tensor([0.5, -0.5, 0.5, -0.5])
    gap = 0.1
    residual = torch.tensor([0.5, -0.5, 0.5, -0.5])
    stderr = float((residual.square().sum() * 4 / 3).sqrt() / tokens.sum())
    assert paired_gap_z(shifted, leader, tokens) == pytest.approx(gap / stderr)
    assert paired_gap_z(leader + 0.1 * tokens, leader, tokens) == math.inf
    assert paired_gap_z(shifted[:1], leader[:1], tokens[:1]) == 0.0


def test_plans_fit_their_budget_and_fall_back_to_a_shorter_shortlist():
    plan = halving_plan(11, 32, 4)
    assert plan.survivors == (11, 6, 3, 2) and sum(plan.slices) == 32 and min(plan.slices) >= 1
    assert plan.passes + 32 <= 4 * 32
    assert halving_plan(11, 32, 2).candidates == 1  # the base model and one adapter: the first stage's pick
    tiny = halving_plan(11, 1, 4)  # one document: no rounds to halve in, the first B - 1 measured
    assert (tiny.candidates, tiny.survivors, tiny.slices) == (3, (3,), (1,))


@pytest.mark.parametrize(
    ("candidates", "documents", "budget"),
    [(11, 32, 1), (11, 32, 0), (11, 32, 2.5), (11, 32, True), (0, 32, 4), (3, 0, 4)],
)
def test_bad_input_is_refused_with_what_to_do(candidates, documents, budget):
    with pytest.raises(InputError, match="budget|shortlist is empty|no documents"):
        halving_plan(candidates, documents, budget)


def test_student_t_cdf_and_the_clear_gap_threshold_match_the_tables():
    # two-sided 95% and 99% points of Student's t (any printed table)
    for t, df, p in ((12.706, 1, 0.975), (4.303, 2, 0.975), (3.182, 3, 0.975), (2.228, 10, 0.975), (4.032, 5, 0.995)):
        assert student_t_cdf(t, df) == pytest.approx(p, abs=2e-5)
        assert student_t_cdf(-t, df) == pytest.approx(1 - p, abs=2e-5)
    assert student_t_cdf(0.0, 7) == 0.5
    thresholds = [clear_gap_threshold(d) for d in (2, 3, 4, 11, 31, 1001)]
    assert thresholds[:2] == [pytest.approx(13.968, abs=1e-3), pytest.approx(4.527, abs=1e-3)]
    assert thresholds == sorted(thresholds, reverse=True) and thresholds[-1] == pytest.approx(CLEAR_GAP_Z, abs=5e-3)
    assert clear_gap_threshold(1) == math.inf


def test_a_gap_judged_on_a_handful_of_documents_needs_the_student_t_threshold():
    """3 se on the first round's 3 documents is not clear (the t quantile there is 4.5), so that adapter goes on
    to the next round; the same pattern of differences on 16 documents (8.5 se) is clear."""
    m = 1.0
    for documents, first_slice, kept in ((12, 3, True), (64, 16, False)):
        assert halving_plan(3, documents, 3).slices[0] == first_slice
        order = torch.randperm(documents, generator=torch.Generator().manual_seed(SLICE_SEED)).tolist()
        pattern = torch.zeros(documents, dtype=torch.float64)
        pattern[order] = torch.tensor([(0.0, 1.0, -1.0)[i % 3] for i in range(documents)], dtype=torch.float64)
        tokens = torch.full((documents,), 10.0, dtype=torch.float64)
        table = {BASE: 30.0 + 0 * tokens, 0: 20.0 + 0 * tokens, 1: 20.0 + m + m / math.sqrt(3) * pattern}
        table[2] = 20.0 + 5 * m + 0 * tokens

        def oracle(candidates, chosen, table=table, tokens=tokens):
            return torch.stack([table[c][list(chosen)] for c in candidates]), tokens[list(chosen)]

        seen = order[:first_slice]
        z = paired_gap_z(table[1][seen], table[0][seen], tokens[seen])
        assert z > CLEAR_GAP_Z and (z < clear_gap_threshold(first_slice)) is kept
        first_round = successive_halving(3, documents, 3, oracle).rounds[0]
        assert first_round.clearly_behind == ((2,) if kept else (1, 2))


def test_the_first_stage_recall_is_a_non_decreasing_chance_and_1_when_all_entered():
    assert len(FIRST_STAGE_RECALL) == HALVING_SHORTLIST and list(FIRST_STAGE_RECALL) == sorted(FIRST_STAGE_RECALL)
    assert all(0 < r <= 1 for r in FIRST_STAGE_RECALL)
    assert first_stage_recall(11, 11) == first_stage_recall(40, 11) == 1.0
    assert first_stage_recall(3, 11) == FIRST_STAGE_RECALL[2] and first_stage_recall(40, 5000) == FIRST_STAGE_RECALL[-1]


def test_best_chance_counts_the_unmeasured_and_the_noise_of_the_measured():
    clear = successive_halving(4, 32, 5, CountingOracle([2.0, 2.5, 2.6, 2.7], 32, noise=0.01))
    assert clear.order[0] == 0
    certain = best_chance(clear, 4, draws=500, seed=0)
    assert certain.recall == 1.0 and certain.measured_share == 1.0 and certain.probability == 1.0
    assert best_chance(clear, 100, draws=500, seed=0).probability == FIRST_STAGE_RECALL[3]
    close = successive_halving(4, 32, 5, CountingOracle([2.0, 2.003, 2.6, 2.7], 32, noise=0.05, seed=3))
    population = best_chance(close, 4, draws=2000, seed=0).measured_share
    finite = best_chance(close, 4, draws=2000, seed=0, truth_documents=4).measured_share
    assert 0.1 < population < 0.99 and finite < population  # a race within the noise; less sure on 4 documents
    # the same resamples give the same share; another seed a close one
    assert best_chance(close, 4, draws=2000, seed=0).measured_share == population
    assert best_chance(close, 4, draws=2000, seed=1).measured_share == pytest.approx(population, abs=0.05)


def test_rounds_before_the_last_get_three_documents_where_the_same_candidates_allow(monkeypatch):
    from fisherhub.analysis import halving

    shares = [0.5652] * 11
    assert halving_plan(11, 32, 4, shares) == halving.HalvingPlan(11, (11, 6, 3), (4, 12, 16))
    monkeypatch.setattr(halving, "MIN_ROUND_DOCUMENTS", 1)
    assert halving_plan(11, 32, 4, shares) == halving.HalvingPlan(11, (11, 6, 4), (2, 10, 20))  # more finalists
    monkeypatch.undo()
    wide = halving_plan(32, 32, 4, [0.5652] * 32)  # no plan of 3-document rounds fits: every candidate it can
    assert wide.candidates == 28 and wide.slices[0] == 1
    assert all(size >= halving.MIN_ROUND_DOCUMENTS for size in halving_plan(9, 32, 4, [0.5652] * 9).slices[:-1])
