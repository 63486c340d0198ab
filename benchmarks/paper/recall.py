"""Recall of the first stage of a two-stage selection, and how far to trust a pick (issue 27).

A two-stage selection ranks every candidate by a signature geometry (the *first stage*), then measures the
target's loss under the top k adapters and keeps the best (the *second stage*). Its figure of merit is the first
stage's recall: recall@k = P(the true best source is among the first k), and the regret after an *oracle*
re-rank of the first k (the best transfer minus the best among those k). A *pooled* first stage with budget k
merges several geometries' rankings round-robin (first of each in turn, repeats skipped) and keeps the first k
distinct candidates, so every first stage loads the same k adapters.

Reliability: the verdict's P(best) of each selection against how often its #1 was the true best (per LoRA
seed). P(best) assumes the candidates' scores are the true ones up to their sketch noise; the score-to-transfer
misfit is the larger error, so ``calibration`` inflates every standard error by one factor fitted by maximum
likelihood on the other suites (leave one suite out). Accounting for the target's sketch noise shared by all
candidates (positively correlated scores) would shrink the variance of every difference, sharpening P(best):
it cannot fix overconfidence.

    python -m benchmarks.paper.recall        # table, benchmarks/results/paper_recall.json and .png
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from benchmarks.paper.common import RESULTS_DIR
from benchmarks.paper.report import print_table, write_json
from fisherhub.core.geometry import CLEAR_GAP_Z

#: the suites with committed results, and their names' key
SUITES = {
    "exp4": "paper_exp4_domains",
    "exp5": "paper_exp5_smiles",
    "exp3": "paper_exp3_verbalizer",
    "exp6": "paper_exp6_heldout",
}
#: the suites the default first stage and k are chosen on (exp. 3's regret is in other units: nats of one label)
RULE_SUITES = ("exp4", "exp5")
KS = (1, 2, 3, 4, 5)
#: first stages select_adapter can run from signatures alone (head geometries and auto), single and pooled
LIBRARY_STAGES = (
    ("fishersketch",),
    ("activation",),
    ("error",),
    ("auto",),
    ("fishersketch", "activation"),
    ("fishersketch", "error"),
    ("activation", "error"),
    ("fishersketch", "activation", "error"),
)
#: the others, for comparison (they need the candidates' data, other signatures or models)
OTHER_STAGES = (
    ("embedding",),
    ("linear_cka",),
    ("diagonal_fisher",),
    ("head_input",),
    ("network_lora",),
    ("auto_head",),
    ("fisher_shrunk",),
    ("fishersketch", "embedding"),
    ("activation", "embedding"),
)
#: the default two-stage selection: fixed by ``choose_default`` on ``RULE_SUITES`` before experiment 6 was run
DEFAULT_FIRST_STAGE, DEFAULT_K = ("activation", "error"), 3
#: the suites measure each target's sample loss under the default first stage's candidates (what the second stage needs)
MEASURED_K = DEFAULT_K
#: P(best) bins of the reliability table
BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 0.95, 1.0 + 1e-9)
DRAWS = 20_000
#: the standard-error inflations ``fit_inflation`` chooses among
INFLATIONS = tuple(float(x) for x in np.geomspace(1.0, 64.0, 25))


def stage_name(stage: Sequence[str]) -> str:
    return " + ".join(stage)


def first_stage(scores: Mapping[str, np.ndarray], stage: Sequence[str], target: int, k: int) -> list[int]:
    """The first ``k`` distinct candidates (sources ≠ ``target``) of the round-robin merge of ``stage``'s rankings
    (each by its score [source, target], highest first, ties in source order)."""
    n = next(iter(scores.values())).shape[0]
    candidates = [s for s in range(n) if s != target]
    columns = [np.asarray(scores[key])[:, target] for key in stage]
    rankings = [sorted(candidates, key=lambda s, column=column: -column[s]) for column in columns]
    chosen: list[int] = []
    for position in range(len(candidates)):
        for ranking in rankings:
            if ranking[position] not in chosen:
                chosen.append(ranking[position])
    return chosen[:k]


def measured_pairs(
    scores: Mapping[str, torch.Tensor], stage: Sequence[str] = DEFAULT_FIRST_STAGE, k: int = MEASURED_K
) -> np.ndarray:
    """[source, target]: whether source is among target's first ``k`` candidates of ``stage`` (those a suite
    measures the target's sample loss under)."""
    matrices = {key: np.asarray(value, dtype=np.float64) for key, value in scores.items()}
    n = next(iter(matrices.values())).shape[0]
    measured = np.zeros((n, n), dtype=bool)
    for target in range(n):
        measured[first_stage(matrices, stage, target, k), target] = True
    return measured


