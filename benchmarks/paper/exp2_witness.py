"""Experiment 2: the non-identifiability witness (paper Theorem 3.2) on a real LM.

The same prompts (the first four documents of each of the twelve natural domains, two prompt sets
P1 = documents 0-1 and P2 = documents 2-3), SmolLM2-135M-Instruct's real head inputs a, and two
label blocks on disjoint halves of the vocabulary: block "low" predicts with a softmax masked to
token ids [0, K/2), block "high" with one masked to [K/2, K); the label y is drawn from the masked
distribution (seeded counter-based uniforms), so e = p_block − onehot(y) lives on that half.
Activation-only similarity (S_a) and linear CKA see identical activations and say 1; the Fisher
alignment of the two blocks is exactly 0 (e·e' = 0 for every pair of tokens), and the sketch must
put it at 0 within its error bars.

    python -m benchmarks.paper.exp2_witness
"""

from __future__ import annotations

import time

import numpy as np
import torch
from tqdm import tqdm

from benchmarks.domains import natural_domains
from benchmarks.paper import common
from benchmarks.paper.baselines import feature_cka_matrix
from benchmarks.paper.report import heatmaps, matrix_rows, print_table, write_json
from fisherhub.core.batch import HeadBatch
from fisherhub import SketchState, alignment_matrix
from fisherhub.lm.head import output_head
from fisherhub.core.hashing import uniforms
from fisherhub.core.exact import linear_cka

PROMPT_SETS = {"P1": (0, 1), "P2": (2, 3)}  # document indices taken from every domain
#: ``--quick``: a quick run's documents are 5 tokens, so each set takes 8 of every domain (a signature needs 20)
QUICK_PROMPT_SETS = {"P1": tuple(range(8)), "P2": tuple(range(8, 16))}
BLOCKS = ("low", "high")
LABEL_STREAM = 1000  # hash stream of the witness labels (outside the library's streams)
DOCS_PER_DOMAIN = 1000  # global doc index = domain number * 1000 + document (keeps the parity)


def prompt_set(tasks: list[common.HeadInputs], documents: tuple[int, ...]) -> common.HeadInputs:
    """The chosen documents of every domain, with globally unique document indices."""
    parts = []
    for number, task in enumerate(tasks):
        keep = torch.isin(task.doc_index, torch.tensor(documents))
        part = task.select(keep)
        parts.append(common.HeadInputs(part.activations, part.targets, part.doc_index + number * DOCS_PER_DOMAIN))
    return common.HeadInputs(
        *(torch.cat(column) for column in zip(*((p.activations, p.targets, p.doc_index) for p in parts)))
    )


def block_errors(model, activations: torch.Tensor, block: str, stream: int) -> tuple[torch.Tensor, torch.Tensor]:
    """e = p_block − onehot(y), y ~ p_block (softmax masked to one half of the vocabulary), (N, K) float32."""
    with torch.no_grad():
        logits = output_head(model)(activations).float()
    half = logits.shape[1] // 2
    columns = slice(0, half) if block == "low" else slice(half, logits.shape[1])
    probabilities = torch.softmax(logits[:, columns], dim=-1)
    u = uniforms(0, stream, np.arange(len(activations), dtype=np.uint64))
    cumulative = probabilities.double().cumsum(dim=1)
    labels = torch.searchsorted(cumulative, (u * cumulative[:, -1])[:, None], right=True).squeeze(1)
    labels = labels.clamp_max(probabilities.shape[1] - 1)
    errors = torch.zeros_like(logits)
    errors[:, columns] = probabilities
    errors[torch.arange(len(labels)), labels + columns.start] -= 1.0
    return errors, labels + columns.start


