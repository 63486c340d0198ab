"""GPU check (one short run, under 5 minutes on one GPU): signatures agree across devices, and sketch
throughput at vocabulary scale. Prints one JSON block per check and writes the report to
$OUT/device_check.json when OUT is set.

    PYTHONPATH=src python scripts/device_check.py            # on a CUDA machine
    PYTHONPATH=src python scripts/device_check.py --small --device cpu   # the same code, tiny sizes

Without a CUDA device it says so and exits 0 having checked nothing; nothing else in the project needs one.

1. core: the same (a, logits) sketched on the CPU and on the device (``SketchState.update`` with logits, the
   path ``lm.capture.sketch_batch`` takes, and ``update`` with e formed), for every estimator: relative
   difference of the float64 sums and the CPU-vs-device alignment, and whether the CPU's row-parallel update
   (``core.parallel``, 2 threads) gives the bits of 1 thread, for e from logits and e formed.
2. capture: a tiny Llama with bf16-representable weights, CPU float32 vs device float32 vs device bfloat16:
   the head checksums (so the sketch ids with the reflection off), the pilot means of the reflection,
   and the alignments of the device signatures with the CPU one, each sketched with the CPU's spec.
3. throughput: a random 2-layer Llama with the default estimator's head at K = 128,256 (Llama 3) and
   K = 262,144 (Gemma 3), d = 4096, bfloat16: tokens/s of the forward pass alone and of forward + sketch
   per estimator, the overhead, and peak memory.
4. the CPU update vs its floor (``benchmarks/throughput.py --cpu-time``'s measurement, on this machine's idle
   CPU cores): CPU and wall time per token at 1 and 2 threads, the 2-thread speed-up, and a profile.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from fisherhub.core.batch import HeadBatch
from fisherhub import SketchSpec, SketchState, alignment
from fisherhub.core.registry import DEFAULT_ESTIMATOR, ESTIMATORS
from fisherhub.lm import HeadModel, pilot_mean, sketch_batch, spec_for_model

#: (vocabulary sizes, hidden size, intermediate size, batch, length, m) of the throughput check
FULL = ((128256, 262144), 4096, 14336, 8, 512, 4096)
SMALL = ((512, 1024), 64, 128, 2, 32, 256)
#: (tokens, rounds) of the CPU update-vs-floor check, full and small
CPU_TIME_FULL, CPU_TIME_SMALL = (256, 5), (16, 1)


def no_cuda_message() -> str:
    return (
        "device_check: no CUDA device (torch.cuda.is_available() is False, torch "
        f"{torch.__version__}): nothing was checked. Run it on a GPU machine, or with --device cpu --small to "
        "exercise the code."
    )


def _synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _peak_gib(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if torch.device(device).type == "cuda" else None


def core_across_devices(device: str, d: int = 576, vocab_size: int = 49152, m: int = 4096, n: int = 1024) -> dict:
    generator = torch.Generator().manual_seed(0)
    activations = 1.0 + torch.randn(n, d, generator=generator)
    logits = 3 * torch.randn(n, vocab_size, generator=generator)
    targets = torch.randint(0, 32, (n,), generator=generator)  # a few frequent labels
    errors = torch.softmax(logits, -1)
    errors[torch.arange(n), targets] -= 1
    docs = torch.arange(n) // 8
    report = {}
    threads = torch.get_num_threads()
    for estimator in ESTIMATORS:
        spec = SketchSpec(d=d, vocab_size=vocab_size, m=m, estimator=estimator).with_reflection(activations.mean(0))
        on_cpu = {}
        for count in (1, 2):
            torch.set_num_threads(count)
            on_cpu[count] = [
                SketchState(spec).update(
                    HeadBatch(activations=activations, doc_index=docs, logits=logits, targets=targets)
                ),
                SketchState(spec).update(HeadBatch(activations=activations, doc_index=docs, errors=errors)),
            ]
        torch.set_num_threads(threads)
        cpu = on_cpu[1][0]
        on_device = SketchState(spec, device=device).update(
            HeadBatch(
                activations=activations.to(device),
                doc_index=docs.to(device),
                logits=logits.to(device),
                targets=targets.to(device),
            )
        )
        formed = SketchState(spec, device=device).update(
            HeadBatch(activations=activations.to(device), doc_index=docs.to(device), errors=errors.to(device))
        )
        report[estimator] = {
            "sums_relative_difference": float((on_device.sums.cpu() - cpu.sums).norm() / cpu.sums.norm()),
            "formed_e_relative_difference": float((formed.sums.cpu() - cpu.sums).norm() / cpu.sums.norm()),
            "alignment_cpu_vs_device": alignment(cpu.finalize(), on_device.to("cpu").finalize()).fisher,
            "cpu_2_threads_bits_equal_1_thread": all(
                torch.equal(one.sums, two.sums) for one, two in zip(on_cpu[1], on_cpu[2])
            ),
        }
    return report


def capture_across_devices(device: str, m: int = 4096) -> dict:
    from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

    tokenizer = tiny_tokenizer(64)
    texts = [f"the quick brown fox {i} jumps over the lazy dog {i * 7}" for i in range(64)]
    batch = dict(tokenizer(texts, return_tensors="pt", padding=True))
    batch["doc_index"] = torch.arange(len(texts))
    # bf16-representable weights (as in a bf16 checkpoint): every copy has the same head checksum
    weights = tiny_causal_lm("llama", False, vocab_size=64, seed=0).to(torch.bfloat16).state_dict()
    reference_spec, signatures, checksums, pilots = None, {}, {}, {}
    for name, where, dtype in (
        ("cpu_float32", "cpu", torch.float32),
        ("device_float32", device, torch.float32),
        ("device_bfloat16", device, torch.bfloat16),
    ):
        model = tiny_causal_lm("llama", False, vocab_size=64, seed=0)
        model.load_state_dict(weights)
        model = model.to(device=where, dtype=dtype)
        checksums[name] = HeadModel.of(model, tokenizer).head_checksum
        pilots[name] = pilot_mean(model, tokenizer).cpu()
        if reference_spec is None:  # every signature with the CPU's spec (its pilot mean), so they compare
            reference_spec = spec_for_model(model, tokenizer, m=m)
        state = SketchState(reference_spec, device=where)
        sketch_batch(state, model, {key: value.to(where) for key, value in batch.items()})
        signatures[name] = state.to("cpu").finalize()
    reference = signatures["cpu_float32"]
    return {
        "head_checksums_agree": len(set(checksums.values())) == 1,
        "pilot_max_abs_difference_vs_cpu": {
            k: float((v - pilots["cpu_float32"]).abs().max()) for k, v in pilots.items()
        },
        "alignment_vs_cpu_float32": {k: alignment(reference, s).fisher for k, s in signatures.items()},
        "joint_relative_difference_vs_cpu": {
            k: float((s.joint - reference.joint).norm() / reference.joint.norm()) for k, s in signatures.items()
        },
    }


def throughput(
    device: str, vocab_size: int, hidden: int, intermediate: int, batch_size: int, length: int, m: int, repeats: int = 5
) -> dict:
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=2,
        num_attention_heads=hidden // 128 or 1,
        num_key_value_heads=max(1, hidden // 512),
        tie_word_embeddings=False,
    )
    with torch.device(device):  # initialized where it runs: a 2-billion-parameter model, not built on the CPU
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    ids = torch.randint(0, vocab_size, (batch_size, length), device=device)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "doc_index": torch.arange(batch_size)}

    def timed(step) -> tuple[float, float | None]:
        step()
        _synchronize(device)
        if torch.device(device).type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for _ in range(repeats):
            step()
        _synchronize(device)
        seconds = (time.perf_counter() - start) / repeats
        return batch_size * length / seconds, _peak_gib(device)

    with torch.no_grad():
        forward_tps, forward_gib = timed(lambda: model(input_ids=ids, attention_mask=batch["attention_mask"]))  # noqa: F821
    report = {"forward_tokens_per_s": forward_tps, "forward_peak_gib": forward_gib}
    for estimator in sorted(ESTIMATORS, key=lambda name: name != DEFAULT_ESTIMATOR):  # the default first
        spec = spec_for_model(model, None, m=m, estimator=estimator, reflection=False)
        state = SketchState(spec, device=device)
        tps, gib = timed(lambda: sketch_batch(state, model, batch, token_chunk_size=1024))  # noqa: F821  (called before the del)
        report[estimator] = {"tokens_per_s": tps, "overhead": forward_tps / tps - 1.0, "peak_gib": gib}
    del model
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    return report


def cpu_update_vs_floor(tokens: int, rounds: int) -> list[dict]:
    """``benchmarks/throughput.py --cpu-time``'s rows: the default's CPU update vs exp + sum, 1 and 2 threads."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's root: its benchmarks package
    from benchmarks.throughput import run_cpu_time

    threads = torch.get_num_threads()
    try:
        return run_cpu_time(tokens, rounds)
    finally:
        torch.set_num_threads(threads)