def two_stage_scores(
    scores: Mapping[str, torch.Tensor],
    sample_transfer: np.ndarray,
    stage: Sequence[str] = DEFAULT_FIRST_STAGE,
    k: int = DEFAULT_K,
) -> dict[str, torch.Tensor]:
    """The score matrix of the two-stage selection: ``sample_transfer`` [source, target] (the drop of the
    target's own sample loss under each adapter) on the first stage's k candidates of each target; the others
    get 1 less than the lowest of those (ranked below them)."""
    matrices = {key: np.asarray(value, dtype=np.float64) for key, value in scores.items()}
    n = sample_transfer.shape[0]
    result = np.zeros((n, n))
    for target in range(n):
        chosen = first_stage(matrices, stage, target, k)
        result[:, target] = sample_transfer[chosen, target].min() - 1.0
        result[chosen, target] = sample_transfer[chosen, target]
    return {"two_stage": torch.from_numpy(result)}


def recall_row(scores: Mapping[str, np.ndarray], transfers: np.ndarray, stage: Sequence[str], k: int) -> dict:
    """Recall@k and the oracle re-rank's mean and max regret (over targets; means over the seeds ``transfers``)."""
    recall, mean_regret, max_regret = [], [], []
    n = transfers.shape[1]
    for transfer in transfers:
        hits, regrets = [], []
        for target in range(n):
            truth = {s: transfer[s, target] for s in range(n) if s != target}
            best = max(truth.values())
            chosen = first_stage(scores, stage, target, k)
            hits.append(float(max(truth[s] for s in chosen) >= best))
            regrets.append(best - max(truth[s] for s in chosen))
        recall.append(np.mean(hits))
        mean_regret.append(np.mean(regrets))
        max_regret.append(np.max(regrets))
    return {
        "recall": float(np.mean(recall)),
        "mean_regret": float(np.mean(mean_regret)),
        "max_regret": float(np.mean(max_regret)),
    }


def load_suite(suite: str) -> dict:
    result = json.loads((RESULTS_DIR / f"{SUITES[suite]}.json").read_text())
    return {
        "names": result.get("domains") or result["tasks"],
        "transfers": np.array(result["transfer_per_seed"], dtype=np.float64),
        "scores": {k: np.array(v, dtype=np.float64) for k, v in result["scores"].items()},
        "selections": result["selections"],
        "sketch_id": result["sketch_id"],
        "sample_transfers": (
            np.array(result["sample_transfer_per_seed"], dtype=np.float64)
            if "sample_transfer_per_seed" in result
            else None
        ),
        "sample_losses": (
            {k: np.array(v, dtype=np.float64) for k, v in result["sample_losses"].items() if k != "relative_perplexity"}
            if "sample_losses" in result
            else None
        ),
        "sample_measured": np.array(result["sample_measured"], dtype=bool) if "sample_measured" in result else None,
    }


def measured_candidates(data: dict, target: int) -> list[int]:
    """The candidates whose loss on ``target``'s sample the suite measured (the default first stage's, computed from
    the unrounded scores; the JSON's rounded ones could order near-ties differently)."""
    if data["sample_measured"] is not None:
        return [int(s) for s in np.flatnonzero(data["sample_measured"][:, target])]
    return first_stage(data["scores"], DEFAULT_FIRST_STAGE, target, DEFAULT_K)


