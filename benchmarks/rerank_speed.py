"""Seconds per candidate of the second stage against the shortlist's size, beside a bare PEFT forward pass over the
same tokens, measured side by side in one run.

SmolLM2-135M (the embedded default), a 2,000-token target (the first 64 tokens of demo English prose documents,
batches of 8, as the suites' targets), random LoRA adapters made with peft as the suites' are (r = 8, α = 16,
q_proj and v_proj of layers 20 to 29 of 30; lora_B drawn with std 0.01, not trained). For each candidate in turn,
interleaved:

- ``today``: the path before the shared prefix: ``check_adapter``, the adapter loaded onto the base model
  (``adapter_on``), the full forward pass, unloaded; its forward pass alone is the ``bare PEFT forward``;
- ``swapped``: one ``PeftModel`` kept on a copy of the base model, each adapter added (``load_adapter``), made
  active (``set_adapter``), measured by the full forward pass, and the previous one deleted (``delete_adapter``);
  the first ``--swapped`` candidates only (its cost per candidate does not depend on the shortlist);
- ``shared prefix``: ``measure_adapter`` with one ``TargetLosses`` for the shortlist (what ``rerank`` and the
  budgeted second stage run): the base model's pass keeps its input of layer 20 (``keep_prefix_at``), every
  adapter runs layers 20 to 29 and the head;
- ``mixed batch``: the candidates in groups of ``--group`` (default 4) on one ``PeftModel`` on a copy of the base
  model, the group's adapters loaded together, each target batch repeated once per adapter with its rows routed
  to their adapter by peft's mixed-adapter batches (``adapter_names=``), the layers below 20 replaying the base
  model's kept input as the shared prefix does; a group's seconds are split evenly among its candidates.

Seconds per candidate at shortlist size n: the total over the first n candidates / n (the base model's own pass,
one per shortlist, is reported apart); the ratio: that total over the bare forward passes' total of the same n
candidates; both on the wall clock and in this process's CPU time (``time.process_time``), which other processes
on a loaded machine inflate far less (at 2 threads it adds both threads' work: only wall time shows a speed-up). The losses of the three paths are compared (largest difference of a document's NLL sum). Load average
before and after each thread count (a shared machine: wall time includes other processes' work).

    python -m benchmarks.rerank_speed --threads 1     # ≈ 8 min on 2 idle cores; then --threads 2
    python -m benchmarks.rerank_speed --quick         # a tiny random Llama, seconds

Writes results/rerank_speed.{json,png}; a run keeps the other thread counts' figures already in the JSON.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from benchmarks.synthetic import add_output_arguments, machine_info, output_dir, write_results
from fisherhub.core.batch import IGNORE_INDEX
from fisherhub.data.batches import Batch, Document, collate
from fisherhub.lm.modules import decoder_layers
from fisherhub.selection.peft_loading import adapter_on, check_adapter, default_max_adapter_bytes
from fisherhub.selection.rerank import measure_adapter
from fisherhub.selection.rows import AdapterLocation
from fisherhub.selection.target_losses import DocumentLosses, TargetLosses, _recording, _replaying

NAME = "rerank_speed"
PATHS = ("today", "swapped", "shared prefix", "mixed batch")
BARE = "bare PEFT forward"
#: wall time, and the CPU time of this process (what other processes on a shared machine add to far less)
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
#: (target tokens, document length, batch size, LoRA's first layer, candidates, swapped candidates, group size)
FULL, QUICK = (2000, 64, 8, 20, 8, 4, 4), (256, 32, 4, 2, 4, 2, 2)


def base_model(quick: bool) -> tuple:
    """(model, tokenizer, its name): the embedded SmolLM2-135M, or a tiny random 4-layer Llama for ``--quick``;
    in eval mode, frozen."""
    if quick:
        from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

        model, tokenizer = tiny_causal_lm("llama", False, 64, num_layers=4), tiny_tokenizer(64)
        name = "tiny random Llama (4 layers)"
    else:
        from fisherhub import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(None)
        name = "SmolLM2-135M-Instruct (embedded)"
    model.eval().requires_grad_(False)
    return model, tokenizer, name


def target_batches(tokenizer, tokens: int, length: int, batch_size: int) -> list[Batch]:
    """The first ``length`` tokens of demo English prose documents until ``tokens`` are scored, in batches."""
    from fisherhub.data.demo import load_demo_domain

    documents: list[Document] = []
    for text in load_demo_domain("english_prose")["text"]:
        ids = tokenizer(text)["input_ids"][:length]
        documents.append(Document(len(documents), ids, ids))
        if sum(len(d.input_ids) - 1 for d in documents) >= tokens:
            break
    pad = tokenizer.pad_token_id or 0
    return [collate(documents[i : i + batch_size], pad, i + batch_size) for i in range(0, len(documents), batch_size)]


def target_summary(batches: list[Batch]) -> dict[str, int]:
    """The target's documents and scored tokens, for the record."""
    return {"documents": sum(len(b.input_ids) for b in batches), "scored_tokens": sum(b.num_scored for b in batches)}