def main(argv: list[str] | None = None) -> None:
    common.paper_arguments(__doc__.splitlines()[0], argv=argv)
    started = time.time()
    model, tokenizer = common.load_base_model()
    spec = common.paper_spec(model, tokenizer)
    texts = common.domain_texts(common.NATURAL_DOMAINS, natural_domains)
    domains = common.capture_domains(model, tokenizer, spec, texts, common.domain_split()).inputs
    prompt_sets = QUICK_PROMPT_SETS if common.SETUP.quick else PROMPT_SETS
    prompts = {label: prompt_set(domains, documents) for label, documents in prompt_sets.items()}

    names, activations, errors, doc_indices, signatures = [], [], [], [], []
    for stream, (block, (label, inputs)) in enumerate(
        ((b, p) for b in BLOCKS for p in prompts.items()), start=LABEL_STREAM
    ):
        task_errors, _ = block_errors(model, inputs.activations, block, stream)
        state = SketchState(spec).update(
            HeadBatch(activations=inputs.activations, doc_index=inputs.doc_index, errors=task_errors)
        )
        signatures.append(state.finalize({"dataset": f"{block}-{label}"}))
        names.append(f"{block}-{label}")
        activations.append(inputs.activations)
        errors.append(task_errors)
        doc_indices.append(inputs.doc_index)

    # exact Gram form over the full vocabulary, split-sample self terms as in the sketch
    n = len(names)
    inner = torch.zeros(3, n, n, dtype=torch.float64)
    for i in tqdm(range(n), desc="exact Gram"):
        for j in range(i, n):
            kernels = common.gram_kernels(activations[i], errors[i], activations[j], errors[j])
            mask = common.self_pair_masks(doc_indices[i])["split"] if i == j else None
            inner[:, i, j] = inner[:, j, i] = torch.tensor(common.kernel_means(*kernels, mask))
    diagonal = torch.diagonal(inner, dim1=1, dim2=2)
    exact = inner / torch.sqrt(diagonal[:, :, None] * diagonal[:, None, :])
    sketch = alignment_matrix(signatures, names)
    paired_cka = {label: linear_cka(prompts[label].activations, prompts[label].activations) for label in prompt_sets}
    feature_cka = feature_cka_matrix(activations)

    rows, pairs = [], {}
    for i in range(n):
        for j in range(i + 1, n):
            same_prompts = names[i].split("-")[1] == names[j].split("-")[1]
            pair = {
                "exact_A": float(exact[0, i, j]),
                "sketch_A": float(sketch.fisher[i, j]),
                "sketch_A_stderr": float(sketch.stderr[i, j]),
                "within_2se_of_exact": bool(abs(sketch.fisher[i, j] - exact[0, i, j]) <= 2 * sketch.stderr[i, j]),
                "exact_S_a": float(exact[1, i, j]),
                "sketch_S_a": float(sketch.activation[i, j]),
                "exact_S_e": float(exact[2, i, j]),
                "sketch_S_e": float(sketch.error[i, j]),
                "linear_cka": paired_cka[names[i].split("-")[1]] if same_prompts else float(feature_cka[i, j]),
                "cka_form": "paired (same tokens)" if same_prompts else "feature-level",
            }
            pairs[f"{names[i]} vs {names[j]}"] = pair
            rows.append(
                [
                    f"{names[i]} vs {names[j]}",
                    pair["exact_A"],
                    f"{pair['sketch_A']:.3f} ± {pair['sketch_A_stderr']:.3f}",
                    pair["sketch_S_a"],
                    pair["linear_cka"],
                    pair["exact_S_e"],
                    pair["within_2se_of_exact"],
                ]
            )
    print_table(
        ["pair", "exact A", "sketch A ± se", "sketch S_a", "linear CKA", "exact S_e", "A within 2se"],
        rows,
        title=f"Experiment 2: disjoint-label witness on SmolLM2-135M ({len(prompts['P1'])} / "
        f"{len(prompts['P2'])} tokens per prompt set, m={spec.m})",
    )

    heatmaps(
        {
            "exact A": exact[0],
            "sketch A": sketch.fisher,
            "sketch S_a (activation-only)": sketch.activation,
            "sketch S_e": sketch.error,
        },
        names,
        common.SETUP.results_dir / "paper_exp2_witness.png",
        "Exp. 2: same prompts, disjoint label blocks (low/high half of the vocabulary)",
        columns=4,
        limits=(-0.1, 1.1),
    )
    path = write_json(
        "paper_exp2_witness",
        {
            "description": "Disjoint-label witness on SmolLM2-135M-Instruct head inputs",
            "spec": spec.to_dict(),
            "sketch_id": spec.sketch_id,
            "tasks": names,
            "tokens": {label: len(p) for label, p in prompts.items()},
            "paper": "Theorem 3.2: activation-only metrics say 1, Fisher alignment 0, self-alignment 1",
            "pairs": pairs,
            "exact": {
                "fisher": matrix_rows(exact[0]),
                "activation": matrix_rows(exact[1]),
                "error": matrix_rows(exact[2]),
            },
            "sketch": {
                "fisher": matrix_rows(sketch.fisher),
                "stderr": matrix_rows(sketch.stderr),
                "activation": matrix_rows(sketch.activation),
                "error": matrix_rows(sketch.error),
            },
        },
        started,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
