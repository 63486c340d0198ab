"""Experiment 3: verbalizer shift (only the label words change, so every task has the same activations).

Fixed prompts "Review: <VADER snippet>\\nSentiment:" (human-rated snippets with |score| ≥ 1: movie
reviews, product reviews, tweets) and six verbalizer pairs, each a single token after the prompt:
positive/negative, good/bad, yes/no, great/terrible, happy/sad, 1/0. A task is the prompt with its
label word as the one scored target. Ground truth: a LoRA adapter trained on task s (``common.LORA_SEEDS``)
lowers the held-out loss of task t by transfer[s, t] nats. For each (target, seed) every method picks
one of the five other tasks; top-1 over the 12 trials. Activation-only similarity and paired CKA see
identical activations, so they tie every candidate (expected top-1 1/5).
Paper: FisherSketch 66.7%, activation-only 20% (= random), error-only 72.2%.

    python -m benchmarks.paper.exp3_verbalizer           # full run
    python -m benchmarks.paper.exp3_verbalizer --quick   # seconds: tiny random model, random prompts, temp folder
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch
from tqdm import tqdm

from benchmarks.domains import sentiment_snippets
from benchmarks.paper import common
from benchmarks.paper.methods import trust_table
from benchmarks.paper.report import heatmaps, matrix_rows, print_bootstrap, print_table, regime_counts, write_json
from benchmarks.paper.selection_methods import SelectionInputs, available_needs, score_matrices
from benchmarks.paper.transfer import REFERENCES
from benchmarks.registry import check_references, labels, methods_of
from benchmarks.paper.scoring import HeldOutLosses, combine, paired_bootstrap, random_selection, selection_score
from fisherhub import alignment_matrix
from fisherhub.core.errors import InputError

VERBALIZERS = {
    "positive/negative": (" positive", " negative"),
    "good/bad": (" good", " bad"),
    "yes/no": (" yes", " no"),
    "great/terrible": (" great", " terrible"),
    "happy/sad": (" happy", " sad"),
    "1/0": ("1", "0"),
}
TEMPLATE = "Review: {text}\nSentiment:"
MIN_ABS_SCORE = 1.0  # VADER human rating in [-4, 4]; weaker ratings are left out as ambiguous
TEXT_TOKENS = 40  # snippets are cut to their first 40 tokens
SNIPPETS = 3000  # VADER snippets drawn (2,140 of them rated |score| >= 1)
POOL, HELD_OUT = 256, 1024  # prompts for signatures and LoRA training / for the ground-truth loss
SEEDS = common.LORA_SEEDS
PAPER = {"fishersketch": 0.667, "activation": 0.20, "error": 0.722}
#: ``--quick``: one-character label words of the tiny tokenizer, and the prompts' counts
QUICK_VERBALIZERS = {"a/b": ("a", "b"), "c/d": ("c", "d"), "e/f": ("e", "f"), "g/h": ("g", "h")}
QUICK_POOL, QUICK_HELD_OUT = 24, 16


def verbalizers() -> dict[str, tuple[str, str]]:
    """The verbalizer pairs of this run (``VERBALIZERS``; ``QUICK_VERBALIZERS`` if quick)."""
    return QUICK_VERBALIZERS if common.SETUP.quick else VERBALIZERS


def pool_sizes() -> tuple[int, int]:
    """Prompts for the signatures and LoRA training, and held out (smaller if quick)."""
    return (QUICK_POOL, QUICK_HELD_OUT) if common.SETUP.quick else (POOL, HELD_OUT)


def label_ids(tokenizer) -> dict[str, tuple[int, int]]:
    """(positive id, negative id) of every verbalizer; each word must be one token after the prompt."""
    ids = {}
    for name, words in verbalizers().items():
        tokens = [tokenizer(word, add_special_tokens=False)["input_ids"] for word in words]
        if any(len(t) != 1 for t in tokens):
            raise InputError(f"verbalizer {name} is not one token per word for this tokenizer: {tokens}")
        ids[name] = (tokens[0][0], tokens[1][0])
    return ids


def prompts(tokenizer) -> tuple[list[str], torch.Tensor]:
    """Prompts and sentiment signs (+1 / −1) of the clearly rated snippets, in dataset order (random
    snippets with random signs if quick)."""
    if common.SETUP.quick:
        texts = common.quick_texts(["snippets"], documents=sum(pool_sizes()), length=12)["snippets"]
        signs = torch.tensor([1 if i % 3 else -1 for i in range(len(texts))])
        return [TEMPLATE.format(text=t) for t in texts], signs
    rows = [r for r in sentiment_snippets(SNIPPETS) if abs(r["score"]) >= MIN_ABS_SCORE][: POOL + HELD_OUT]
    texts = [tokenizer.decode(tokenizer(r["text"], add_special_tokens=False)["input_ids"][:TEXT_TOKENS]) for r in rows]
    return [TEMPLATE.format(text=t) for t in texts], torch.tensor([1 if r["score"] > 0 else -1 for r in rows])


def task_examples(tokenizer) -> tuple[dict[str, list[common.Example]], list[common.Example], list[str], torch.Tensor]:
    """Each task's pool examples (prompt + its label word), the held-out prompts (labelled with the first
    task's words), the prompts and which of them are positive."""
    ids = label_ids(tokenizer)
    texts, signs = prompts(tokenizer)
    positive = signs > 0

    def examples(task: str, documents: range) -> list[common.Example]:
        return [
            common.label_example(tokenizer, texts[i], ids[task][0] if positive[i] else ids[task][1], i)
            for i in documents
        ]

    pool_size, held_out = pool_sizes()
    pool = {task: examples(task, range(pool_size)) for task in verbalizers()}
    return pool, examples(next(iter(verbalizers())), range(pool_size, pool_size + held_out)), texts, positive


