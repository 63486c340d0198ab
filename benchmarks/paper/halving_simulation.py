"""The simulation behind ``benchmarks.paper.halving``: ``fisherhub.analysis.halving.successive_halving`` run with an
oracle that reads the committed per-document losses instead of measuring, scored against the suites' ground truth
(see that module's docstring for the two settings)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import itertools
import sys
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from benchmarks.paper import common, recall
from fisherhub.analysis import halving
from fisherhub.analysis import halving as library_halving
from fisherhub.analysis.halving import BASE, Halving, best_chance, successive_halving
from fisherhub.core.registry import DEFAULT_RERANK_BUDGET, HALVING_SHORTLIST

#: random cuts of each target's held-out documents into a measuring and a truth half
SPLITS = 20
#: the library's first stage (``selection.rerank.FIRST_STAGE``): S_a and S_e merged round-robin
DEFAULT_POOL = recall.DEFAULT_FIRST_STAGE
#: the shortlists ``choose_shortlist`` chooses among (each capped by the candidates)
SHORTLISTS = (4, 8, 16, HALVING_SHORTLIST)
#: double bootstrap resamples of P(best); a reliability bin says something from this many selections on
DRAWS, MIN_SELECTIONS, RELIABLE_WITHIN = 400, 10, 0.10
SETTINGS = ("same documents", "independent halves", "own sample")
#: the setting of a real second stage: the target's own sample measured, the held-out transfer its truth
OWN_SAMPLE = SETTINGS[2]
#: each target's own sample under every candidate (``benchmarks.paper.own_sample``)
OWN_SAMPLE_RESULT = "paper_own_sample.json"
#: the pre-registered suite, each target's own sample under every candidate (``benchmarks.paper.exp7_preregistered``)
EXP7_RESULT = "paper_exp7_preregistered.json"


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
    #: the same losses on each target's own sample (its task documents), where they were measured
    own: Suite | None = None

    @functools.cached_property
    def key(self) -> str:
        """A short hash of the losses and scores (without the own sample's: ``losses_key``)."""
        digest = hashlib.sha256(json.dumps([self.names, self.relative, sorted(self.scores)]).encode())
        for array in (self.base, self.adapted, self.counts, *(self.scores[k] for k in sorted(self.scores))):
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()[:12]

    def losses_key(self, setting: str) -> str:
        """A short hash of everything a selection in ``setting`` reads (the cache key of its rows), and of the code
        that computes it (the schedule and this simulation: ``code_key``)."""
        return self.key + (self.own.key if setting == OWN_SAMPLE and self.own is not None else "") + code_key()

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


@functools.cache
def code_key() -> str:
    """A short hash of the source of the schedule (``fisherhub.analysis.halving``) and of this module: rows kept
    by an earlier version of either are computed again."""
    sources = inspect.getsource(halving) + inspect.getsource(sys.modules[__name__])
    return hashlib.sha256(sources.encode()).hexdigest()[:8]


def load_suites(results: Path) -> dict[str, Suite]:
    """The committed suites with per-document held-out losses (exp3–exp6), with their own samples where
    ``OWN_SAMPLE_RESULT`` has them, and the pre-registered exp7 with its own (``EXP7_RESULT``)."""
    suites = {}
    exp7 = results / EXP7_RESULT
    if exp7.exists():
        data = json.loads(exp7.read_text())
        scores = {k: np.array(v, dtype=np.float64) for k, v in data["scores"].items()}
        held, sample = (
            [np.array(losses[k], dtype=np.float64) for k in ("base", "adapted", "counts")]
            for losses in (data["held_out"], data["sample_losses"])
        )
        own = Suite(data["domains"], *sample, bool(data["sample_losses"]["relative_perplexity"]), scores)
        suites["exp7"] = Suite(data["domains"], *held, bool(data["held_out"]["relative_perplexity"]), scores, own)
    own_path = results / OWN_SAMPLE_RESULT
    own = json.loads(own_path.read_text())["suites"] if own_path.exists() else {}
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
        if key in own and _complete_targets(sample := _own_sample(suites[key], own[key])):
            suites[key] = dataclasses.replace(suites[key], own=sample)
    return dict(sorted(suites.items()))


def _complete_targets(own: Suite) -> int:
    """How many (seed, target) pairs have the own sample under every other candidate."""
    n = len(own.names)
    return sum(
        not np.isnan(own.adapted[seed, [s for s in range(n) if s != t], t]).any()
        for seed, t in itertools.product(range(own.adapted.shape[0]), range(n))
    )


def _own_sample(suite: Suite, own: dict) -> Suite:
    """The own-sample losses of ``own`` (``benchmarks.paper.own_sample``) in ``suite``'s order of domains and
    seeds (NaN for a seed not measured)."""
    order = [own["domains"].index(name) for name in suite.names]
    measured = np.array(own["adapted"], dtype=np.float64)[:, order][:, :, order]
    adapted = np.full((suite.adapted.shape[0], *measured.shape[1:]), np.nan)
    adapted[[common.LORA_SEEDS.index(seed) for seed in own["seeds"]]] = measured
    rows = np.array(own["base"], dtype=np.float64)[order], np.array(own["counts"], dtype=np.float64)[order]
    return Suite(suite.names, rows[0], adapted, rows[1], bool(own["relative_perplexity"]), suite.scores)


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
        own_noise = rng.normal(scale=0.05, size=adapted.shape)
        own = Suite([f"d{i}" for i in range(n)], base, adapted + own_noise * counts[None, None], counts, True, scores)
        suites[f"quick{index}"] = Suite(own.names, base, adapted, counts, True, scores, own)
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


def cuts(setting: str, splits: int) -> int:
    """How many cuts of the documents ``setting`` makes: ``splits`` for independent halves, else one."""
    return splits if setting == SETTINGS[1] else 1


def _cuts(suite: Suite, target: int, setting: str, splits: int):
    """(measuring, truth) documents of ``target``: all of them for both, ``splits`` random halves, or the own
    sample's (measuring) and all the held-out ones (truth)."""
    units = suite.units(target)
    if setting == OWN_SAMPLE:
        assert suite.own is not None
        yield suite.own.units(target), units
        return
    if setting == SETTINGS[0]:
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
    successive halving within ``budget`` passes over the measuring documents, scored on the truth ones (the (seed, target)
    pairs whose measuring losses were all measured)."""
    measured = suite.own if setting == OWN_SAMPLE else suite
    assert measured is not None
    results = []
    n = len(suite.names)
    for seed, target in itertools.product(range(suite.adapted.shape[0]), range(n)):
        shortlist = recall.first_stage(suite.scores, pool, target, k)
        others = [s for s in range(n) if s != target]
        if np.isnan(measured.adapted[seed, others, target]).any():
            continue
        for split, (measuring, truth) in enumerate(_cuts(suite, target, setting, splits)):
            outcome = successive_halving(
                len(shortlist),
                len(measuring),
                budget,
                _oracle(measured, seed, target, shortlist, measuring),
                [ADAPTER_SHARE] * len(shortlist),
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
        "selections": len(results) // len(by_split),
    }


#: where rows and reliability inputs are kept between runs (``benchmarks.paper.halving`` sets it: a ledger in the
#: benchmark cache, keyed by the suite's losses), None: computed every time
ROWS: common.Ledger | None = None


#: what one document under a suite's adapter costs in full passes of the base model (``select_adapter`` counts the
#: layers below the adapter's as replayed from the base model's pass: ``common.adapter_pass_share``); 1: every
#: document-pass a full pass, as before the library counted them at their cost. The benchmarks set it.
ADAPTER_SHARE = 1.0


def _kept(key: str, compute):
    if ADAPTER_SHARE != 1.0:
        key += f"|share {ADAPTER_SHARE:.6f} from the base pass"
    if library_halving.MIN_ROUND_DOCUMENTS > 1:
        key += f"|rounds of {library_halving.MIN_ROUND_DOCUMENTS}+ documents"
    return compute() if ROWS is None else ROWS.get(key, compute)


def pool_rows(suite: Suite, setting: str, splits: int, pool: Sequence[str], k: int, budget: int) -> dict:
    """``metrics`` of ``simulate`` (kept in ``ROWS``)."""
    key = f"{suite.losses_key(setting)}|{setting}|{cuts(setting, splits)}|{recall.stage_name(pool)}|{k}|{budget}"
    return _kept(key, lambda: metrics(simulate(suite, setting, splits, pool, k, budget)))


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
    """P(the pick beats every other measured candidate on a truth sample): the library's ``best_chance`` share, a
    double bootstrap of the measuring documents (a resample, then from it a sample of the truth documents' size),
    each candidate compared with the pick on the documents it was measured on."""
    seed = (result.seed * 1_000 + result.target) * 1_000 + result.split
    return best_chance(result.outcome, 1, draws=draws, seed=seed, truth_documents=len(result.truth)).measured_share


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


def reliability_inputs(
    suite: Suite, suites: Mapping[str, Suite], setting: str, splits: int
) -> dict[str, tuple[list, list]]:
    """(the measured share of P(best): ``measured_probability``, the first stage's recall at the shortlist entered:
    ``recall_at``, whether the pick was the best of the truth documents) of every selection and cut of ``setting``
    (independent halves or the own sample), for halving at the default budget and ``rerank=3``, and for the latter
    without the unmeasured (the measured share alone: recall 1). P(best of all candidates) is their product."""
    held_out = next(name for name, s in suites.items() if s is suite)
    others = "+".join(s.key for name, s in suites.items() if name != held_out)
    others = hashlib.sha256(others.encode()).hexdigest()[:12]
    key = f"{suite.losses_key(setting)}|reliability|{setting}|{cuts(setting, splits)}|{others}"
    return _kept(key, lambda: _reliability_inputs(suite, suites, held_out, setting, splits))


def _reliability_inputs(
    suite: Suite, suites: Mapping[str, Suite], held_out: str, setting: str, splits: int
) -> dict[str, tuple[list, list, list]]:
    n = len(suite.names) - 1
    runs = {
        f"halving B={DEFAULT_RERANK_BUDGET}": simulate(
            suite, setting, splits, DEFAULT_POOL, min(n, HALVING_SHORTLIST), DEFAULT_RERANK_BUDGET
        ),
        "rerank=3": simulate(suite, setting, splits, DEFAULT_POOL, 3, 4),
    }
    inputs = {}
    for method, results in runs.items():
        measured = [measured_probability(r) for r in results]
        entered = [
            1.0 if r.outcome.plan.candidates >= n else recall_at(suites, held_out, r.outcome.plan.candidates)
            for r in results
        ]
        observed = [float(r.correct) for r in results]
        inputs[method] = (measured, entered, observed)
        if method == "rerank=3":
            inputs["rerank=3, the measured alone"] = (measured, [1.0] * len(results), observed)
    return inputs


#: the exponents ``fit_exponent`` chooses among
EXPONENTS = tuple(float(x) for x in np.geomspace(0.25, 16.0, 37))


def fit_exponent(measured: Sequence[float], entered: Sequence[float], observed: Sequence[float]) -> float:
    """γ of P(best) = recall × (measured share)^γ (γ > 1: less sure) of the highest Bernoulli likelihood of
    ``observed``; fitted on the other suites' selections (leave one suite out), never on the suite it is used on."""
    m, e, o = (np.asarray(x, dtype=np.float64) for x in (measured, entered, observed))

    def likelihood(gamma: float) -> float:
        p = np.clip(e * m**gamma, 1e-6, 1 - 1e-6)
        return float(np.sum(o * np.log(p) + (1 - o) * np.log1p(-p)))

    return max(EXPONENTS, key=likelihood)


def reliability(predicted: Sequence[float], observed: Sequence[float], splits: int) -> dict:
    """Bins of predicted P(best) (``recall.BINS``) with their rows, selections (rows per cut), mean prediction,
    observed frequency with its 95% interval (normal, over the selections; at least that of a share of 1/2 over
    them) and whether the bin says anything (enough selections) and holds (within 10 points)."""
    bins = []
    for low, high in itertools.pairwise(recall.BINS):
        inside = [i for i, p in enumerate(predicted) if low <= p < high]
        if not inside:
            continue
        p, o = float(np.mean([predicted[i] for i in inside])), float(np.mean([observed[i] for i in inside]))
        selections = len(inside) / splits
        spread = 1.96 * math.sqrt(max(o * (1 - o), 0.25 / selections) / selections)  # the observed share's 95%
        says = "too few" if selections < MIN_SELECTIONS else ("holds" if abs(p - o) <= RELIABLE_WITHIN else "off")
        bins.append(
            {
                "bin": [low, min(high, 1.0)],
                "rows": len(inside),
                "selections": selections,
                "predicted": p,
                "observed": o,
                "observed_interval": [max(o - spread, 0.0), min(o + spread, 1.0)],
                "says": says,
            }
        )
    brier = float(np.mean([(p - o) ** 2 for p, o in zip(predicted, observed)]))
    return {"bins": bins, "brier": brier, "rows": len(predicted)}
