"""The simulation behind ``benchmarks.paper.halving``: ``fisherhub.analysis.halving.successive_halving`` run with an
oracle that reads the committed per-document losses instead of measuring, scored against the suites' ground truth
(see that module's docstring for the two settings)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from benchmarks.paper import recall
from fisherhub.analysis.halving import BASE, Halving, successive_halving
from fisherhub.core.registry import DEFAULT_RERANK_BUDGET, HALVING_SHORTLIST

#: random cuts of each target's held-out documents into a measuring and a truth half
SPLITS = 20
#: the library's first stage (``selection.rerank.FIRST_STAGE``): S_a and S_e merged round-robin
DEFAULT_POOL = recall.DEFAULT_FIRST_STAGE
#: the shortlists ``choose_shortlist`` chooses among (each capped by the candidates)
SHORTLISTS = (4, 8, 16, HALVING_SHORTLIST)
#: double bootstrap resamples of P(best); a reliability bin says something from this many selections on
DRAWS, MIN_SELECTIONS, RELIABLE_WITHIN = 400, 10, 0.10
SETTINGS = ("same documents", "independent halves")


@dataclasses.dataclass(frozen=True)
class Suite:
    """A suite's held-out NLL sums per document: ``base[t, u]``, ``adapted[r, s, t, u]`` (LoRA seed r, source s),
    ``counts[t, u]`` scored tokens (0: padding), transfer as relative perplexity drop or nats; first-stage scores
    [source, target]."""

    names: list[str]
    base: np.ndarray
    adapted: np.ndarray
    counts: np.ndarray
    relative: bool
    scores: dict[str, np.ndarray]

    def transfer(self, seed: int, target: int, units: np.ndarray) -> np.ndarray:
        """Every source's transfer to ``target`` on the documents ``units``."""
        tokens = self.counts[target, units].sum()
        drop = self.base[target, units].sum() / tokens - self.adapted[seed, :, target][:, units].sum(axis=1) / tokens
        return -np.expm1(-drop) if self.relative else drop

    def units(self, target: int) -> np.ndarray:
        return np.flatnonzero(self.counts[target] > 0)

    def full_transfers(self) -> np.ndarray:
        """[seed, source, target] on every held-out document (the suite's ground truth)."""
        seeds, n = self.adapted.shape[0], len(self.names)
        return np.stack(
            [np.stack([self.transfer(r, t, self.units(t)) for t in range(n)], axis=1) for r in range(seeds)]
        )


def load_suites(results: Path) -> dict[str, Suite]:
    """The committed suites with per-document held-out losses (exp3–exp6)."""
    suites = {}
    for key in ("exp3", "exp4", "exp5", "exp6"):
        path = results / f"{recall.SUITES[key]}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        held = data.get("held_out") or data["held_out_nll"]
        suites[key] = Suite(
            data.get("domains") or data["tasks"],
            np.array(held["base"], dtype=np.float64),
            np.array(held["adapted"], dtype=np.float64),
            np.array(held["counts"], dtype=np.float64),
            bool(held["relative_perplexity"]),
            {k: np.array(v, dtype=np.float64) for k, v in data["scores"].items()},
        )
    return suites


def quick_suites(n: int = 5, documents: int = 8, seeds: int = 2) -> dict[str, Suite]:
    """Three tiny generated suites (seconds): sources closer to a target in a hidden space transfer better, and
    their scores are that closeness plus noise."""
    suites = {}
    for index in range(3):
        rng = np.random.default_rng(index)
        where = rng.normal(size=(n, 2))
        distance = np.linalg.norm(where[:, None] - where[None], axis=-1)
        counts = rng.integers(20, 60, size=(n, documents)).astype(np.float64)
        base = 3.0 * counts
        noise = rng.normal(scale=0.05, size=(seeds, n, n, documents))
        adapted = (3.0 - 0.1 / (1 + distance)[None, :, :, None] + noise) * counts[None, None]
        scores = {
            key: -distance + rng.normal(scale=0.3, size=(n, n)) for key in ("fishersketch", "activation", "error")
        }
        suites[f"quick{index}"] = Suite([f"d{i}" for i in range(n)], base, adapted, counts, True, scores)
    return suites


def recall_curves(suite: Suite) -> dict[str, dict[int, float]]:
    """recall@k (k = 1 … min(32, candidates)) of every first stage, single and pooled, whose scores the suite has."""
    transfers = suite.full_transfers()
    stages = [s for s in recall.LIBRARY_STAGES + recall.OTHER_STAGES if all(key in suite.scores for key in s)]
    ks = range(1, min(HALVING_SHORTLIST, len(suite.names) - 1) + 1)
    return {
        recall.stage_name(s): {k: recall.recall_row(suite.scores, transfers, s, k)["recall"] for k in ks}
        for s in stages
    }


