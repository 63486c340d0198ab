"""The one-time cost of a big-vocabulary model's head: fingerprint and spec, on a 270M model with K = 262,144.

A Gemma-3-270M-shaped model (K = 262,144, d = 640, 18 layers; random weights built from its config, float32,
1.07 GB of parameters: no download) and the character-level test tokenizer. Measured in this process:

- ``HeadModel.of``: the head checksum streamed over row blocks (time and peak extra resident memory), then the
  same call again (cached while the weights are unchanged);
- ``spec_for_model``: the pilot mean over the embedded probe text, which stops at the head's input;
- ``sketch_texts`` twice on 8 short documents: the second call reuses the resolved head.

    python -m benchmarks.head_fingerprint     # ≈ 2 min on 2 cores; writes results/head_fingerprint.{json,png}
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import transformers

from fisherhub.testing.tiny_models import tiny_tokenizer  # noqa: E402

from fisherhub import sketch_texts, spec_for_model  # noqa: E402
from fisherhub.lm import HeadModel  # noqa: E402
from benchmarks.synthetic import add_output_arguments, write_results
from benchmarks.throughput import GEMMA3_270M, QUICK_GEMMA3, peak_extra_memory


def measured(call):
    """(result, seconds, peak extra resident bytes) of ``call()``."""
    memory = {}
    began = time.perf_counter()
    with peak_extra_memory(memory):
        result = call()
    return result, time.perf_counter() - began, memory["bytes"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_arguments(parser)
    options = parser.parse_args(argv)
    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(**(QUICK_GEMMA3 if options.quick else GEMMA3_270M))
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    tokenizer = tiny_tokenizer(64)
    texts = [f"document {i}: the quick brown fox jumps over the lazy dog." for i in range(8)]
    rows = []
    head, seconds, extra = measured(lambda: HeadModel.of(model, tokenizer))
    rows.append(("HeadModel.of (head checksum, streamed)", seconds, extra))
    _, seconds, extra = measured(lambda: HeadModel.of(model, tokenizer))
    rows.append(("HeadModel.of again (cached)", seconds, extra))
    spec, seconds, extra = measured(lambda: spec_for_model(model, tokenizer))
    rows.append(("spec_for_model (pilot mean, no head GEMM)", seconds, extra))
    _, seconds, extra = measured(lambda: sketch_texts(texts, model, tokenizer, spec))
    rows.append(("sketch_texts, 8 documents (first call)", seconds, extra))
    _, seconds, extra = measured(lambda: sketch_texts(texts, model, tokenizer, spec))
    rows.append(("sketch_texts, 8 documents (second call)", seconds, extra))
    head_bytes = head.weight.numel() * head.weight.element_size()
    print(
        f"Gemma-3-270M shape, random weights: K = {head.vocab_size:,}, d = {head.d}, parameters "
        f"{parameter_bytes / 1e9:.2f} GB, head {head_bytes / 1e9:.2f} GB, {torch.get_num_threads()} threads"
    )
    print(f"{'step':46s} {'seconds':>8s} {'peak extra MB':>14s}")
    for name, seconds, extra in rows:
        print(f"{name:46s} {seconds:8.2f} {extra / 1e6:14.1f}")
    record = {
        "model": "Gemma-3-270M shape, random weights",
        "vocab_size": head.vocab_size,
        "d": head.d,
        "parameter_bytes": parameter_bytes,
        "head_bytes": head_bytes,
        "threads": torch.get_num_threads(),
        "steps": [{"step": name, "seconds": seconds, "peak_extra_bytes": extra} for name, seconds, extra in rows],
    }
    write_results("head_fingerprint", record, lambda path: plot(rows, head, head_bytes, path), options)


def plot(rows, head, head_bytes: int, path: Path) -> None:
    import matplotlib.figure

    figure = matplotlib.figure.Figure(figsize=(9, 3.5), layout="constrained")
    seconds_axis, memory_axis = figure.subplots(1, 2)
    names = [name for name, _, _ in rows]
    seconds_axis.barh(names, [seconds for _, seconds, _ in rows])
    seconds_axis.set_xlabel("seconds")
    seconds_axis.invert_yaxis()
    memory_axis.barh(names, [extra / 1e6 for _, _, extra in rows])
    memory_axis.axvline(head_bytes / 1e6, color="k", linestyle="--", label="size of the head")
    memory_axis.set_xlabel("peak extra resident MB")
    memory_axis.set_yticks([])
    memory_axis.invert_yaxis()
    memory_axis.legend()
    figure.suptitle(f"one-time head cost, K = {head.vocab_size:,} (Gemma-3-270M shape)")
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
