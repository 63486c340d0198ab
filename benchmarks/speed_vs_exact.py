"""Wall-clock of all-pairs Fisher alignment: exact Gram form vs FisherSketch, side by side in one run.

20 synthetic tasks × 2000 scored tokens at K = 49,152, d = 576 (SmolLM2's head size). For each thread
count (1 and 2, ``torch.set_num_threads``):

- sketch, per estimator: ``SketchState.update`` (batches of 256 tokens) + ``finalize`` for every task,
  then one ``alignment_matrix`` over the 20 signatures (all 190 pairs);
- exact: ``fisherhub.core.exact.gram_inner_products`` (float64, chunked) for the 20 norms ‖F_k‖²
  (U-statistics) and the 190 cross products ⟨F_i, F_j⟩, each costing O(n² (K + d)). The whole set
  would take hours on 2 cores, so a measured subset (the norms and cross pairs of the first
  ``--exact-tasks`` tasks) is timed and the total is extrapolated linearly in the number of Gram
  products (20 norms + 190 pairs). The output says so.

Generating the synthetic tokens is not timed. Writes benchmarks/results/speed_vs_exact.{json,png}.

    python -m benchmarks.speed_vs_exact              # full run (≈ 25 min on 2 cores)
    python -m benchmarks.speed_vs_exact --quick      # small smoke run (writes to the temp dir)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from tqdm import tqdm


from benchmarks.synthetic import (
    SyntheticConfig,
    SyntheticHead,
    SyntheticTask,
    add_output_arguments,
    machine_info,
    sketch_task,
    task_stream,
    write_results,
)

from fisherhub import SketchSpec, alignment_matrix
from fisherhub.core.registry import DEFAULT_ESTIMATOR, ESTIMATORS
from fisherhub.core.exact import gram_inner_products

THREAD_COUNTS = (1, 2)


@dataclasses.dataclass(frozen=True)
class SpeedConfig:
    synthetic: SyntheticConfig
    m: int
    exact_tasks: int  # the exact norms and cross pairs of this many tasks are timed

    @property
    def num_pairs(self) -> int:
        return self.synthetic.num_tasks * (self.synthetic.num_tasks - 1) // 2


FULL = SpeedConfig(
    synthetic=SyntheticConfig(vocab_size=49152, d=576, num_tasks=20, tokens_per_task=2000, seed=3),
    m=4096,
    exact_tasks=3,
)
QUICK = SpeedConfig(
    synthetic=SyntheticConfig(vocab_size=2048, d=64, num_tasks=4, tokens_per_task=200, seed=3), m=512, exact_tasks=3
)


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - started


def time_sketches(config: SpeedConfig, head: SyntheticHead) -> tuple[dict, list[SyntheticTask]]:
    """Per (threads, estimator): seconds per task for update + finalize, and for alignment_matrix.

    Tasks are generated one at a time (20 × 2000 × 49,152 float32 errors would be 7.9 GB); each is
    sketched with every (threads, estimator) before the next, so machine load hits all alike.
    The first ``exact_tasks`` tasks are kept for the exact timing.
    """
    synthetic = config.synthetic
    specs = {e: SketchSpec(d=synthetic.d, vocab_size=synthetic.vocab_size, m=config.m, estimator=e) for e in ESTIMATORS}
    timings = {(t, e): {"task_seconds": [], "signatures": []} for t in THREAD_COUNTS for e in ESTIMATORS}
    kept = []
    for task in tqdm(task_stream(head), total=synthetic.num_tasks, desc="sketch"):
        for (threads, estimator), entry in timings.items():
            torch.set_num_threads(threads)
            signature, seconds = timed(sketch_task, task, specs[estimator])
            entry["task_seconds"].append(seconds)
            entry["signatures"].append(signature)
        if len(kept) < config.exact_tasks:
            kept.append(task)
    results = {}
    for (threads, estimator), entry in timings.items():
        torch.set_num_threads(threads)
        matrix, matrix_seconds = timed(alignment_matrix, entry["signatures"])
        results.setdefault(str(threads), {})[estimator] = {
            "task_seconds": entry["task_seconds"],
            "alignment_matrix_seconds": matrix_seconds,
            "total_seconds": sum(entry["task_seconds"]) + matrix_seconds,
            "tokens_per_second": synthetic.num_tasks * synthetic.tokens_per_task / sum(entry["task_seconds"]),
            "fisher_measured_pairs": {
                f"{i},{j}": float(matrix.fisher[i, j])
                for i in range(config.exact_tasks)
                for j in range(i + 1, config.exact_tasks)
            },
        }
    return results, kept


def time_exact(config: SpeedConfig, tasks: list[SyntheticTask]) -> dict:
    """Per threads: measured seconds of the subset's norms and cross pairs, and the extrapolated total."""
    num_tasks = config.synthetic.num_tasks
    results = {}
    for threads in THREAD_COUNTS:
        torch.set_num_threads(threads)
        norm_seconds, pair_seconds, norms, fisher = [], [], [], {}
        for task in tqdm(tasks, desc=f"exact norms ({threads} thr)", leave=False):
            norm, seconds = timed(
                gram_inner_products,
                task.activations,
                task.errors,
                task.activations,
                task.errors,
                exclude_self_pairs=True,
            )
            norm_seconds.append(seconds)
            norms.append(norm)
        pairs = [(i, j) for i in range(len(tasks)) for j in range(i + 1, len(tasks))]
        for i, j in tqdm(pairs, desc=f"exact pairs ({threads} thr)", leave=False):
            cross, seconds = timed(
                gram_inner_products, tasks[i].activations, tasks[i].errors, tasks[j].activations, tasks[j].errors
            )
            pair_seconds.append(seconds)
            fisher[f"{i},{j}"] = float(cross[0] / (norms[i][0] * norms[j][0]).sqrt())
        mean_norm = sum(norm_seconds) / len(norm_seconds)
        mean_pair = sum(pair_seconds) / len(pair_seconds)
        results[str(threads)] = {
            "norm_seconds": norm_seconds,
            "pair_seconds": pair_seconds,
            "extrapolated_total_seconds": num_tasks * mean_norm + config.num_pairs * mean_pair,
            "fisher_measured_pairs": fisher,
        }
    return results


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.5))
    labels, seconds, colors = [], [], []
    for threads in map(str, THREAD_COUNTS):
        labels.append(f"exact (extrap.)\n{threads} thr")
        seconds.append(result["exact"][threads]["extrapolated_total_seconds"])
        colors.append("tab:gray")
        for estimator, color in zip(ESTIMATORS, ("tab:blue", "tab:orange", "tab:green", "tab:red")):
            labels.append(f"{estimator}\n{threads} thr")
            seconds.append(result["sketch"][threads][estimator]["total_seconds"])
            colors.append(color)
    bars = axis.bar(range(len(labels)), seconds, color=colors)
    for bar, label, value in zip(bars, labels, seconds):
        threads = label.rsplit("\n", 1)[1].split()[0]
        ratio = result["exact"][threads]["extrapolated_total_seconds"] / value
        axis.annotate(
            f"{value:.0f} s\n{ratio:.0f}×",
            (bar.get_x() + bar.get_width() / 2, value),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    synthetic = result["config"]["synthetic"]
    axis.set_xticks(range(len(labels)), labels, fontsize=7)
    axis.set(
        yscale="log",
        ylabel="seconds, all pairs",
        title=f"{synthetic['num_tasks']} tasks × {synthetic['tokens_per_task']} tokens, K={synthetic['vocab_size']}, "
        f"d={synthetic['d']}, m={result['config']['m']}\n{result['machine']['cpu']} ({result['machine']['cpus']} CPUs); "
        f"exact extrapolated from {result['config']['exact_tasks']} tasks",
    )
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    config = QUICK if args.quick else FULL
    started = time.perf_counter()
    head = SyntheticHead(config.synthetic)
    sketch, kept = time_sketches(config, head)
    exact = time_exact(config, kept)
    result = {
        "benchmark": "speed_vs_exact",
        "command": "python -m benchmarks.speed_vs_exact" + (" --quick" if args.quick else ""),
        "machine": machine_info(),
        "config": dataclasses.asdict(config),
        "exact_note": (
            f"exact timed on the norms and cross pairs of the first {config.exact_tasks} tasks; total extrapolated "
            f"linearly to {config.synthetic.num_tasks} norms + {config.num_pairs} pairs"
        ),
        "sketch": sketch,
        "exact": exact,
        "ratios": {
            threads: {
                e: exact[threads]["extrapolated_total_seconds"] / sketch[threads][e]["total_seconds"]
                for e in ESTIMATORS
            }
            for threads in exact
        },
        "default_estimator": DEFAULT_ESTIMATOR,
        "total_seconds": time.perf_counter() - started,
    }
    print(result["exact_note"])
    print(f"{'threads':>7s} {'exact s':>9s} " + " ".join(f"{e + ' s':>20s} {'ratio':>6s}" for e in ESTIMATORS))
    for threads in exact:
        cells = " ".join(
            f"{sketch[threads][e]['total_seconds']:20.1f} {result['ratios'][threads][e]:5.0f}×" for e in ESTIMATORS
        )
        print(f"{threads:>7s} {exact[threads]['extrapolated_total_seconds']:9.0f} {cells}")
    threads = str(THREAD_COUNTS[-1])
    print("A on the measured pairs, exact vs sketch:")
    for pair, value in exact[threads]["fisher_measured_pairs"].items():
        sketched = ", ".join(f"{e} {sketch[threads][e]['fisher_measured_pairs'][pair]:.3f}" for e in ESTIMATORS)
        print(f"  tasks {pair}: exact {value:.3f}; {sketched}")
    write_results("speed_vs_exact", result, lambda path: plot(result, path), args)
    print(f"total {result['total_seconds']:.0f} s")


if __name__ == "__main__":
    main()
