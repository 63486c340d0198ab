"""The cost of a two-stage selection on SmolLM2-135M: ``select_adapter(texts, adapter folders, rerank=k)``.

A suite's cached LoRA adapters (seed 0) are saved as PEFT adapter folders with their training data's signature
under ``.fisher_signatures/``; each of a few targets' task documents (2,000 scored tokens, 64-token documents, as
the suites; first the domains whose adapter is not cached) is then selected for among the other domains' adapters: signatures only (the first stage: sketching
the target and ranking) and with ``rerank=k`` (the second stage alone: k + 1 forward passes over the target).

    python -m benchmarks.paper.rerank_cost [--suite exp6] [--targets 3] [--k 3]
"""

from __future__ import annotations

import argparse
import time

from benchmarks.paper import common
from benchmarks.paper.report import print_table, write_json


def suite_texts(suite: str) -> dict[str, list[str]]:
    from benchmarks import domains

    if suite == "exp6":
        built, names = domains.heldout_domains(), domains.HELDOUT_DOMAINS
    else:
        built, names = domains.natural_domains(), common.NATURAL_DOMAINS
    return {name: built[name]["text"] for name in names}


def adapter_folders(suite: str, texts: dict[str, list[str]], split: common.DomainSplit) -> dict[str, str]:
    """One PEFT adapter folder per domain whose seed-0 adapter the suite has cached, its signature inside (none
    is trained here)."""
    from peft import set_peft_model_state_dict

    model, tokenizer = common.load_base_model()
    spec = common.paper_spec(model, tokenizer)
    folders = {}
    bench = common.LoraBench(model, common.LoraSettings(), common.SETUP.cache_dir)
    for name, documents in texts.items():
        task, _ = split.split(tokenizer, documents)
        folder = common.SETUP.cache_dir / "rerank_cost" / suite / name
        if not bench.adapter_path(name, task, seed=0).exists():
            continue
        if not (folder / ".fisher_signatures" / "training-data.safetensors").exists():
            _, signature = common.capture_task(model, spec, task, name, common.SETUP.cache_dir / "tasks")
            set_peft_model_state_dict(bench.model, bench.adapter(name, task, seed=0))
            bench.model.save_pretrained(folder)
            (folder / ".fisher_signatures").mkdir(exist_ok=True)
            signature.save(folder / ".fisher_signatures" / "training-data.safetensors")
        folders[name] = str(folder)
    return folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="exp6", choices=("exp4", "exp6"))
    parser.add_argument("--targets", type=int, default=3)
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args()
    started = time.time()
    from fisherhub.selection import SketchOptions, select_adapter

    split = common.DomainSplit()
    texts = suite_texts(args.suite)
    folders = adapter_folders(args.suite, texts, split)
    if len(folders) < args.k:
        raise SystemExit(
            f"{len(folders)} cached adapters of {args.suite}; run the suite first (k = {args.k} needs {args.k})"
        )
    model, tokenizer = common.load_base_model()
    rows, records = [], []
    for target in sorted(texts, key=lambda name: name in folders)[: args.targets]:  # most candidates first
        task, _ = split.split(tokenizer, texts[target])
        documents = [tokenizer.decode(e.input_ids) for e in task]
        candidates = [folder for name, folder in folders.items() if name != target]
        options = {
            "model": model,
            "tokenizer": tokenizer,
            "sketch": SketchOptions(max_length=split.max_tokens, progress=False),
        }
        first = time.perf_counter()
        plain = select_adapter(documents, candidates, **options)
        first = time.perf_counter() - first
        selection = select_adapter(documents, candidates, rerank=args.k, **options)
        second = selection.rerank
        record = {
            "target": target,
            "candidates": len(candidates),
            "documents": second.documents,
            "tokens": second.tokens,
            "first_stage_seconds": first,
            "second_stage_seconds": second.seconds,
            "k": args.k,
            "seconds_per_forward_pass": second.seconds / (args.k + 1),
            "first_stage_pick": plain.best.candidate.rsplit("/", 1)[-1],
            "two_stage_pick": selection.best.candidate.rsplit("/", 1)[-1],
            "measured": [
                {"candidate": m.candidate.rsplit("/", 1)[-1], "loss": m.loss, "stderr": m.stderr, "gain": m.gain}
                for m in second.measured
            ],
            "verdict": selection.verdict.message,
        }
        records.append(record)
        rows.append(
            [
                target,
                record["tokens"],
                first,
                second.seconds,
                record["seconds_per_forward_pass"],
                record["first_stage_pick"],
                record["two_stage_pick"],
            ]
        )
    print_table(
        [
            "target",
            "scored tokens",
            "first stage (s)",
            f"second stage, k = {args.k} (s)",
            "s per forward pass",
            "first-stage pick",
            "two-stage pick",
        ],
        rows,
        title=f"two-stage selection cost, SmolLM2-135M, {args.suite} adapters (CPU, shared machine)",
    )
    path = write_json(
        "paper_rerank_cost", {"description": __doc__.splitlines()[0], "suite": args.suite, "targets": records}, started
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
