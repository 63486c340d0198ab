"""Cost of network-level and head-input signatures against the passes they ride on, side by side (CPU).

SmolLM2-135M-Instruct (the embedded default; ``--random-weights``: its architecture with random weights),
one batch of ``--batch-size`` documents × ``--length`` tokens, at 1 and 2 threads (``torch.set_num_threads``):

- ``forward``: ``model(input_ids, attention_mask)`` under ``no_grad``;
- ``head sketch``: ``lm.capture.sketch_batch`` with the default head spec (a, e);
- ``head-input sketch``: the same with ``error_space="head-input"`` (a, δ = Wᵀe: e formed, one more GEMM);
- ``forward + backward``: the summed token loss differentiated to the input embeddings (a leaf), no hooks,
  parameters not differentiated: what the network sketch costs at least;
- ``network sketch (…)``: ``lm.network.sketch_network_batch`` for the LoRA default modules
  (q_proj, v_proj), for ``all-linear`` (both kernels from one pass), at m = 4096.

Ratios: network sketches over ``forward + backward``, head sketches over ``forward``, each the median
over interleaved rounds of the paired ratio (every round runs every pass back to back, so a slow spell
of the shared machine cancels), and best times. Writes benchmarks/results/network_cost.{json,png}.

    python -m benchmarks.network_cost                  # full run
    python -m benchmarks.network_cost --quick          # smoke run (random weights, small), temp dir
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from fisherhub import SketchState
from fisherhub.lm import sketch_batch, spec_for_model
from fisherhub.core.state import NetworkSketchState
from fisherhub.lm.network import sketch_network_batch
from fisherhub.lm.specs import network_spec_for_model

from benchmarks.throughput import SMOLLM2_VOCAB, random_smollm2

RESULTS_DIR = Path(__file__).resolve().parent / "results"
THREAD_COUNTS = (1, 2)
LORA_MODULES = ("q_proj", "v_proj")


def load(random_weights: bool, layers: int = 30, vocab_size: int = SMOLLM2_VOCAB):
    """(model, tokenizer or None), name; random weights: SmolLM2's architecture with ``layers`` and K."""
    if not random_weights:
        from fisherhub.lm.loading import load_model_and_tokenizer

        return load_model_and_tokenizer(None), "SmolLM2-135M-Instruct"
    name = "SmolLM2-135M architecture, random weights" + (
        "" if layers == 30 else f", {layers} layers, K = {vocab_size:,}"
    )
    return (random_smollm2(vocab_size, layers), None), name


def make_batch(batch_size: int, length: int, vocab_size: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, vocab_size, (batch_size, length), generator=generator)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "doc_index": torch.arange(batch_size)}


def forward_backward(model, batch) -> None:
    """The summed token loss differentiated to the input embeddings only (what the network capture runs)."""
    embeddings = model.get_input_embeddings()(batch["input_ids"]).detach().requires_grad_(True)
    with torch.enable_grad():
        logits = model(inputs_embeds=embeddings, attention_mask=batch["attention_mask"], use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(), batch["input_ids"][:, 1:].flatten(), reduction="sum"
        )
        del logits
        torch.autograd.grad(loss, [embeddings])


def passes(model, tokenizer, batch, m: int) -> dict[str, Callable[[], object]]:
    head = spec_for_model(model, tokenizer, m=m)
    head_input = spec_for_model(model, tokenizer, m=m, error_space="head-input")
    lora = network_spec_for_model(model, tokenizer, modules=list(LORA_MODULES), m=m)
    every = network_spec_for_model(model, tokenizer, modules="all-linear", m=m)
    every_block = dataclasses.replace(every, kernel="block")

    def forward():
        with torch.no_grad():
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)

    return {
        "forward": forward,
        "head sketch": lambda: sketch_batch(SketchState(head), model, batch),
        "head-input sketch": lambda: sketch_batch(SketchState(head_input), model, batch),
        "forward + backward": lambda: forward_backward(model, batch),
        f"network sketch ({'+'.join(LORA_MODULES)})": lambda: sketch_network_batch(
            [NetworkSketchState(lora)], model, batch
        ),
        "network sketch (all-linear)": lambda: sketch_network_batch([NetworkSketchState(every)], model, batch),
        "network sketch (all-linear, full + block)": lambda: sketch_network_batch(
            [NetworkSketchState(every), NetworkSketchState(every_block)], model, batch
        ),
    }, {"lora_modules": len(lora.modules), "all_linear_modules": len(every.modules)}


