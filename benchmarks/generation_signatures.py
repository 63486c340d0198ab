"""Signatures from an adapter's generations against signatures of its training data, measured (issue 35 item 2).

Base model: the embedded SmolLM2-135M (offline). Per demo domain (``src/fisherhub/data/demo_data``) a LoRA
adapter (r = 8 on q_proj, v_proj) is trained for a few AdamW steps on the domain's training split
(``benchmarks.mixing``), then signed two ways with one spec: from its training documents, and from its own
samples (``generation_signing``: the shipped prompt set, temperature 1, seed 0, ``--max-new-tokens`` each), for
each number of samples in ``--samples`` (the first n samples of a run are the n samples of a smaller run, so one
run of the largest n gives them all). Targets: each domain's held-back target split. Ground truth: the held-out
mean token loss of each target's domain under each adapter.

Reported side by side: A between the two signatures of one adapter; the first stage's top-1 (the adapter of
lowest held-out loss ranked first by A) and max regret (held-out loss of the pick − the best's) with data
signatures, generation signatures and a mix (half the adapters each way, both halves averaged); the same for a
two-stage pick (the first stage's top ``SHORTLIST`` re-ranked by their loss on the target's own split, as
``select_adapter``'s second stage does); and the cost of signing one adapter from its generations (sampling +
sketch, seconds) against the number of samples at 1 and 2 threads. Writes
benchmarks/results/generation_signatures.{json,png}.

    nice -n 10 python -m benchmarks.generation_signatures --domains 3 --samples 24,48 --max-new-tokens 32
    python -m benchmarks.generation_signatures --quick    # a tiny random Llama, 3 domains (temp dir)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from benchmarks.mixing import BASE_NAME, MAX_LENGTH, base_model, held_out_loss, split, train_adapter  # noqa: E402
from benchmarks.synthetic import add_output_arguments, machine_info, write_results  # noqa: E402

from fisherhub.core.alignment import alignment  # noqa: E402
from fisherhub.generation_signing import adapter_generations, generation_metadata  # noqa: E402
from fisherhub.options import GenerationOptions  # noqa: E402
from fisherhub.pipeline.loop import sketch_texts  # noqa: E402
from fisherhub.selection.peft_loading import checked_adapter_on  # noqa: E402
from fisherhub.selection.rows import AdapterLocation  # noqa: E402

DOMAINS = ("english_prose", "python_code", "smiles", "dna", "protein")
#: adapters of the first stage re-ranked by their loss on the target's own split (at most all but one)
SHORTLIST = 3
METADATA = {"base_model": BASE_NAME}


def train_all(base, tokenizer, parts, domains, steps: int, folder: Path) -> float:
    started = time.perf_counter()
    for domain in domains:
        train_adapter(base, tokenizer, parts[domain]["train"], steps, folder / domain)
    return time.perf_counter() - started


def generations(base, tokenizer, folder: Path, options: GenerationOptions) -> tuple[list[str], float]:
    """(the adapter's samples, seconds spent drawing them)."""
    started = time.perf_counter()
    texts = adapter_generations(base, tokenizer, AdapterLocation(str(folder)), BASE_NAME, options)
    return texts, time.perf_counter() - started


def picks(scores: torch.Tensor, sample_loss: torch.Tensor, shortlist: int) -> tuple[list[int], list[int]]:
    """Per target (column): the first stage's pick (highest score) and the two-stage pick (of the ``shortlist``
    highest, the lowest loss on the target's own split)."""
    first, second = [], []
    for t in range(scores.shape[1]):
        order = torch.argsort(scores[:, t], descending=True)
        first.append(int(order[0]))
        short = order[:shortlist]
        second.append(int(short[torch.argmin(sample_loss[short, t])]))
    return first, second


def quality(chosen: list[int], held_out: torch.Tensor) -> dict[str, float]:
    """Top-1 (the pick is the adapter of lowest held-out loss) and max regret over the targets."""
    best = held_out.argmin(dim=0)
    regrets = [float(held_out[c, t] - held_out[best[t], t]) for t, c in enumerate(chosen)]
    return {"top1": sum(int(c == int(best[t])) for t, c in enumerate(chosen)) / len(chosen), "max_regret": max(regrets)}


def scored(signatures, targets) -> torch.Tensor:
    return torch.tensor([[alignment(s, t).fisher for t in targets] for s in signatures])


def selection_table(data, generated, targets, held_out, sample_loss, shortlist) -> dict[str, dict]:
    """First-stage and two-stage quality of data, generation and mixed signatures (mix: even adapters from
    generations and odd from data, and the other way round, averaged)."""
    count = len(data)
    sets = {"data": [data], "generations": [generated]}
    sets["mix"] = [[generated[i] if i % 2 == half else data[i] for i in range(count)] for half in (0, 1)]
    out = {}
    for name, variants in sets.items():
        results = [picks(scored(v, targets), sample_loss, shortlist) for v in variants]
        first = [quality(r[0], held_out) for r in results]
        second = [quality(r[1], held_out) for r in results]
        out[name] = {
            f"{stage}_{key}": sum(q[key] for q in qs) / len(qs)
            for stage, qs in (("first", first), ("two_stage", second))
            for key in ("top1", "max_regret")
        }
    return out


def cost_curve(base, tokenizer, folder: Path, like, samples: list[int], options: GenerationOptions) -> dict:
    """Seconds to sign one adapter from n samples (sampling + sketch) for each n, at 1 and 2 threads."""
    curve: dict[str, dict[str, float]] = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for n in samples:
            texts, seconds = generations(base, tokenizer, folder, dataclasses.replace(options, samples=n))
            started = time.perf_counter()
            sketch_texts(texts, base, tokenizer, like, metadata=METADATA)
            curve.setdefault(str(threads), {})[str(n)] = seconds + time.perf_counter() - started
    return curve


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    base, tokenizer = base_model(args.quick)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    domains = DOMAINS[: args.domains]
    parts = {domain: split(domain, args.quick) for domain in domains}
    folder = Path(tempfile.mkdtemp(prefix="fisherhub-generation-signatures-"))
    train_seconds = train_all(base, tokenizer, parts, domains, args.steps, folder)
    data, like = [], None
    for domain in domains:
        data.append(
            sketch_texts(parts[domain]["train"], base, tokenizer, like, max_length=MAX_LENGTH, metadata=METADATA)
        )
        like = like or data[0]
    targets = [
        sketch_texts(parts[d]["signed"], base, tokenizer, like, max_length=MAX_LENGTH, metadata=METADATA)
        for d in domains
    ]
    print(f"trained {len(domains)} adapters in {train_seconds:.0f} s; data and target signatures done", flush=True)
    held_out, sample_loss = (torch.zeros(len(domains), len(domains)) for _ in range(2))
    for i, domain in enumerate(domains):
        with checked_adapter_on(base, AdapterLocation(str(folder / domain)), BASE_NAME, None, None) as peft_model:
            for t, target in enumerate(domains):
                held_out[i, t] = held_out_loss(peft_model, tokenizer, parts[target]["held_out"])
                sample_loss[i, t] = held_out_loss(peft_model, tokenizer, parts[target]["signed"])
    largest = GenerationOptions(
        samples=max(args.samples), max_new_tokens=args.max_new_tokens, generation_batch_size=args.batch
    )
    drawn = {domain: generations(base, tokenizer, folder / domain, largest) for domain in domains}
    print("generations: " + ", ".join(f"{d} {s:.0f} s" for d, (_, s) in drawn.items()), flush=True)
    shortlist = min(SHORTLIST, len(domains) - 1)
    by_samples = {}
    for n in args.samples:
        metadata = {**METADATA, **generation_metadata(dataclasses.replace(largest, samples=n))}
        generated = [sketch_texts(drawn[d][0][:n], base, tokenizer, like, metadata=metadata) for d in domains]
        agreement = [alignment(d, g) for d, g in zip(data, generated)]
        by_samples[str(n)] = {
            "A_data_vs_generated": {d: [a.fisher, a.stderrs["fisher"]] for d, a in zip(domains, agreement)},
            "selection": selection_table(data, generated, targets, held_out, sample_loss, shortlist),
        }
    return {
        "config": {
            "base_model": "tiny random Llama" if args.quick else BASE_NAME,
            "domains": domains,
            "steps": args.steps,
            "samples": args.samples,
            "max_new_tokens": args.max_new_tokens,
            "train_documents": len(parts[domains[0]]["train"]),
            "shortlist": shortlist,
            "quick": args.quick,
        },
        "train_seconds": train_seconds,
        "held_out_loss": held_out.tolist(),
        "generation_seconds_largest": {d: drawn[d][1] for d in domains},
        "by_samples": by_samples,
        "cost_seconds": cost_curve(base, tokenizer, folder / domains[0], like, args.samples, largest),
        "machine": machine_info(),
    }


def print_table(result: dict) -> None:
    print(f"\n{'samples':>8} {'signatures':<12} {'first top1':>10} {'regret':>8} {'2-stage top1':>13} {'regret':>8}")
    for n, row in result["by_samples"].items():
        for name, q in row["selection"].items():
            print(
                f"{n:>8} {name:<12} {q['first_top1']:>10.2f} {q['first_max_regret']:>8.4f} "
                f"{q['two_stage_top1']:>13.2f} {q['two_stage_max_regret']:>8.4f}"
            )
        pairs = ", ".join(f"{d} {a:.3f}±{se:.3f}" for d, (a, se) in row["A_data_vs_generated"].items())
        print(f"{'':>8} A(data, generations): {pairs}")
    for threads, curve in result["cost_seconds"].items():
        print(
            f"cost per adapter, {threads} thread(s): " + ", ".join(f"{n} samples {s:.1f} s" for n, s in curve.items())
        )


def plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 3.8), layout="constrained")
    left, middle, right = figure.subplots(1, 3)
    samples = [int(n) for n in result["by_samples"]]
    for domain in result["config"]["domains"]:
        values = [result["by_samples"][str(n)]["A_data_vs_generated"][domain] for n in samples]
        left.errorbar(samples, [v[0] for v in values], yerr=[v[1] for v in values], marker="o", label=domain)
    left.set(xlabel="samples", ylabel="A(data signature, generation signature)", title="one adapter, two signatures")
    left.legend(fontsize=7)
    for name in ("data", "generations", "mix"):
        middle.plot(
            samples, [result["by_samples"][str(n)]["selection"][name]["first_top1"] for n in samples], "o-", label=name
        )
    middle.set(xlabel="samples", ylabel="first-stage top-1", ylim=(-0.05, 1.05), title="selection")
    middle.legend(fontsize=7)
    for threads, curve in result["cost_seconds"].items():
        right.plot([int(n) for n in curve], list(curve.values()), "o-", label=f"{threads} thread(s)")
    right.set(xlabel="samples", ylabel="seconds per adapter", title="cost (sampling + sketch)")
    right.legend(fontsize=7)
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=len(DOMAINS), help="demo domains (adapters), in DOMAINS order")
    parser.add_argument("--steps", type=int, default=15, help="AdamW steps per adapter")
    parser.add_argument("--samples", default="16,32,64,128", help="numbers of samples per adapter (comma-separated)")
    parser.add_argument(
        "--max-new-tokens", type=int, default=GenerationOptions.max_new_tokens, help="tokens per sample"
    )
    parser.add_argument(
        "--batch", type=int, default=GenerationOptions.generation_batch_size, help="samples drawn together"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the cost curve runs 1 and 2)")
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    args.samples = sorted({int(n) for n in args.samples.split(",")})
    if args.quick:
        args.domains, args.steps, args.samples, args.max_new_tokens = 3, 3, [20, 24], 8
    result = run(args)
    print_table(result)
    write_results("generation_signatures", result, lambda path: plot(result, path), args)


if __name__ == "__main__":
    main()