def recall_tables(suites: Mapping[str, dict]) -> dict:
    """``recall_row`` of every first stage available in each suite, for every k."""
    tables = {}
    for suite, data in suites.items():
        stages = [s for s in LIBRARY_STAGES + OTHER_STAGES if all(key in data["scores"] for key in s)]
        tables[suite] = {
            stage_name(s): {k: recall_row(data["scores"], data["transfers"], s, k) for k in KS} for s in stages
        }
    return tables


def choose_default(tables: Mapping[str, dict]) -> dict:
    """The rule fixing the default first stage and k (committed before experiment 6 was run): among
    ``LIBRARY_STAGES``, the smallest k at which some first stage's oracle re-rank keeps the max regret ≤ 0.01
    on every suite of ``RULE_SUITES``; at that k the first stage of highest mean recall over those suites
    (ties: fewer geometries, then ``LIBRARY_STAGES`` order). When no k ≤ 5 qualifies, k = 5 and the highest
    mean recall."""
    names = [stage_name(s) for s in LIBRARY_STAGES]

    def mean_recall(name: str, k: int) -> float:
        return float(np.mean([tables[suite][name][k]["recall"] for suite in RULE_SUITES]))

    for k in KS:
        qualifying = [n for n in names if all(tables[suite][n][k]["max_regret"] <= 0.01 for suite in RULE_SUITES)]
        if qualifying:
            break
    else:
        k, qualifying = KS[-1], names
    best = max(qualifying, key=lambda n: (mean_recall(n, k), -n.count("+"), -names.index(n)))
    return {
        "first_stage": best,
        "k": k,
        "mean_recall": mean_recall(best, k),
        "max_regret": {suite: tables[suite][best][k]["max_regret"] for suite in RULE_SUITES},
    }


# -- reliability ---------------------------------------------------------------------------------------
def probability_best(values: np.ndarray, stderr: np.ndarray, inflation: float = 1.0, seed: int = 0) -> np.ndarray:
    """P(candidate i has the highest true score), true scores ~ N(value, (inflation·se)²) independent (the
    verdict's model, ``fisherhub.analysis.verdict.probability_best``, with the standard errors inflated)."""
    rng = np.random.default_rng(seed)
    se = np.maximum(stderr, 1e-9) * inflation
    sampled = values + se * rng.standard_normal((DRAWS, len(values)))
    return np.bincount(sampled.argmax(axis=1), minlength=len(values)) / DRAWS


def first_stage_records(data: dict, key: str) -> list[dict]:
    """Per target and LoRA seed of a suite's ``key`` selections: the candidates' scores and standard errors, which
    of them are truly best, and whether the verdict was clear."""
    names, records = list(data["names"]), []
    for selection in data["selections"][key]:
        t = names.index(selection["target"])
        candidates = [names.index(c) for c in selection["candidates"]]
        for transfer in data["transfers"]:
            truth = transfer[candidates, t]
            records.append(
                {
                    "values": np.array(selection["scores"]["values"]),
                    "stderr": np.array(selection["scores"]["stderr"]),
                    "is_best": truth >= truth.max() - 1e-12,
                    "clear": selection["verdict"]["clear"],
                }
            )
    return records


def first_stage_predictions(records: Sequence[dict], inflation: float = 1.0) -> list[tuple[float, float, bool]]:
    """(P(best) of #1, whether #1 is the true best, clear) of each record, with standard errors × ``inflation``."""
    rows = []
    for record in records:
        first = int(np.argmax(record["values"]))
        p = probability_best(record["values"], record["stderr"], inflation)[first]
        clear = record["clear"] if inflation == 1.0 else _gap_z(record, inflation) >= CLEAR_GAP_Z
        rows.append((float(p), float(record["is_best"][first]), clear))
    return rows


def _gap_z(record: dict, inflation: float) -> float:
    order = np.argsort(-record["values"])
    first, second = order[0], order[1]
    spread = inflation * np.hypot(max(record["stderr"][first], 1e-9), max(record["stderr"][second], 1e-9))
    return float((record["values"][first] - record["values"][second]) / spread)