def checks(device: str, small: bool) -> list[tuple[str, object]]:
    vocab_sizes, hidden, intermediate, batch_size, length, m = SMALL if small else FULL
    core = (
        (lambda: core_across_devices(device, d=16, vocab_size=256, m=m, n=64))
        if small
        else (lambda: core_across_devices(device))
    )
    found = [("core", core), ("capture", lambda: capture_across_devices(device, m=m))]
    for vocab_size in vocab_sizes:
        found.append(
            (
                f"throughput_K{vocab_size}",
                lambda k=vocab_size: throughput(device, k, hidden, intermediate, batch_size, length, m),
            )
        )
    found.append(("cpu_update_vs_floor", lambda: cpu_update_vs_floor(*(CPU_TIME_SMALL if small else CPU_TIME_FULL))))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="torch device to compare with the CPU (default cuda)")
    parser.add_argument("--small", action="store_true", help="tiny sizes: exercise the code in seconds")
    args = parser.parse_args(argv)
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        print(no_cuda_message(), file=sys.stderr)
        return 0
    report = {
        "device": torch.cuda.get_device_name() if torch.device(args.device).type == "cuda" else args.device,
        "torch": torch.__version__,
        "small": args.small,
    }
    import transformers

    report["transformers"] = transformers.__version__
    failed = False
    for name, check in checks(args.device, args.small):
        start = time.perf_counter()
        try:
            report[name] = check()
        except Exception as exc:  # report every check, even when one fails
            report[name], failed = {"error": f"{type(exc).__name__}: {exc}"}, True
        report[name + "_seconds"] = round(time.perf_counter() - start, 1)
        print(json.dumps({name: report[name]}, indent=1), flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "device_check.json"), "w") as handle:
            json.dump(report, handle, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