def _cuts(suite: Suite, target: int, setting: str, splits: int):
    """(measuring, truth) documents of ``target``: all of them for both, or ``splits`` random halves."""
    units = suite.units(target)
    if setting == "same documents":
        yield units, units
        return
    for split in range(splits):
        order = np.random.default_rng([split, target]).permutation(units)
        half = math.ceil(len(order) / 2)
        yield order[:half], order[half:]


def _oracle(suite: Suite, seed: int, target: int, shortlist: Sequence[int], measuring: np.ndarray):
    def losses(candidates, documents):
        units = measuring[list(documents)]
        rows = [
            suite.base[target, units] if c == BASE else suite.adapted[seed, shortlist[c], target, units]
            for c in candidates
        ]
        return torch.from_numpy(np.stack(rows)), torch.from_numpy(suite.counts[target, units])

    return losses


@dataclasses.dataclass(frozen=True)
class Simulated:
    """One selection: the shortlist, the schedule's outcome, the pick, whether it is the best, its regret."""

    seed: int
    target: int
    split: int
    shortlist: list[int]
    outcome: Halving
    measuring: np.ndarray
    truth: np.ndarray
    correct: bool
    regret: float


def simulate(suite: Suite, setting: str, splits: int, pool: Sequence[str], k: int, budget: int) -> list[Simulated]:
    """Every selection (seed, target, cut) of ``suite``: the first ``k`` of ``pool``'s merged ranking measured by
    successive halving within ``budget`` passes over the measuring documents, scored on the truth ones."""
    results = []
    n = len(suite.names)
    for seed, target in itertools.product(range(suite.adapted.shape[0]), range(n)):
        shortlist = recall.first_stage(suite.scores, pool, target, k)
        others = [s for s in range(n) if s != target]
        for split, (measuring, truth) in enumerate(_cuts(suite, target, setting, splits)):
            outcome = successive_halving(
                len(shortlist), len(measuring), budget, _oracle(suite, seed, target, shortlist, measuring)
            )
            transfer = suite.transfer(seed, target, truth)
            best, picked = transfer[others].max(), transfer[shortlist[outcome.order[0]]]
            results.append(
                Simulated(
                    seed, target, split, shortlist, outcome, measuring, truth, picked >= best - 1e-12, best - picked
                )
            )
    return results


def metrics(results: Sequence[Simulated]) -> dict:
    """Top-1, mean and max regret over the selections of each cut, then means over the cuts."""
    by_split: dict[int, list[Simulated]] = {}
    for r in results:
        by_split.setdefault(r.split, []).append(r)
    per_split = [
        (np.mean([r.correct for r in rs]), np.mean([r.regret for r in rs]), np.max([r.regret for r in rs]))
        for rs in by_split.values()
    ]
    top1, mean_regret, max_regret = np.mean(per_split, axis=0)
    return {
        "top1": float(top1),
        "mean_regret": float(mean_regret),
        "max_regret": float(max_regret),
        "shortlist": float(np.mean([r.outcome.plan.candidates for r in results])),
        "measured_documents": float(np.mean([len(r.measuring) for r in results])),
    }


def pool_rows(suite: Suite, setting: str, splits: int, pool: Sequence[str], k: int, budget: int) -> dict:
    return metrics(simulate(suite, setting, splits, pool, k, budget))


def budget_rows(suite: Suite, setting: str, splits: int) -> list[dict]:
    """Top-1 and regret of the default pool's shortlist against B = 2 … shortlist + 1, with measure-all's."""
    size = min(HALVING_SHORTLIST, len(suite.names) - 1)
    ceiling = pool_rows(suite, setting, splits, DEFAULT_POOL, size, size + 1)
    rows = []
    for budget in range(2, size + 2):
        row = ceiling if budget == size + 1 else pool_rows(suite, setting, splits, DEFAULT_POOL, size, budget)
        rows.append({"budget": budget, **row, "ceiling": ceiling})
    return rows


def choose_shortlist(suites: Mapping[str, Suite], splits: int) -> dict[str, dict]:
    """The rule for the default pool and shortlist, per held-out suite: among the head geometries' pools
    (``recall.LIBRARY_STAGES`` without auto) and ``SHORTLISTS``, the highest mean top-1 of successive halving at
    the default budget over the OTHER suites (independent halves); ties: the larger shortlist, then fewer
    geometries, then the order of ``LIBRARY_STAGES``."""
    pools = [
        s
        for s in recall.LIBRARY_STAGES
        if "auto" not in s and all(all(k in x.scores for k in s) for x in suites.values())
    ]
    top1: dict[tuple[str, tuple[str, ...], int], float] = {}
    for (name, suite), pool, k in itertools.product(suites.items(), pools, SHORTLISTS):
        capped = min(k, len(suite.names) - 1)
        if (name, pool, capped) not in top1:
            top1[(name, pool, capped)] = pool_rows(
                suite, "independent halves", splits, pool, capped, DEFAULT_RERANK_BUDGET
            )["top1"]
    choices = {}
    for held_out in suites:
        others = [n for n in suites if n != held_out]

        def mean_top1(choice, others=others):
            pool, k = choice
            return float(np.mean([top1[(n, pool, min(k, len(suites[n].names) - 1))] for n in others]))

        options = list(itertools.product(pools, SHORTLISTS))
        pool, k = max(options, key=lambda c: (round(mean_top1(c), 9), c[1], -len(c[0]), -pools.index(c[0])))
        held = min(k, len(suites[held_out].names) - 1)
        choices[held_out] = {
            "pool": recall.stage_name(pool),
            "shortlist": k,
            "mean_top1_on_the_others": mean_top1((pool, k)),
            "top1_on_this_suite": top1[(held_out, pool, held)],
        }
    return choices


