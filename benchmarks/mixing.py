"""Does a weighted mix of the selected adapters beat the single best one? One measured experiment.

Base model: the embedded SmolLM2-135M (``load_model_and_tokenizer(None)``, offline). Three demo domains
(``src/fisherhub/data/demo_data``: English prose, Python code, SMILES); each domain's 100 documents split into
60 to train on, 20 for the target's signature, 20 held out. Per domain a LoRA adapter (r = 8 on q_proj and
v_proj) is trained for a few AdamW steps, and a signature of its training documents is saved with it in its
folder (``.fisher_signatures/``), all with one spec (``like=`` the first). Two targets: held-out Python code
(one domain), and a half-and-half blend of prose and code (a task no single adapter was trained on).

Per target: ``select_adapter`` ranks the three adapter folders; ``Selection.mix(top_k=3, combination_type="cat")``
mixes them with ``Selection.weights()`` (temperature 1); the held-out mean token loss is measured for the base
model, each adapter, the selected (best-ranked) adapter, the weighted mix and, for reference, a uniform mix.
Writes benchmarks/results/mixing.{json,png}.

    python -m benchmarks.mixing            # ≈ 8 min on 2 shared cores (training: 15 steps × 3 adapters)
    python -m benchmarks.mixing --quick    # a tiny random Llama, 3 steps, half the documents (temp dir)
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local: no lookups of the base model's files

import torch  # noqa: E402
from benchmarks.synthetic import add_output_arguments, machine_info, write_results  # noqa: E402
from tqdm import tqdm  # noqa: E402

from fisherhub.data.demo import load_demo_domain  # noqa: E402
from fisherhub.lm.loading import load_model_and_tokenizer  # noqa: E402
from fisherhub.pipeline.loop import sketch_texts  # noqa: E402
from fisherhub.selection import adapter_names, select_adapter  # noqa: E402
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer  # noqa: E402

DOMAINS = ("english_prose", "python_code", "smiles")
TARGETS = {"python_code": {"python_code": 1.0}, "prose+code": {"english_prose": 0.5, "python_code": 0.5}}
TRAIN, SIGNED, HELD_OUT = 60, 20, 20  # documents per domain: training, target signature, held out
BASE_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
MAX_LENGTH, BATCH = 128, 4


def split(domain: str, quick: bool) -> dict[str, list[str]]:
    texts = load_demo_domain(domain)["text"]
    scale = 2 if quick else 1
    return {
        "train": texts[: TRAIN // scale],
        "signed": texts[TRAIN : TRAIN + SIGNED // scale],
        "held_out": texts[TRAIN + SIGNED : TRAIN + SIGNED + HELD_OUT // scale],
    }


def batch_of(tokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=MAX_LENGTH)
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    return batch


def train_adapter(base, tokenizer, texts: list[str], steps: int, folder: Path) -> None:
    """A LoRA adapter trained for ``steps`` AdamW steps on batches of ``texts``, saved to ``folder``."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(copy.deepcopy(base), LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    model.peft_config["default"].base_model_name_or_path = BASE_NAME
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-3)
    model.train()
    for step in range(steps):
        start = step * BATCH % len(texts)
        model(**batch_of(tokenizer, texts[start : start + BATCH])).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(folder, save_embedding_layers=False)


