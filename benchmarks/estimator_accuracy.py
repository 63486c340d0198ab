"""Sketch vs exact Fisher alignment on synthetic tasks, for every estimator, m and reflection choice.

For each configuration (benchmarks/synthetic.py: one softmax head, tasks with graded label overlap),
the exact A, S_a, S_e and ρ of every task pair come from ``fishersketch.exact`` (Gram form; norms as
U-statistics, ``exclude_self_pairs=True``, unbiased like the sketch's split-sample norm). Each variant
(estimator × m × Householder reflection on/off, pilot mean = mean activation of a pilot sample) sketches
every task with ``SketchState`` and compares with ``alignment_matrix``. Reported per variant, averaged over
sketch seeds: Spearman and MAE of A, S_a, S_e, ρ over all pairs (ρ: where ``alignment_matrix`` reports
it, and where Â is also significant); Spearman of A on pairs with exact A ≥ 0.02; the fitted c in
sd ≈ c √(R̂_i R̂_j / m) (RMS of (sketch − exact)/√(R̂_i R̂_j / m) over pairs and seeds); and the coverage
of ±2 stderr with that c and with the pooled c that the library ships (STDERR_CONSTANTS).

    python benchmarks/estimator_accuracy.py            # full run (≈ 11 min on 2 shared cores)
    python benchmarks/estimator_accuracy.py --quick    # small smoke run (writes to the temp dir)

Writes benchmarks/results/estimator_accuracy.{json,png}.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from scipy.stats import spearmanr
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import (
    SyntheticConfig,
    SyntheticTask,
    add_output_arguments,
    machine_info,
    make_tasks,
    pilot_activations,
    sketch_task,
    write_results,
)

from fishersketch import Signature, SketchSpec, alignment_matrix
from fishersketch.core.alignment import SIGNIFICANCE_Z
from fishersketch.core.spec import ESTIMATORS
from fishersketch.errors import TooFewDocumentsError
from fishersketch.exact import gram_inner_products

QUANTITIES = ("fisher", "activation", "error", "coupling")  # A, S_a, S_e, ρ
SKETCH_OF = {"fisher": 0, "activation": 1, "error": 2}  # row of Signature.self_dominances()
SYMBOLS = {"fisher": "A", "activation": "S_a", "error": "S_e", "coupling": "rho"}
A_THRESHOLD = 0.02


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig:
    """One synthetic configuration and the sketch settings tried on it."""

    name: str
    synthetic: SyntheticConfig
    sketch_sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    pilot_tokens_per_task: int = 64


FULL_CONFIGS = (
    BenchmarkConfig(
        name="K8192-d256",
        synthetic=SyntheticConfig(vocab_size=8192, d=256, num_tasks=14, tokens_per_task=1000, seed=1),
        sketch_sizes=(1024, 4096, 8192),
        seeds=(0, 1),
    ),
    BenchmarkConfig(
        name="K50257-d576",
        synthetic=SyntheticConfig(vocab_size=50257, d=576, num_tasks=12, tokens_per_task=500, seed=2),
        sketch_sizes=(1024, 4096, 8192),
        seeds=(0,),
    ),
)
QUICK_CONFIGS = (
    BenchmarkConfig(
        name="quick-K2048-d64",
        synthetic=SyntheticConfig(vocab_size=2048, d=64, num_tasks=6, tokens_per_task=300, seed=1),
        sketch_sizes=(1024, 4096),
        seeds=(0,),
    ),
)


@dataclasses.dataclass(frozen=True)
class Variant:
    estimator: str
    m: int
    reflection: bool

    @property
    def label(self) -> str:
        return f"{self.estimator}{'+refl' if self.reflection else ''}"


def exact_matrices(tasks: list[SyntheticTask]) -> dict[str, torch.Tensor]:
    """Exact A, S_a, S_e, ρ (n × n, float64) by the Gram form; diagonal norms as U-statistics."""
    n = len(tasks)
    norms = torch.stack(
        [
            gram_inner_products(t.activations, t.errors, t.activations, t.errors, exclude_self_pairs=True)
            for t in tqdm(tasks, desc="exact norms", leave=False)
        ]
    )
    cosine = torch.ones(3, n, n, dtype=torch.float64)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    for i, j in tqdm(pairs, desc="exact pairs", leave=False):
        cross = gram_inner_products(tasks[i].activations, tasks[i].errors, tasks[j].activations, tasks[j].errors)
        cosine[:, i, j] = cosine[:, j, i] = cross / torch.sqrt(norms[i] * norms[j])
    fisher, activation, error = cosine
    return {"fisher": fisher, "activation": activation, "error": error, "coupling": fisher / (activation * error)}


@dataclasses.dataclass
class PairRecords:
    """Per-pair sketch values, exact values and error units u = √(R̂_i R̂_j / m), stacked over seeds."""

    sketch: dict[str, list[torch.Tensor]] = dataclasses.field(default_factory=lambda: {q: [] for q in QUANTITIES})
    unit: dict[str, list[torch.Tensor]] = dataclasses.field(default_factory=lambda: {q: [] for q in SKETCH_OF})
    coupling_defined: list[torch.Tensor] = dataclasses.field(default_factory=list)
    fisher_significant: list[torch.Tensor] = dataclasses.field(default_factory=list)
    seconds: list[float] = dataclasses.field(default_factory=list)
    failures: list[str] = dataclasses.field(default_factory=list)


def upper_pairs(matrix: torch.Tensor) -> torch.Tensor:
    rows, cols = torch.triu_indices(matrix.shape[0], matrix.shape[1], offset=1)
    return matrix[rows, cols]


def record_seed(records: PairRecords, signatures: list[Signature], m: int) -> None:
    matrix = alignment_matrix(signatures)
    fisher, activation, error = matrix.fisher, matrix.activation, matrix.error
    values = {"fisher": fisher, "activation": activation, "error": error, "coupling": fisher / (activation * error)}
    for quantity, value in values.items():
        records.sketch[quantity].append(upper_pairs(value))
    dominance = torch.stack([s.self_dominances() for s in signatures], dim=1)  # (3, n)
    for quantity, row in SKETCH_OF.items():
        unit = torch.sqrt(dominance[row][:, None] * dominance[row][None, :] / m)
        records.unit[quantity].append(upper_pairs(unit))
    records.coupling_defined.append(upper_pairs(~torch.isnan(matrix.coupling)))
    records.fisher_significant.append(upper_pairs(matrix.fisher > SIGNIFICANCE_Z * matrix.stderr))


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    return float(spearmanr(x.numpy(), y.numpy()).statistic) if len(x) > 2 else math.nan


def standardized_errors(records: PairRecords, exact_pairs: dict[str, torch.Tensor], quantity: str) -> torch.Tensor:
    """(sketch − exact) / √(R̂_i R̂_j / m) for every pair and seed."""
    runs = len(records.sketch[quantity])
    return (torch.cat(records.sketch[quantity]) - exact_pairs[quantity].repeat(runs)) / torch.cat(records.unit[quantity])


def summarize(records: PairRecords, exact_pairs: dict[str, torch.Tensor]) -> dict[str, float]:
    """Spearman / MAE per quantity (mean over seeds), fitted c and coverage per sketch."""
    summary: dict[str, float] = {}
    for quantity in QUANTITIES:
        symbol = SYMBOLS[quantity]
        per_seed_rank, per_seed_mae = [], []
        for seed_index, sketch in enumerate(records.sketch[quantity]):
            keep = records.coupling_defined[seed_index] if quantity == "coupling" else torch.ones_like(sketch, dtype=torch.bool)
            per_seed_rank.append(spearman(sketch[keep], exact_pairs[quantity][keep]))
            per_seed_mae.append(float((sketch[keep] - exact_pairs[quantity][keep]).abs().mean()))
        summary[f"spearman_{symbol}"] = sum(per_seed_rank) / len(per_seed_rank)
        summary[f"mae_{symbol}"] = sum(per_seed_mae) / len(per_seed_mae)
    strong = exact_pairs["fisher"] >= A_THRESHOLD
    summary["spearman_A_strong"] = sum(spearman(s[strong], exact_pairs["fisher"][strong]) for s in records.sketch["fisher"]) / len(
        records.sketch["fisher"]
    )
    summary["num_pairs"] = len(exact_pairs["fisher"])
    summary["num_strong_pairs"] = int(strong.sum())
    summary["rho_defined_fraction"] = float(torch.cat(records.coupling_defined).double().mean())
    confident = [d & f for d, f in zip(records.coupling_defined, records.fisher_significant)]
    summary["spearman_rho_A_significant"] = sum(
        spearman(s[keep], exact_pairs["coupling"][keep]) for s, keep in zip(records.sketch["coupling"], confident)
    ) / len(confident)
    summary["rho_A_significant_fraction"] = float(torch.cat(confident).double().mean())
    for quantity in SKETCH_OF:
        ratio = standardized_errors(records, exact_pairs, quantity)
        c = float(ratio.pow(2).mean().sqrt())
        summary[f"c_{SYMBOLS[quantity]}"] = c
        summary[f"coverage2_{SYMBOLS[quantity]}"] = float((ratio.abs() <= 2 * c).double().mean())
        summary[f"mean_unit_{SYMBOLS[quantity]}"] = float(torch.cat(records.unit[quantity]).mean())
    summary["sketch_seconds_per_seed"] = sum(records.seconds) / len(records.seconds)
    return summary


def run_config(config: BenchmarkConfig) -> dict:
    started = time.perf_counter()
    head, tasks = make_tasks(config.synthetic)
    pilot_mean = pilot_activations(head, config.pilot_tokens_per_task).mean(dim=0)
    generate_seconds = time.perf_counter() - started
    started = time.perf_counter()
    exact = exact_matrices(tasks)
    exact_seconds = time.perf_counter() - started
    exact_pairs = {q: upper_pairs(v) for q, v in exact.items()}
    variants = [Variant(e, m, r) for e in ESTIMATORS for m in config.sketch_sizes for r in (False, True)]
    results = []
    for variant in tqdm(variants, desc=config.name):
        records = PairRecords()
        for seed in config.seeds:
            spec = SketchSpec(
                d=config.synthetic.d, vocab_size=config.synthetic.vocab_size, m=variant.m, seed=seed, estimator=variant.estimator
            )
            spec = spec.with_reflection(pilot_mean if variant.reflection else None)
            started = time.perf_counter()
            try:
                signatures = [sketch_task(task, spec) for task in tasks]
            except TooFewDocumentsError as error:  # a non-positive split-sample norm: counted, not fatal
                records.failures.append(f"seed {seed}: {error}")
                continue
            records.seconds.append(time.perf_counter() - started)
            record_seed(records, signatures, variant.m)
        succeeded = bool(records.seconds)
        results.append(
            {
                **dataclasses.asdict(variant),
                "failures": records.failures,
                "summary": summarize(records, exact_pairs) if succeeded else None,
                "sketch_A_first_seed": records.sketch["fisher"][0].tolist() if succeeded else None,
                "abs_standardized_error_A": (
                    standardized_errors(records, exact_pairs, "fisher").abs().tolist() if succeeded else None
                ),
            }
        )
    return {
        "name": config.name,
        "synthetic": dataclasses.asdict(config.synthetic),
        "seeds": list(config.seeds),
        "pilot_tokens": config.pilot_tokens_per_task * config.synthetic.num_tasks,
        "exact_pairs": {SYMBOLS[q]: v.tolist() for q, v in exact_pairs.items()},
        "generate_seconds": generate_seconds,
        "exact_seconds": exact_seconds,
        "variants": results,
    }


def succeeded(variant: dict) -> bool:
    """At least one seed sketched every task (no non-positive split-sample norm)."""
    return variant["summary"] is not None


def pooled_constants(configs: list[dict]) -> dict[str, float]:
    """c per estimator variant, pooled over configurations and m (RMS of the per-run c of A, weighted by pairs × seeds)."""
    pooled: dict[str, list[tuple[float, int]]] = {}
    for config in configs:
        weight = len(config["exact_pairs"]["A"]) * len(config["seeds"])
        for variant in filter(succeeded, config["variants"]):
            label = Variant(variant["estimator"], variant["m"], variant["reflection"]).label
            pooled.setdefault(label, []).append((variant["summary"]["c_A"], weight))
    return {label: math.sqrt(sum(c * c * w for c, w in items) / sum(w for _, w in items)) for label, items in pooled.items()}


def add_pooled_coverage(configs: list[dict], constants: dict[str, float]) -> None:
    """Coverage of ±2 stderr with the pooled c (the value the library ships) for every variant."""
    for config in configs:
        for variant in filter(succeeded, config["variants"]):
            c = constants[Variant(variant["estimator"], variant["m"], variant["reflection"]).label]
            errors = torch.tensor(variant["abs_standardized_error_A"])
            variant["summary"]["coverage2_A_pooled_c"] = float((errors <= 2 * c).double().mean())


def print_table(configs: list[dict]) -> None:
    columns = ["spearman_A", "spearman_A_strong", "mae_A", "spearman_S_a", "mae_S_a", "spearman_S_e", "mae_S_e"]
    columns += ["spearman_rho", "spearman_rho_A_significant", "mae_rho", "c_A", "coverage2_A", "coverage2_A_pooled_c", "c_S_a", "c_S_e"]
    columns += ["sketch_seconds_per_seed"]
    short = ["ρs A", "ρs A≥.02", "MAE A", "ρs S_a", "MAE S_a", "ρs S_e", "MAE S_e", "ρs ρ", "ρs ρ|A", "MAE ρ", "c A", "cov A", "cov A@c̄", "c S_a", "c S_e", "sec"]
    for config in configs:
        synthetic = config["synthetic"]
        print(
            f"\n{config['name']}: K={synthetic['vocab_size']} d={synthetic['d']} tasks={synthetic['num_tasks']} "
            f"tokens/task={synthetic['tokens_per_task']} seeds={len(config['seeds'])} "
            f"(exact {config['exact_seconds']:.0f} s)"
        )
        print(f"{'estimator':28s} {'m':>5s} " + " ".join(f"{s:>8s}" for s in short))
        for variant in config["variants"]:
            label = Variant(variant["estimator"], variant["m"], variant["reflection"]).label
            row = " ".join(f"{variant['summary'][c]:8.3f}" for c in columns) if succeeded(variant) else ""
            failed = f"  ({len(variant['failures'])} of {len(config['seeds'])} seeds failed)" if variant["failures"] else ""
            print(f"{label:28s} {variant['m']:5d} {row}{failed}")


def plot(configs: list[dict], constants: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted(constants)
    colors = {label: f"C{index}" for index, label in enumerate(labels)}
    figure, axes = plt.subplots(2, 2, figsize=(12, 9))
    scatter_config = configs[-1]
    exact_a = scatter_config["exact_pairs"]["A"]
    for label in labels:
        for variant in filter(succeeded, scatter_config["variants"]):
            if variant["m"] == 4096 and Variant(variant["estimator"], variant["m"], variant["reflection"]).label == label:
                axes[0, 0].scatter(exact_a, variant["sketch_A_first_seed"], s=10, alpha=0.7, color=colors[label], label=label)
    axes[0, 0].plot([0, 1], [0, 1], color="gray", lw=0.8)
    axes[0, 0].set(xlabel="exact A", ylabel="sketch A (m=4096, seed 0)", title=f"{scatter_config['name']}: sketch vs exact")
    axes[0, 0].legend(fontsize=8)
    for axis, metric, title in (
        (axes[0, 1], "spearman_A", "Spearman A, all pairs"),
        (axes[1, 0], "spearman_A_strong", f"Spearman A, pairs with exact A ≥ {A_THRESHOLD}"),
    ):
        for config, style in zip(configs, ("-", "--", ":")):
            for label in labels:
                points = [
                    (v["m"], v["summary"][metric])
                    for v in filter(succeeded, config["variants"])
                    if Variant(v["estimator"], v["m"], v["reflection"]).label == label
                ]
                axis.plot(*zip(*points), style, marker="o", color=colors[label], label=f"{label} [{config['name']}]")
        axis.set(xscale="log", xlabel="m", ylabel="Spearman vs exact", title=title)
        axis.minorticks_off()
        axis.set_xticks([1024, 4096, 8192], ["1024", "4096", "8192"])
        axis.axhline(0.93 if metric == "spearman_A" else 0.97, color="gray", lw=0.8, ls=":")
        axis.legend(fontsize=6)
    axes[1, 1].bar(labels, [constants[label] for label in labels], color=[colors[label] for label in labels])
    axes[1, 1].set(ylabel="c (pooled)", title="fitted c in sd ≈ c √(R̂_i R̂_j / m)")
    axes[1, 1].tick_params(axis="x", labelrotation=20, labelsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run only the configuration of this name")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    selected = [c for c in (QUICK_CONFIGS if args.quick else FULL_CONFIGS) if args.only in (None, c.name)]
    configs = [run_config(config) for config in selected]
    constants = pooled_constants(configs)
    add_pooled_coverage(configs, constants)
    print_table(configs)
    print("\npooled c (A) per variant: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(constants.items())))
    result = {
        "benchmark": "estimator_accuracy",
        "command": "python benchmarks/estimator_accuracy.py" + (" --quick" if args.quick else ""),
        "threads": args.threads,
        "machine": machine_info(),
        "total_seconds": time.perf_counter() - started,
        "pooled_c_A": constants,
        "configs": configs,
    }
    write_results("estimator_accuracy", result, lambda path: plot(configs, constants, path), args)
    print(f"total {result['total_seconds']:.0f} s")


if __name__ == "__main__":
    main()