def second_stage_predictions(data: dict, draws: int = 2000, seed: int = 0) -> list[tuple[float, float, bool]]:
    """(P(best), whether the pick is the true best, clear) of the measured two-stage pick of every target and seed:
    P(best) = the share of bootstrap resamples of the target's sample documents in which the pick has the lowest
    loss among the k measured; clear = it leads the runner-up by ≥ 2 bootstrap se of the paired difference."""
    losses = data["sample_losses"]
    rng = np.random.default_rng(seed)
    rows = []
    for r, transfer in enumerate(data["transfers"]):
        n = transfer.shape[0]
        for target in range(n):
            units = np.flatnonzero(losses["counts"][target] > 0)
            weights = np.stack(
                [np.bincount(rng.integers(0, len(units), len(units)), minlength=len(units)) for _ in range(draws)]
            )
            chosen = measured_candidates(data, target)
            nll = losses["adapted"][r, chosen][:, target][:, units]  # (k, U)
            resampled = (weights @ nll.T) / (weights @ losses["counts"][target, units])[:, None]  # (draws, k)
            point = nll.sum(axis=1) / losses["counts"][target, units].sum()
            order = np.argsort(point)
            p = float((resampled.argmin(axis=1) == order[0]).mean())
            difference = resampled[:, order[1]] - resampled[:, order[0]]
            clear = bool((point[order[1]] - point[order[0]]) >= CLEAR_GAP_Z * difference.std())
            best = max(transfer[s, target] for s in range(n) if s != target)
            rows.append((p, float(transfer[chosen[order[0]], target] >= best - 1e-12), clear))
    return rows


def reliability(rows: Sequence[tuple[float, float, bool]]) -> dict:
    """Predicted P(best) against the observed frequency of being best, per bin of P(best), and for the clear and
    the not clear verdicts; the Brier score."""

    def summary(inside):
        return {
            "selections": len(inside),
            "predicted": float(np.mean([p for p, _, _ in inside])) if inside else None,
            "observed": float(np.mean([o for _, o, _ in inside])) if inside else None,
        }

    bins = [
        {"bin": [low, min(high, 1.0)], **summary(inside)}
        for low, high in itertools.pairwise(BINS)
        if (inside := [row for row in rows if low <= row[0] < high])
    ]
    return {
        "bins": bins,
        "verdict": {
            "clear": summary([row for row in rows if row[2]]),
            "not clear": summary([row for row in rows if not row[2]]),
        },
        "brier": float(np.mean([(p - o) ** 2 for p, o, _ in rows])),
        "selections": len(rows),
    }


def fit_inflation(records: Sequence[dict], grid: Sequence[float] = INFLATIONS) -> float:
    """The standard-error inflation that maximises the likelihood that each selection's true best is the best
    (Σ log P(best) of the truly best candidates, ties shared) over ``records``."""

    def log_likelihood(inflation: float) -> float:
        return sum(
            np.log(max(float(probability_best(r["values"], r["stderr"], inflation)[r["is_best"]].sum()), 1e-4))
            for r in records
        )

    return float(max(grid, key=log_likelihood))


def calibration(suites: Mapping[str, dict], key: str = "auto") -> dict:
    """Reliability of the first stage's P(best) before, and after the inflation fitted on the other suites (leave one
    suite out)."""
    records = {suite: first_stage_records(data, key) for suite, data in suites.items() if key in data["selections"]}
    factors = {
        suite: fit_inflation([r for other, rs in records.items() if other != suite for r in rs]) for suite in records
    }
    before = [row for rs in records.values() for row in first_stage_predictions(rs)]
    after = [row for suite, rs in records.items() for row in first_stage_predictions(rs, factors[suite])]
    return {
        "selection": key,
        "before": reliability(before),
        "after": reliability(after),
        "inflation_by_held_out_suite": factors,
    }