def measured_probability(result: Simulated, draws: int = DRAWS) -> float:
    """P(the pick beats every other measured candidate on a truth sample), by a double bootstrap of the measuring
    documents: a resample (the population), then from it a sample of the truth half's size; each candidate is
    compared with the pick on the documents it was measured on."""
    outcome = result.outcome
    rng = np.random.default_rng([result.seed, result.target, result.split])
    documents = len(result.measuring)
    first = rng.multinomial(documents, np.full(documents, 1 / documents), size=draws)
    weights = np.stack([rng.multinomial(len(result.truth), row / documents) for row in first])
    nll, tokens = outcome.nll.numpy(), outcome.tokens.numpy()
    pick = outcome.order[0]
    beaten = np.zeros(draws, dtype=bool)
    for c in outcome.order[1:]:
        seen = np.isfinite(nll[c])
        difference = weights[:, seen] @ (nll[c, seen] - nll[pick, seen])
        beaten |= (weights[:, seen] @ tokens[seen] > 0) & (difference < 0)
    return float(1.0 - beaten.mean())


def recall_at(suites: Mapping[str, Suite], held_out: str, k: int) -> float:
    """The default pool's recall@k, the mean over the suites other than ``held_out`` (a suite with at most k
    candidates: 1)."""
    values = []
    for name, suite in suites.items():
        if name == held_out:
            continue
        n = len(suite.names) - 1
        values.append(
            1.0 if k >= n else recall.recall_row(suite.scores, suite.full_transfers(), DEFAULT_POOL, k)["recall"]
        )
    return float(np.mean(values))


def reliability_inputs(suite: Suite, suites: Mapping[str, Suite], splits: int) -> dict[str, tuple[list, list]]:
    """(predicted P(best of all candidates), whether the pick was the best of the truth half) of every selection
    and cut, for halving at the default budget and ``rerank=3``, and for the latter without the unmeasured (the
    measured share alone)."""
    held_out = next(name for name, s in suites.items() if s is suite)
    n = len(suite.names) - 1
    runs = {
        f"halving B={DEFAULT_RERANK_BUDGET}": simulate(
            suite, SETTINGS[1], splits, DEFAULT_POOL, min(n, HALVING_SHORTLIST), DEFAULT_RERANK_BUDGET
        ),
        "rerank=3": simulate(suite, SETTINGS[1], splits, DEFAULT_POOL, 3, 4),
    }
    inputs = {}
    for method, results in runs.items():
        measured = [measured_probability(r) for r in results]
        entered = [
            1.0 if r.outcome.plan.candidates >= n else recall_at(suites, held_out, r.outcome.plan.candidates)
            for r in results
        ]
        observed = [float(r.correct) for r in results]
        inputs[method] = ([p * q for p, q in zip(measured, entered)], observed)
        if method == "rerank=3":
            inputs["rerank=3, the measured alone"] = (measured, observed)
    return inputs


def reliability(predicted: Sequence[float], observed: Sequence[float], splits: int) -> dict:
    """Bins of predicted P(best) (``recall.BINS``) with their rows, selections (rows per cut), mean prediction,
    observed frequency and whether the bin says anything (enough selections) and holds (within 10 points)."""
    bins = []
    for low, high in itertools.pairwise(recall.BINS):
        inside = [i for i, p in enumerate(predicted) if low <= p < high]
        if not inside:
            continue
        p, o = float(np.mean([predicted[i] for i in inside])), float(np.mean([observed[i] for i in inside]))
        selections = len(inside) / splits
        says = "too few" if selections < MIN_SELECTIONS else ("holds" if abs(p - o) <= RELIABLE_WITHIN else "off")
        bins.append(
            {
                "bin": [low, min(high, 1.0)],
                "rows": len(inside),
                "selections": selections,
                "predicted": p,
                "observed": o,
                "says": says,
            }
        )
    brier = float(np.mean([(p - o) ** 2 for p, o in zip(predicted, observed)]))
    return {"bins": bins, "brier": brier, "rows": len(predicted)}