def adapter_folders(model, count: int, first_layer: int, folder: Path) -> list[AdapterLocation]:
    """``count`` random LoRA adapters (q_proj, v_proj of the layers from ``first_layer``; lora_B ~ N(0, 0.01²))."""
    from peft import LoraConfig, get_peft_model

    layers = list(range(first_layer, model.config.num_hidden_layers))
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], layers_to_transform=layers)
    adapters = []
    for seed in range(count):
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, copy.deepcopy(config))
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.data.normal_(0.0, 0.01)
        peft_model.save_pretrained(folder / f"lora-{seed}")
        peft_model.unload()
        adapters.append(AdapterLocation(str(folder / f"lora-{seed}")))
    return adapters


def document_nll(logits: torch.Tensor, batch: Batch, repeats: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row NLL sums and scored tokens of ``logits`` over ``batch`` repeated ``repeats`` times."""
    labels = batch.labels[:, 1:].repeat(repeats, 1)
    scored = labels != IGNORE_INDEX
    per_token = torch.nn.functional.cross_entropy(
        logits[:, :-1].float().flatten(0, 1), labels.clamp_min(0).flatten(), reduction="none"
    ).view_as(labels)
    return (per_token * scored).sum(dim=1).double(), scored.sum(dim=1).double()


def bare_losses(model, batches) -> DocumentLosses:
    """Per-document NLL sums from the plain forward pass of ``model`` over ``batches`` (the reference)."""
    nll, tokens = [], []
    with torch.no_grad():
        for batch in batches:
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
            batch_nll, batch_tokens = document_nll(logits, batch)
            nll.append(batch_nll)
            tokens.append(batch_tokens)
    return DocumentLosses(torch.cat(nll), torch.cat(tokens))


def timed(call) -> tuple:
    """(call's result, {clock: seconds}) on both clocks: wall and this process's CPU time."""
    began = {clock: read() for clock, read in CLOCKS.items()}
    result = call()
    return result, {clock: read() - began[clock] for clock, read in CLOCKS.items()}


def today(model, batches, adapter: AdapterLocation) -> tuple[DocumentLosses, dict, dict]:
    """(losses, seconds in all, seconds of the forward pass alone) of the path before the shared prefix."""

    def measured():
        check_adapter(adapter, None, default_max_adapter_bytes(model), shared_base=True)
        with adapter_on(model, adapter) as peft_model:
            return timed(lambda: bare_losses(peft_model, batches))

    (losses, forward), total = timed(measured)
    return losses, total, forward


class Swapped:
    """One ``PeftModel`` on its own copy of the base model; each adapter added, made active, the previous deleted."""

    def __init__(self, model, batches):
        self.base, self.batches, self.peft_model, self.active = copy.deepcopy(model), batches, None, None

    def losses(self, adapter: AdapterLocation, index: int) -> DocumentLosses:
        from peft import PeftModel

        name = f"candidate_{index}"
        if self.peft_model is None:
            self.peft_model = PeftModel.from_pretrained(self.base, adapter.path, adapter_name=name).eval()
        else:
            self.peft_model.load_adapter(adapter.path, adapter_name=name)
            self.peft_model.set_adapter(name)
            self.peft_model.delete_adapter(self.active)
        self.active = name
        return bare_losses(self.peft_model, self.batches)


class MixedBatch:
    """Adapters measured a group at a time: one ``PeftModel`` on its own copy of the base model with the group's
    adapters loaded; each target batch repeated once per adapter, its rows routed by peft's mixed-adapter batches
    (``adapter_names=``); the layers below ``first`` replaying the base model's input of layer ``first``, kept
    from an untimed pass (the base model's pass, which the other paths report apart) and repeated likewise."""

    def __init__(self, model, batches, first: int):
        self.base, self.batches, self.first = copy.deepcopy(model), batches, first
        with _recording([decoder_layers(self.base)[first - 1]]) as outputs:
            bare_losses(self.base, batches)
        self.kept = outputs[0]

    def losses(self, adapters: list[AdapterLocation]) -> list[DocumentLosses]:
        from peft import PeftModel

        names = [f"candidate_{i}" for i in range(len(adapters))]
        peft_model = PeftModel.from_pretrained(self.base, adapters[0].path, adapter_name=names[0]).eval()
        for name, adapter in zip(names[1:], adapters[1:]):
            peft_model.load_adapter(adapter.path, adapter_name=name)
        layers, nll, tokens = decoder_layers(peft_model), [], []
        with torch.no_grad():
            for batch, kept in zip(self.batches, self.kept):
                routed = [name for name in names for _ in range(len(batch.input_ids))]
                with _replaying(layers[: self.first], torch.cat([kept] * len(names))):
                    logits = peft_model(
                        input_ids=batch.input_ids.repeat(len(names), 1),
                        attention_mask=batch.attention_mask.repeat(len(names), 1),
                        adapter_names=routed,
                        use_cache=False,
                    ).logits
                batch_nll, batch_tokens = document_nll(logits, batch, len(names))
                nll.append(batch_nll.view(len(names), -1))
                tokens.append(batch_tokens.view(len(names), -1))
        peft_model.unload()
        return [DocumentLosses(n, t) for n, t in zip(torch.cat(nll, dim=1), torch.cat(tokens, dim=1))]


def run(model, batches, adapters, swapped_count: int, first_layer: int, group: int) -> dict:
    """Every path on every candidate in turn (``swapped`` on the first ``swapped_count``; ``mixed batch`` on each
    group of ``group`` once its last was measured by the others): seconds and losses."""
    load_before = os.getloadavg()
    target = TargetLosses(batches)
    target.keep_prefix_at(model, [first_layer])
    base, base_seconds = timed(lambda: target.losses(model))
    swapped, mixed = Swapped(model, batches), MixedBatch(model, batches, first_layer)
    references: list[DocumentLosses] = []
    seconds: dict[str, dict[str, list[float]]] = {c: {p: [] for p in (*PATHS, BARE)} for c in CLOCKS}

    def add(path: str, spent: dict) -> None:
        for clock, value in spent.items():
            seconds[clock][path].append(value)

    gaps: dict[str, float] = {"swapped": 0.0, "shared prefix": 0.0, "mixed batch": 0.0}
    for index, adapter in enumerate(adapters):
        reference, total, forward = today(model, batches, adapter)
        references.append(reference)
        add("today", total)
        add(BARE, forward)
        shared, spent = timed(lambda: measure_adapter(model, target, adapter))
        add("shared prefix", spent)
        gaps["shared prefix"] = max(gaps["shared prefix"], float((shared.nll - reference.nll).abs().max()))
        if index < swapped_count:
            losses, spent = timed(lambda: swapped.losses(adapter, index))
            add("swapped", spent)
            gaps["swapped"] = max(gaps["swapped"], float((losses.nll - reference.nll).abs().max()))
        if (index + 1) % group == 0:
            together, spent = timed(lambda: mixed.losses(adapters[index + 1 - group : index + 1]))
            for losses, reference in zip(together, references[index + 1 - group :]):
                add("mixed batch", {clock: value / group for clock, value in spent.items()})
                gaps["mixed batch"] = max(gaps["mixed batch"], float((losses.nll - reference.nll).abs().max()))
        cells = ", ".join(f"{p} {s[-1]:.2f} s" for p, s in seconds["cpu"].items() if s)
        print(f"  candidate {index + 1}, CPU time: {cells}", flush=True)
    return {
        "base_pass_seconds": base_seconds,
        "base_loss": base.loss,
        "seconds": seconds,
        "largest_nll_difference_from_today": gaps,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }


def per_size(seconds: dict[str, list[float]]) -> list[dict]:
    """Seconds per candidate and ratio to the bare forward passes at shortlist sizes 1, 2, 4, ... measured."""
    bare = seconds[BARE]
    rows = []
    size = 1
    while size <= len(bare):
        row: dict = {"shortlist": size, BARE: sum(bare[:size]) / size}
        for path in PATHS:
            if len(seconds[path]) >= size:
                row[path] = sum(seconds[path][:size]) / size
                row[f"{path} / bare"] = sum(seconds[path][:size]) / sum(bare[:size])
        rows.append(row)
        size *= 2
    return rows


def print_table(threads: int, result: dict) -> None:
    """Per shortlist size: each path's seconds per candidate and its ratio to the bare forward, CPU (wall)."""
    load = ", ".join(f"{x:.1f}" for x in result["load_average_before"])
    base = result["base_pass_seconds"]
    print(
        f"\n{threads} thread(s); load average before {load}; the base model's pass {base['cpu']:.2f} s CPU "
        f"({base['wall']:.2f} s wall). Seconds per candidate, and ÷ the bare PEFT forward: CPU time (wall time)"
    )
    print(f"{'shortlist':>9s} {'bare fwd':>15s} " + " ".join(f"{p:>28s}" for p in PATHS))
    for cpu, wall in zip(result["per_size"]["cpu"], result["per_size"]["wall"]):
        cells = " ".join(
            f"{cpu[p]:6.2f} ({wall[p]:6.2f}) {cpu[f'{p} / bare']:5.2f} ({wall[f'{p} / bare']:5.2f})"
            if p in cpu
            else f"{'—':>28s}"
            for p in PATHS
        )
        print(f"{cpu['shortlist']:9d} {cpu[BARE]:6.2f} ({wall[BARE]:6.2f}) {cells}")
    print(f"largest |Δ NLL| of a document from today's path: {result['largest_nll_difference_from_today']}")


def plot(runs: dict, path: Path) -> None:
    """Per thread count: CPU seconds per candidate against the shortlist's size, and each path's ratio to the bare
    forward (CPU time solid, wall time dotted)."""
    import matplotlib.figure

    figure = matplotlib.figure.Figure(figsize=(10, 3.6 * len(runs)), layout="constrained")
    axes = figure.subplots(len(runs), 2, squeeze=False)
    for (threads, result), (seconds_axis, ratio_axis) in zip(sorted(runs.items()), axes):
        cpu, wall = result["per_size"]["cpu"], result["per_size"]["wall"]
        for color, name in enumerate((*PATHS, BARE)):
            points = [(row["shortlist"], row[name]) for row in cpu if name in row]
            style = {"color": f"C{color}", "marker": "o", "label": name}
            seconds_axis.plot(*zip(*points), linestyle="--" if name == BARE else "-", **style)
            for rows, line in ((cpu, "-"), (wall, ":")) if name in PATHS else ():
                ratios = [(row["shortlist"], row[f"{name} / bare"]) for row in rows if name in row]
                ratio_axis.plot(
                    *zip(*ratios), linestyle=line, **(style | {"label": f"{name} ({'CPU' if line == '-' else 'wall'})"})
                )
        ratio_axis.axhline(1.1, color="k", linestyle="-.", label="1.1 × bare")
        for axis in (seconds_axis, ratio_axis):
            axis.set_xscale("log", base=2)
            axis.set_xlabel("shortlist size (candidates measured)")
        load = result["load_average_before"][0]
        seconds_axis.set_ylabel("CPU seconds per candidate")
        seconds_axis.set_title(f"{threads} thread(s), load average {load:.1f}")
        ratio_axis.set_ylabel("÷ bare PEFT forward, same candidates")
        seconds_axis.legend(fontsize=8)
        ratio_axis.legend(fontsize=7)
    figure.suptitle("second stage: seconds per candidate against the shortlist's size")
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_arguments(parser)
    parser.add_argument("--threads", type=int, nargs="+", default=[1], help="torch threads, one run each")
    parser.add_argument("--candidates", type=int, help="the largest shortlist (default 8; 4 with --quick)")
    parser.add_argument("--swapped", type=int, help="candidates measured by the swapped path (default 4; 2 quick)")
    parser.add_argument("--group", type=int, help="adapters per mixed batch (default 4; 2 quick)")
    options = parser.parse_args(argv)
    tokens, length, batch_size, first_layer, candidates, swapped, group = QUICK if options.quick else FULL
    candidates, swapped, group = options.candidates or candidates, options.swapped or swapped, options.group or group
    model, tokenizer, model_name = base_model(options.quick)
    batches = target_batches(tokenizer, tokens, length, batch_size)
    previous = output_dir(options) / f"{NAME}.json"
    kept = json.loads(previous.read_text()) if previous.exists() else {}
    runs = {int(t): r for t, r in kept.get("runs", {}).items()} if kept.get("model") == model_name else {}
    command = " ".join(["python -m benchmarks.rerank_speed", *(argv if argv is not None else sys.argv[1:])])
    with tempfile.TemporaryDirectory() as folder:
        adapters = adapter_folders(model, candidates, first_layer, Path(folder))
        for threads in options.threads:
            torch.set_num_threads(threads)
            print(f"{model_name}, {threads} thread(s), {candidates} candidates")
            result = run(model, batches, adapters, swapped, first_layer, group)
            result["per_size"] = {clock: per_size(result["seconds"][clock]) for clock in CLOCKS}
            result["command"] = command
            runs[threads] = result
            print_table(threads, result)
    record = {
        "model": model_name,
        "target": target_summary(batches),
        "lora": {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"], "first_layer": first_layer},
        "mixed_batch_group": group,
        "quick": options.quick,
        "machine": machine_info(),
        "runs": {str(t): r for t, r in sorted(runs.items())},
    }
    write_results(NAME, record, lambda path: plot(runs, path), options)


if __name__ == "__main__":
    main()
