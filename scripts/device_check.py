"""GPU check (run on a CUDA machine): signatures agree across devices, and sketch overhead at
Llama-3 head scale. Prints a JSON report (and writes it to $OUT/device_check.json when OUT is set).

    PYTHONPATH=src:tests python scripts/device_check.py

1. Core: the same (a, e) sketched on CPU and on CUDA give the same sketch id and sums within float32
   rounding, for every estimator.
2. Capture on a tiny Llama: CPU fp32 vs CUDA fp32 vs CUDA bf16; spec_for_model's pilot mean (the
   Householder reflection) computed on each device, and whether the sketch ids agree.
3. Throughput: a random model with Llama-3's head (K = 128,256, d = 4096, 2 layers) in bf16:
   tokens/s of the forward pass alone vs forward + sketch, per estimator, and peak memory.
"""

from __future__ import annotations

import json
import os
import time

import torch

from fisherhub.core.batch import HeadBatch
from fisherhub import SketchSpec, SketchState, alignment
from fisherhub.capture import pilot_mean, sketch_batch, spec_for_model
from fisherhub.core.spec import ESTIMATORS

DEVICE = os.environ.get("FISHERSKETCH_CHECK_DEVICE", "cuda")


def random_errors(n: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    errors = torch.softmax(3 * torch.randn(n, vocab, generator=generator), -1)
    errors[torch.arange(n), torch.randint(0, 32, (n,), generator=generator)] -= 1  # a few frequent labels
    return errors


def core_across_devices() -> dict:
    generator = torch.Generator().manual_seed(0)
    a = 1.0 + torch.randn(1024, 576, generator=generator)
    e = random_errors(1024, 49152, generator)
    docs = torch.arange(1024) // 8
    report = {}
    for estimator in ESTIMATORS:
        spec = SketchSpec(d=576, vocab_size=49152, m=4096, estimator=estimator).with_reflection(a.mean(0))
        cpu = SketchState(spec).update(HeadBatch(activations=a, doc_index=docs, errors=e))
        gpu = SketchState(spec, device=DEVICE).update(HeadBatch(activations=a.to(DEVICE), doc_index=docs.to(DEVICE), errors=e.to(DEVICE)))
        relative = float(((gpu.sums.cpu() - cpu.sums).norm() / cpu.sums.norm()))
        result = alignment(cpu.finalize(), gpu.to("cpu").finalize())
        report[estimator] = {"sums_relative_difference": relative, "alignment_cpu_vs_cuda": result.fisher}
    return report


def capture_across_devices() -> dict:
    from tiny_models import tiny_causal_lm, tiny_tokenizer

    tokenizer = tiny_tokenizer(64)
    texts = [f"the quick brown fox {i} jumps over the lazy dog {i * 7}" for i in range(64)]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    batch["doc_index"] = torch.arange(len(texts))
    signatures, pilots, ids = {}, {}, {}
    for name, device, dtype in (("cpu_fp32", "cpu", torch.float32), ("cuda_fp32", DEVICE, torch.float32),
                                ("cuda_bf16", DEVICE, torch.bfloat16)):
        # bf16-representable weights (as in a bf16 checkpoint), so every copy has the same head checksum
        model = tiny_causal_lm("llama", False, vocab_size=64, seed=0).to(torch.bfloat16).to(device=device, dtype=dtype)
        spec = spec_for_model(model, tokenizer, m=4096)
        pilots[name] = pilot_mean(model, tokenizer).float().cpu()
        ids[name] = spec.sketch_id
        like_spec = spec_for_model(model, tokenizer, m=4096, like=signatures["cpu_fp32"]) if signatures else spec
        state = SketchState(like_spec, device=device)
        sketch_batch(state, model, {k: v.to(device) for k, v in batch.items()})
        signatures[name] = state.to("cpu").finalize()
    reference = signatures["cpu_fp32"]
    return {
        "sketch_ids_with_own_pilot": ids,
        "pilot_max_abs_difference_vs_cpu": {k: float((v - pilots["cpu_fp32"]).abs().max()) for k, v in pilots.items()},
        "alignment_vs_cpu_fp32_sketched_like": {k: alignment(reference, s).fisher for k, s in signatures.items()},
    }


def throughput(vocab_size: int, batch_size: int = 8, length: int = 512, repeats: int = 5) -> dict:
    import transformers

    config = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=4096, intermediate_size=14336,
                                      num_hidden_layers=2, num_attention_heads=32, num_key_value_heads=8)
    model = transformers.LlamaForCausalLM(config).to(device=DEVICE, dtype=torch.bfloat16).eval()
    ids = torch.randint(0, vocab_size, (batch_size, length), device=DEVICE)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "doc_index": torch.arange(batch_size, device=DEVICE)}

    def timed(step) -> tuple[float, float]:
        step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for _ in range(repeats):
            step()
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / repeats
        return batch_size * length / seconds, torch.cuda.max_memory_allocated() / 2**30

    with torch.no_grad():
        forward_tps, forward_gib = timed(lambda: model(input_ids=ids, attention_mask=batch["attention_mask"]))
    report = {"forward_tokens_per_s": forward_tps, "forward_peak_gib": forward_gib}
    for estimator in ESTIMATORS:
        spec = spec_for_model(model, None, m=4096, estimator=estimator, reflection=False)
        state = SketchState(spec, device=DEVICE)
        tps, gib = timed(lambda: sketch_batch(state, model, batch, token_chunk_size=1024))
        report[estimator] = {"tokens_per_s": tps, "overhead": forward_tps / tps - 1.0, "peak_gib": gib}
    del model
    torch.cuda.empty_cache()
    return report


def main() -> None:
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    import transformers

    report["transformers"] = transformers.__version__
    for name, check in (("core", core_across_devices), ("capture", capture_across_devices),
                        ("throughput_K128256", lambda: throughput(128256)),
                        ("throughput_K32000", lambda: throughput(32000))):
        start = time.perf_counter()
        try:
            report[name] = check()
        except Exception as exc:  # report every check, even when one fails
            report[name] = {"error": f"{type(exc).__name__}: {exc}"}
        report[name + "_seconds"] = round(time.perf_counter() - start, 1)
        print(json.dumps({name: report[name]}, indent=1), flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "device_check.json"), "w") as handle:
            json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main()
