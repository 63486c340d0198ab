"""What the default second stage costs against its budget: the seconds of ``halving_rerank`` at B = 4 (the default)
and of ``rerank`` with k = 3 (the two-stage selection it replaced) over the same random LoRA adapters, each ÷ the
seconds of one bare forward pass of the base model over the same target, measured side by side in one run.

SmolLM2-135M (the embedded default), the 2,000-token target of ``benchmarks.rerank_speed`` (demo English prose,
documents of 64 tokens, batches of 8) and its random LoRA adapters (r = 8, q_proj and v_proj of layers 20 to 29 of
30), 11 of them (exp. 4 and 6's candidates per target). Each round measures, in turn, the bare forward pass, the
budgeted second stage and ``rerank=3``; ratios are medians over the rounds, in CPU time (this process's) and wall
time. Beside them, the full passes the library counted (``Rerank.full_passes``: what ``analysis.halving`` plans
with, an adapter's document at ``lm.modules.pass_share`` of a full pass, the layers below replaying what the base
model's pass kept), the
document-passes run and the adapters measured on every document.

    python -m benchmarks.halving_cost --threads 1 2   # ≈ 8 min on 2 idle cores
    python -m benchmarks.halving_cost --quick         # a tiny random Llama, seconds

Writes results/halving_cost.{json,png}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import types
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from benchmarks.rerank_speed import (
    CLOCKS,
    adapter_folders,
    bare_losses,
    base_model,
    target_batches,
    target_summary,
    timed,
)
from benchmarks.synthetic import add_output_arguments, machine_info, write_results
from fisherhub.core.registry import DEFAULT_RERANK_BUDGET
from fisherhub.lm.modules import pass_share
from fisherhub.selection.budgeted import halving_rerank
from fisherhub.selection.rerank import rerank

NAME = "halving_cost"
STAGES = (f"halving B={DEFAULT_RERANK_BUDGET}", "rerank=3")
#: (target tokens, document length, batch size, LoRA's first layer, candidates, rounds)
FULL, QUICK = (2000, 64, 8, 20, 11, 2), (256, 32, 4, 2, 5, 2)


def stage(name: str, model, batches, rows):
    """One second stage over ``rows``: the default budgeted one, or ``rerank`` of the first 3."""
    if name == STAGES[0]:
        return halving_rerank(model, batches, rows, budget=DEFAULT_RERANK_BUDGET)
    return rerank(model, batches, rows, wanted=3)


def run(model, batches, rows, rounds: int) -> dict:
    """``rounds`` rounds of the bare forward pass and each stage in turn: seconds, ratios and what was counted."""
    load_before = os.getloadavg()
    seconds: dict[str, dict[str, list[float]]] = {c: {s: [] for s in ("bare forward", *STAGES)} for c in CLOCKS}
    counted: dict[str, dict] = {}
    for index in range(rounds):
        _, spent = timed(lambda: bare_losses(model, batches))
        for clock, value in spent.items():
            seconds[clock]["bare forward"].append(value)
        for name in STAGES:
            outcome, spent = timed(lambda name=name: stage(name, model, batches, rows))
            for clock, value in spent.items():
                seconds[clock][name].append(value)
            documents = outcome.documents
            counted[name] = {
                "full_passes": outcome.full_passes,
                "document_passes": outcome.passes,
                "measured": len(outcome.measured),
                "on_every_document": sum(m.documents == documents for m in outcome.measured),
                "pick": outcome.measured[outcome.verdict.best].candidate,
            }
        print(f"  round {index + 1}: " + ", ".join(f"{s} {v[-1]:.1f} s" for s, v in seconds["cpu"].items()), flush=True)
    ratios = {
        clock: {
            name: statistics.median(s / b for s, b in zip(by_stage[name], by_stage["bare forward"])) for name in STAGES
        }
        for clock, by_stage in seconds.items()
    }
    return {
        "seconds": seconds,
        "ratio_to_bare_forward": ratios,
        "counted": counted,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }


def print_table(threads: int, result: dict) -> None:
    load = ", ".join(f"{x:.1f}" for x in result["load_average_before"])
    bare = statistics.median(result["seconds"]["cpu"]["bare forward"])
    print(f"\n{threads} thread(s), load average before {load}; the bare forward pass {bare:.2f} s CPU (median)")
    print(
        f"{'stage':>14s} {'÷ bare, CPU':>12s} {'÷ bare, wall':>13s} {'counted':>8s} {'doc-passes':>10s} {'measured':>9s}"
    )
    for name in STAGES:
        counted = result["counted"][name]
        print(
            f"{name:>14s} {result['ratio_to_bare_forward']['cpu'][name]:12.2f} "
            f"{result['ratio_to_bare_forward']['wall'][name]:13.2f} {counted['full_passes'] or 0:8.2f} "
            f"{counted['document_passes'] or '—':>10} {counted['measured']:4d} ({counted['on_every_document']} all)"
        )


def plot(runs: dict, path: Path) -> None:
    """Per stage and thread count: seconds ÷ a bare forward pass (CPU, wall) beside the passes the library counted
    and the budget."""
    import matplotlib.figure

    figure = matplotlib.figure.Figure(figsize=(8, 3.8), layout="constrained")
    axis = figure.subplots()
    width, positions = 0.8 / (3 * len(runs)), range(len(STAGES))
    for offset, (threads, result) in enumerate(sorted(runs.items())):
        bars = {
            f"CPU, {threads} thread(s)": [result["ratio_to_bare_forward"]["cpu"][s] for s in STAGES],
            f"wall, {threads} thread(s)": [result["ratio_to_bare_forward"]["wall"][s] for s in STAGES],
            f"counted, {threads} thread(s)": [result["counted"][s]["full_passes"] or 0 for s in STAGES],
        }
        for column, (label, values) in enumerate(bars.items()):
            shift = (3 * offset + column - (3 * len(runs) - 1) / 2) * width
            axis.bar([p + shift for p in positions], values, width, label=label)
    axis.axhline(DEFAULT_RERANK_BUDGET, color="k", linestyle="--", label=f"budget B = {DEFAULT_RERANK_BUDGET}")
    axis.set_xticks(list(positions), STAGES)
    axis.set_ylabel("÷ one bare forward pass over the target")
    axis.set_title("the second stage's cost in forward passes of the base model")
    axis.legend(fontsize=7, ncol=2)
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_arguments(parser)
    parser.add_argument("--threads", type=int, nargs="+", default=[1], help="torch threads, one run each")
    options = parser.parse_args(argv)
    tokens, length, batch_size, first_layer, candidates, rounds = QUICK if options.quick else FULL
    model, tokenizer, model_name = base_model(options.quick)
    batches = target_batches(tokenizer, tokens, length, batch_size)
    runs = {}
    with tempfile.TemporaryDirectory() as folder:
        adapters = adapter_folders(model, candidates, first_layer, Path(folder))
        rows = [types.SimpleNamespace(candidate=a.path, adapter=a) for a in adapters]  # what the stages read
        for threads in options.threads:
            torch.set_num_threads(threads)
            print(f"{model_name}, {threads} thread(s), {candidates} candidates, {rounds} rounds")
            runs[threads] = run(model, batches, rows, rounds)
            print_table(threads, runs[threads])
    record = {
        "model": model_name,
        "command": " ".join(["python -m benchmarks.halving_cost", *(argv if argv is not None else sys.argv[1:])]),
        "target": target_summary(batches),
        "lora": {"r": 8, "target_modules": ["q_proj", "v_proj"], "first_layer": first_layer, "candidates": candidates},
        "pass_share": pass_share(model, first_layer),
        "budget": DEFAULT_RERANK_BUDGET,
        "runs": {str(t): r for t, r in sorted(runs.items())},
        "machine": machine_info(),
        "quick": options.quick,
    }
    write_results(NAME, record, lambda path: plot(runs, path), options)


if __name__ == "__main__":
    main()