def main(argv: list[str] | None = None) -> None:
    options = common.paper_arguments(__doc__.splitlines()[0], official=True, argv=argv)
    check_references("exp3", [*PAPER, *REFERENCES])
    chosen = methods_of("exp3", available_needs(options.official_package))
    started = time.time()
    model, tokenizer = common.load_base_model()
    spec = common.paper_spec(model, tokenizer)
    ids = label_ids(tokenizer)
    names = list(verbalizers())
    pool, held_out, texts, positive = task_examples(tokenizer)
    pool_size = len(pool[names[0]])

    # the prompts' head inputs once (they are the same for every task), then one signature per task
    inputs, _ = common.capture_task(model, spec, pool[names[0]], "verbalizer_prompts", common.SETUP.cache_dir / "tasks")
    positive_doc = positive[inputs.doc_index]
    tasks = [
        common.HeadInputs(inputs.activations, torch.where(positive_doc, ids[t][0], ids[t][1]), inputs.doc_index)
        for t in names
    ]
    signatures = [common.sketch_head_inputs(spec, model, task, name) for task, name in zip(tasks, names)]

    def error_path(k: int):
        return common.SETUP.cache_dir / "errors" / f"verbalizer-{names[k].replace('/', '-')}.npy"

    sketch = alignment_matrix(signatures, names)
    task_texts = [[texts[i] + verbalizers()[t][0 if positive[i] else 1] for i in range(pool_size)] for t in names]
    method_inputs = SelectionInputs(
        "exp3", names, model, tokenizer, spec, tasks, pool, task_texts, sketch, error_path, options.official_package
    )
    scores = score_matrices(method_inputs, chosen)
    labels_of = labels("exp3")

    # ground truth: LoRA per (task, seed); held-out loss of every task from one pass over the prompts
    settings = common.lora_settings()
    bench = common.LoraBench(model, settings, common.SETUP.cache_dir)
    bench.prefix_states(pool[names[0]] + held_out, group="verbalizer")
    candidates = [i for pair in (ids[t] for t in names) for i in pair]
    ledger = common.Ledger(
        common.SETUP.cache_dir / f"exp3_prompt_nll_{common.config_key(settings)}_{common.examples_key(held_out)}.json"
    )

    def task_losses(weights) -> list[list[float]]:
        """−log p(label) of every held-out prompt, for each task's labels."""
        with bench.using(weights) as adapted:
            nll = adapted.nll(held_out, candidate_ids=candidates)
        return [torch.where(positive[pool_size:], nll[:, 2 * k], nll[:, 2 * k + 1]).tolist() for k in range(len(names))]

    base = np.array(ledger.get("base", lambda: task_losses(None)))
    adapted = np.array(
        [
            [
                ledger.get(
                    f"{task}|{seed}",
                    lambda task=task, seed=seed: task_losses(
                        bench.adapter(f"verbalizer-{task.replace('/', '-')}", pool[task], seed)
                    ),
                )
                for task in tqdm(names, desc=f"seed {seed}")
            ]
            for seed in SEEDS
        ]
    )
    ground_truth = HeldOutLosses(base, adapted, np.ones_like(base), relative_perplexity=False)
    transfers = [torch.from_numpy(t) for t in ground_truth.transfer()]

    _, selections, official_recommendations = method_inputs.added
    selection = {
        key: combine([selection_score(score, transfer) for transfer in transfers]) for key, score in scores.items()
    }
    selection["random"] = combine([random_selection(transfer) for transfer in transfers])
    best = torch.stack([t.clone().fill_diagonal_(-torch.inf).argmax(dim=0) for t in transfers])
    seed_agreement = float((best == best[0]).all(dim=0).double().mean())

    print_table(
        ["method", "top-1", "mean regret (nats)", "max regret", "Spearman/target", "paper top-1"],
        [
            [labels_of[k], s.top1, s.mean_regret, s.max_regret, s.mean_spearman, PAPER.get(k)]
            for k, s in selection.items()
        ],
        title=f"Experiment 3: verbalizer shift, {len(names)} tasks x {len(SEEDS)} seeds = "
        f"{len(names) * len(SEEDS)} selections (random top-1 = 1/{len(names) - 1})",
    )
    print(f"best source identical across the {len(SEEDS)} seeds for {seed_agreement:.0%} of targets")
    bootstrap = paired_bootstrap(scores, ground_truth)
    print_bootstrap(
        bootstrap,
        labels_of,
        [r for r in REFERENCES if r in scores],
        f"Experiment 3, paired bootstrap ({bootstrap['draws']} draws over targets and held-out prompts)",
    )
    trust = {key: trust_table(value, transfers) for key, value in selections.items()}
    regimes = {key: regime_counts(value) for key, value in selections.items()}
    print("regimes:", regimes)
    print("trust:", trust)
    mean_transfer = torch.stack(transfers).mean(dim=0)
    heatmaps(
        {"transfer (nats, mean over seeds)": mean_transfer} | {labels_of[k]: v for k, v in scores.items()},
        names,
        common.SETUP.results_dir / "paper_exp3_verbalizer.png",
        f"Exp. 3: verbalizer shift on {common.model_name()} (rows: source, columns: target)",
        columns=4,
    )
    path = write_json(
        "paper_exp3_verbalizer",
        {
            "description": f"Verbalizer-shift source selection, {common.model_name()}, VADER snippets",
            "paper": PAPER,
            "sketch_id": spec.sketch_id,
            "tasks": names,
            "verbalizers": verbalizers(),
            "quick": common.SETUP.quick,
            "template": TEMPLATE,
            "prompts": {
                "pool": pool_size,
                "held_out": len(held_out),
                "min_abs_score": MIN_ABS_SCORE,
                "positive_share": float(positive.double().mean()),
            },
            "lora": dataclasses.asdict(settings),
            "seeds": list(SEEDS),
            "held_out_nll": ground_truth.as_dict(),
            "transfer_per_seed": [matrix_rows(t) for t in transfers],
            "best_source_seed_agreement": seed_agreement,
            "scores": {k: matrix_rows(v) for k, v in scores.items()},
            "selection": {k: s.as_dict() for k, s in selection.items()},
            "sketch_stderr": matrix_rows(sketch.stderr),
            "bootstrap": bootstrap,
            "selections": selections,
            "trust": trust,
            "regimes": regimes,
            "official": official_recommendations,
        },
        started,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