def held_out_loss(model, tokenizer, texts: list[str]) -> float:
    """Mean token loss of ``texts`` (in batches of BATCH, weighted by their scored tokens)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(texts), BATCH):
            batch = batch_of(tokenizer, texts[start : start + BATCH])
            tokens = int((batch["labels"][:, 1:] != -100).sum())
            total += float(model(**batch).loss) * tokens
            count += tokens
    return total / count


def blend(parts: dict[str, list[str]], shares: dict[str, float], split_name: str) -> list[str]:
    return [
        text
        for domain, share in shares.items()
        for text in parts[domain][split_name][: round(share * len(parts[domain][split_name]))]
    ]


def base_model(quick: bool):
    """The embedded SmolLM2-135M and its tokenizer; ``quick``: a tiny random Llama and a character tokenizer."""
    if quick:
        return tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=96), tiny_tokenizer(96)
    return load_model_and_tokenizer(None)


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    base, tokenizer = base_model(args.quick)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    parts = {domain: split(domain, args.quick) for domain in DOMAINS}
    folder = Path(tempfile.mkdtemp(prefix="fisherhub-mixing-"))
    metadata = {"base_model": BASE_NAME}
    like = None
    started = time.perf_counter()
    for domain in tqdm(DOMAINS, desc="train + sign adapters"):
        adapter = folder / domain
        train_adapter(base, tokenizer, parts[domain]["train"], args.steps, adapter)
        signature = sketch_texts(
            parts[domain]["train"],
            base,
            tokenizer,
            like,
            max_length=MAX_LENGTH,
            metadata={**metadata, "dataset": domain},
            progress=False,
        )
        like = like or signature
        (adapter / ".fisher_signatures").mkdir()
        signature.save(adapter / ".fisher_signatures" / "training-data.safetensors")
    train_seconds = time.perf_counter() - started
    names = dict(zip(DOMAINS, adapter_names([str(folder / domain) for domain in DOMAINS])))
    results = {}
    for target, shares in TARGETS.items():
        target_signature = sketch_texts(
            blend(parts, shares, "signed"),
            base,
            tokenizer,
            like,
            max_length=MAX_LENGTH,
            metadata=metadata,
            progress=False,
        )
        selection = select_adapter(target_signature, [folder / domain for domain in DOMAINS])
        weights = selection.weights()
        model = selection.mix(copy.deepcopy(base), top_k=len(DOMAINS), combination_type="cat")
        model.add_weighted_adapter(
            list(names.values()), [1 / len(DOMAINS)] * len(DOMAINS), "uniform", combination_type="cat"
        )
        held_out = blend(parts, shares, "held_out")
        with model.disable_adapter():
            losses = {"base model": held_out_loss(model, tokenizer, held_out)}
        for domain, name in names.items():
            model.set_adapter(name)
            losses[f"adapter {domain}"] = held_out_loss(model, tokenizer, held_out)
        best = Path(selection.best.candidate).name
        losses["selected (best-ranked)"] = losses[f"adapter {best}"]
        for mix in ("mix", "uniform"):
            model.set_adapter(mix)
            losses[{"mix": "weighted mix", "uniform": "uniform mix"}[mix]] = held_out_loss(model, tokenizer, held_out)
        results[target] = {
            "ranking": [
                {"adapter": Path(row.candidate).name, "fisher": row.score, "stderr": row.stderr}
                for row in selection.ranking
            ],
            "weights": {Path(name).name: weight for name, weight in weights.items()},
            "held_out_loss": losses,
            "mix_minus_selected": losses["weighted mix"] - losses["selected (best-ranked)"],
        }
    return {
        "config": {
            "domains": DOMAINS,
            "targets": TARGETS,
            "train_documents": len(parts[DOMAINS[0]]["train"]),
            "steps": args.steps,
            "batch": BATCH,
            "max_length": MAX_LENGTH,
            "lora": "r=8 q_proj,v_proj lr 2e-3",
            "mix": "Selection.mix(top_k=3, combination_type='cat'), Selection.weights(temperature=1)",
            "quick": args.quick,
        },
        "train_and_sign_seconds": train_seconds,
        "targets": results,
        "machine": machine_info(),
    }


def print_table(result: dict) -> None:
    for target, row in result["targets"].items():
        print(
            f"\ntarget {target}: ranking "
            + ", ".join(f"{r['adapter']} {r['fisher']:.3f}±{r['stderr']:.3f}" for r in row["ranking"])
        )
        print("  weights " + ", ".join(f"{name} {weight:.3f}" for name, weight in row["weights"].items()))
        print(f"  {'model':<26}{'held-out loss':>14}")
        for name, loss in row["held_out_loss"].items():
            print(f"  {name:<26}{loss:>14.4f}")
        gap = row["mix_minus_selected"]
        verdict = "tie" if abs(gap) < 1e-4 else "weighted mix wins" if gap < 0 else "single best wins"
        print(f"  weighted mix − selected: {gap:+.4f} ({verdict})")


def plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4))
    for axes, (target, row) in zip(figure.subplots(1, len(result["targets"])), result["targets"].items()):
        names, losses = zip(*row["held_out_loss"].items())
        colors = [
            "tab:gray"
            if n == "base model"
            else "tab:red"
            if n == "weighted mix"
            else "tab:green"
            if n.startswith("selected")
            else "tab:blue"
            for n in names
        ]
        axes.barh(names, losses, color=colors)
        axes.set_xlim(min(losses) * 0.95, max(losses) * 1.02)
        axes.invert_yaxis()
        axes.set_title(f"target: {target}")
        axes.set_xlabel("held-out mean token loss (lower is better)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15, help="AdamW steps per adapter")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = min(args.steps, 3)
    result = run(args)
    print_table(result)
    write_results("mixing", result, lambda path: plot(result, path), args)


if __name__ == "__main__":
    main()