def interleaved_rounds(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    for call in calls.values():  # warm-up: projection caches, allocator pools
        call()
    rounds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            rounds[name].append(time.perf_counter() - started)
    return rounds


def paired_ratio(rounds: dict[str, list[float]], name: str, baseline: str) -> float:
    return statistics.median(t / b for t, b in zip(rounds[name], rounds[baseline]))


def baseline_of(name: str) -> str:
    return "forward + backward" if name.startswith("network") else "forward"


def plot(results: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 4.5), layout="constrained")
    axes = figure.subplots()
    names = [n for n in results["runs"][0]["ratios"]]
    width = 0.8 / len(results["runs"])
    for k, run in enumerate(results["runs"]):
        values = [run["ratios"][n] for n in names]
        axes.barh([i + k * width for i in range(len(names))], values, height=width, label=f"{run['threads']} thread(s)")
    axes.set_yticks([i + width / 2 for i in range(len(names))], [f"{n}\n/ {baseline_of(n)}" for n in names], fontsize=8)
    axes.axvline(1.0, color="black", linewidth=0.8)
    axes.set_xlabel("time ratio (median of paired rounds)")
    axes.set_title(f"{results['model']}: {results['batch_size']}×{results['length']} tokens, m = {results['m']}")
    axes.legend()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--random-weights", action="store_true")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="random weights, 2 layers, K = 2,048, 2×32 tokens, m = 512, 1 round, temp dir",
    )
    parser.add_argument("--output-dir", type=Path, default=None)
    options = parser.parse_args(argv)
    if options.quick:
        options.random_weights, options.batch_size, options.length, options.m, options.repeats = True, 2, 32, 512, 1
    output_dir = options.output_dir or (
        Path(tempfile.gettempdir()) / "fisherhub-benchmarks" if options.quick else RESULTS_DIR
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    (model, tokenizer), model_name = load(options.random_weights, *((2, 2048) if options.quick else ()))
    batch = make_batch(options.batch_size, options.length, model.get_output_embeddings().weight.shape[0])
    results = {
        "model": model_name,
        "batch_size": options.batch_size,
        "length": options.length,
        "m": options.m,
        "repeats": options.repeats,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "runs": [],
    }
    for threads in THREAD_COUNTS:
        torch.set_num_threads(threads)
        calls, counts = passes(model, tokenizer, batch, options.m)
        rounds = interleaved_rounds(calls, options.repeats)
        run = {
            "threads": threads,
            "best_seconds": {name: min(times) for name, times in rounds.items()},
            "rounds": rounds,
            "ratios": {
                name: paired_ratio(rounds, name, baseline_of(name))
                for name in calls
                if name not in ("forward", "forward + backward")
            },
            "forward_backward_over_forward": paired_ratio(rounds, "forward + backward", "forward"),
            **counts,
        }
        results["runs"].append(run)
        print(f"\n{threads} thread(s), {model_name}, {options.batch_size}×{options.length} tokens, m = {options.m}")
        print(f"{'pass':<45} {'best s':>8}  ratio")
        for name, seconds in run["best_seconds"].items():
            ratio = run["ratios"].get(name)
            note = f"{ratio:6.2f}× {baseline_of(name)}" if ratio is not None else ""
            if name == "forward + backward":
                note = f"{run['forward_backward_over_forward']:6.2f}× forward"
            print(f"{name:<45} {seconds:8.3f}  {note}")
    (output_dir / "network_cost.json").write_text(json.dumps(results, indent=1))
    plot(results, output_dir / "network_cost.png")
    print(f"\nwrote {output_dir / 'network_cost.json'} and network_cost.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