def two_stage_rows(suites: Mapping[str, dict]) -> dict:
    """The measured two-stage selection (the default first stage re-ranked by the target sample's loss) of the
    suites that have it."""
    rows = {}
    for suite, data in suites.items():
        if data["sample_transfers"] is None:
            continue
        top1, regret = [], []
        for transfer, sample in zip(data["transfers"], data["sample_transfers"]):
            n = transfer.shape[0]
            for target in range(n):
                chosen = measured_candidates(data, target)
                pick = max(chosen, key=lambda s: sample[s, target])
                best = max(transfer[s, target] for s in range(n) if s != target)
                top1.append(float(transfer[pick, target] >= best))
                regret.append(best - transfer[pick, target])
        rows[suite] = {
            "top1": float(np.mean(top1)),
            "mean_regret": float(np.mean(regret)),
            "max_regret": float(np.max(regret)),
        }
    return rows


def figure(tables: Mapping[str, dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(tables), figsize=(5 * len(tables), 7), squeeze=False)
    for column, (suite, table) in enumerate(tables.items()):
        for name, by_k in table.items():
            style = "-" if any(name == stage_name(s) for s in LIBRARY_STAGES) else ":"
            axes[0, column].plot(KS, [by_k[k]["recall"] for k in KS], style, marker="o", label=name)
            axes[1, column].plot(KS, [by_k[k]["max_regret"] for k in KS], style, marker="o", label=name)
        axes[0, column].set_title(f"{suite}: recall@k of the true best")
        axes[1, column].set_title(f"{suite}: max regret after an oracle re-rank of the top k")
        axes[1, column].set_xlabel("k")
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    started = time.time()
    suites = {suite: load_suite(suite) for suite in SUITES if (RESULTS_DIR / f"{SUITES[suite]}.json").exists()}
    tables = recall_tables(suites)
    for suite, table in tables.items():
        print_table(
            ["first stage", *(f"recall@{k}" for k in KS), *(f"max regret@{k}" for k in KS)],
            [
                [name, *(by_k[k]["recall"] for k in KS), *(by_k[k]["max_regret"] for k in KS)]
                for name, by_k in table.items()
            ],
            title=f"{suite} (sketch {suites[suite]['sketch_id']}): recall@k of the true best source and max "
            "regret after an oracle re-rank of the top k (means over the LoRA seeds)",
        )
    rule = choose_default({s: tables[s] for s in RULE_SUITES if s in tables})
    print("default first stage and k by the rule:", rule, "| fixed:", stage_name(DEFAULT_FIRST_STAGE), DEFAULT_K)
    trust = {key: calibration(suites, key) for key in ("auto", "auto_head")}
    second = [
        row for data in suites.values() if data["sample_losses"] is not None for row in second_stage_predictions(data)
    ]
    if second:
        trust["two_stage"] = {"second_stage": reliability(second), "inflation_by_held_out_suite": None}
    for key, result in trust.items():
        for when in ("before", "after", "second_stage"):
            table = result.get(when)
            if table is None:
                continue
            print_table(
                ["P(best) bin", "selections", "predicted", "observed"],
                [
                    [f"{r['bin'][0]:.2f}-{r['bin'][1]:.2f}", r["selections"], r["predicted"], r["observed"]]
                    for r in table["bins"]
                ],
                title=f"reliability of {key}: {when} (inflation by held-out suite "
                f"{result['inflation_by_held_out_suite'] if when == 'after' else 1}); Brier "
                f"{table['brier']:.3f}; verdict {table['verdict']}",
            )
    measured = two_stage_rows(suites)
    if measured:
        print("measured two-stage selection:", measured)
    path = RESULTS_DIR / "paper_recall.png"
    figure(tables, path)
    write_json(
        "paper_recall",
        {
            "description": __doc__.splitlines()[0],
            "sketch_ids": {s: d["sketch_id"] for s, d in suites.items()},
            "recall": tables,
            "rule": rule,
            "default": {"first_stage": stage_name(DEFAULT_FIRST_STAGE), "k": DEFAULT_K},
            "reliability": trust,
            "two_stage": measured,
        },
        started,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
