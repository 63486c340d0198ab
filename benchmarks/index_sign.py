"""``fisherhub index sign`` on the local Hub server: 200 unsigned adapters of one base model whose cards name
20 datasets (16 readable, 2 gated, 1 missing, 1 without the text column), beside 10 signed adapters.

The base model is a tiny random Llama (fisherhub.testing.tiny_models, saved to a folder: nothing is downloaded). The
index is built first (the signed adapters), then ``fisherhub index sign`` sketches each named dataset once
and adds one row per (adapter, sketched dataset); its report (JSON) says why each skipped dataset was
skipped. Then a target from one dataset's topic is ranked from the index. Writes
benchmarks/results/index_sign.{json,png} and the command's report as index_sign_report.json.

    nice -n 19 python -m benchmarks.index_sign
    python -m benchmarks.index_sign --quick      # 40 unsigned adapters (writes to the temp dir)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from benchmarks.local_hub import SERVER, fresh_hub  # noqa: E402  (before anything imports huggingface_hub)

import torch  # noqa: E402
from huggingface_hub import HfApi  # noqa: E402

import fisherhub  # noqa: E402
from benchmarks.synthetic import add_output_arguments, machine_info, output_dir, write_results  # noqa: E402
from fisherhub.cli import main as cli  # noqa: E402
from fisherhub.hub import push_signature  # noqa: E402
from fisherhub.selection import select_adapter  # noqa: E402
from fisherhub.testing.hub_repos import create_adapter, create_jsonl_dataset  # noqa: E402
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer  # noqa: E402

BASE = "bench/base"
INDEX = "bench/base-index"
ADAPTERS, QUICK_ADAPTERS, DATASETS, SIGNED = 200, 40, 20, 10
GATED, MISSING, NO_TEXT = (16, 17), 18, 19  # dataset numbers that cannot be read
TOPICS = [
    "apple pie",
    "stock market",
    "football",
    "quantum physics",
    "violin",
    "volcano",
    "chess",
    "sailing",
    "tax law",
    "gardening",
    "poetry",
    "robots",
    "coffee",
    "desert",
    "opera",
    "surgery",
    "jazz",
    "glacier",
    "bicycle",
    "comet",
]


def texts(topic: int, n: int = 24) -> list[str]:
    return [f"{TOPICS[topic]} note {i}: more about {TOPICS[topic]} here" for i in range(n)]


def build_world(api: HfApi, model, tokenizer, adapters: int) -> None:
    for k in range(DATASETS):
        if k == MISSING:
            continue
        repo_id = create_jsonl_dataset(
            api, f"bench/data-{k:02d}", [{"body" if k == NO_TEXT else "text": t} for t in texts(k)]
        )
        if k in GATED:
            SERVER.repo(repo_id, "dataset").gated = "manual"
    for i in range(SIGNED):
        repo_id = create_adapter(api, f"bench/signed-{i:02d}", BASE)
        signature = fisherhub.sketch_texts(
            texts(i % DATASETS)[:12], model, tokenizer, m=256, metadata={"base_model": BASE}
        )
        push_signature(signature, repo_id)
    for i in range(adapters):  # adapter i names dataset i mod 20, every third one a second dataset too
        names = [f"bench/data-{i % DATASETS:02d}"] + ([f"bench/data-{(i * 7) % DATASETS:02d}"] if i % 3 == 0 else [])
        create_adapter(api, f"bench/unsigned-{i:03d}", BASE, list(dict.fromkeys(names)))


def plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 3.5))
    axis = figure.subplots()
    datasets = result["report"]["datasets"]
    labels = [d["dataset"].split("/")[1] for d in datasets]
    colours = ["tab:green" if d["status"] == "sketched" else "tab:red" for d in datasets]
    axis.bar(labels, [len(d["adapters"]) for d in datasets], color=colours)
    axis.set(
        ylabel="adapters naming it",
        title=f"index sign: {result['report']['rows_added']} rows added "
        f"(green sketched, red skipped), {result['sign_seconds']:.0f} s",
    )
    axis.tick_params(axis="x", rotation=90, labelsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapters", type=int, default=ADAPTERS, help=f"unsigned adapters (--quick: {QUICK_ADAPTERS})")
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    adapters = QUICK_ADAPTERS if args.quick else args.adapters
    torch.set_num_threads(1)
    fresh_hub()
    api = HfApi()
    model, tokenizer = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)
    report_path = output_dir(args) / "index_sign_report.json"
    with tempfile.TemporaryDirectory(prefix="fisherhub-index-sign-run-") as tmp:
        folder = Path(tmp) / "base"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        build_world(api, model, tokenizer, adapters)
        assert cli(["index", "build", BASE, "--push", f"datasets/{INDEX}", "--work", f"{tmp}/work"]) == 0
        started = time.perf_counter()
        assert (
            cli(
                [
                    "index",
                    "sign",
                    BASE,
                    "--index",
                    INDEX,
                    "--model",
                    str(folder),
                    "--max-documents",
                    "16",
                    "--report",
                    str(report_path),
                    "--work",
                    f"{tmp}/work",
                ]
            )
            == 0
        )
        sign_seconds = time.perf_counter() - started
        report = json.loads(report_path.read_text())
        target = fisherhub.sketch_texts(texts(5, 40)[24:], model, tokenizer, m=256, metadata={"base_model": BASE})
        selection = select_adapter(target, index=INDEX)
    sketched = [d for d in report["datasets"] if d["status"] == "sketched"]
    print(f"{'dataset':>16} {'status':>9} {'adapters':>9}  reason")
    for d in report["datasets"]:
        print(f"{d['dataset']:>16} {d['status']:>9} {len(d['adapters']):>9}  {(d['reason'] or '')[:90]}")
    print(
        f"{report['unsigned']} unsigned adapters, {report['naming_datasets']} naming datasets; {len(sketched)} of "
        f"{len(report['datasets'])} datasets sketched in {sign_seconds:.1f} s; {report['rows_added']} rows added"
    )
    print(f"best for a 'volcano' target: {selection.best.candidate} from {selection.best.signature_source}")
    result = {
        "machine": machine_info(),
        "adapters": adapters,
        "signed": SIGNED,
        "datasets": DATASETS,
        "sign_seconds": sign_seconds,
        "report": report,
        "best_for_volcano_target": selection.best.candidate,
        "ranking": [row.candidate for row in selection.ranking],
    }
    write_results("index_sign", result, lambda path: plot(result, path), args)


if __name__ == "__main__":
    main()
