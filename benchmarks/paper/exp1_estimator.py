"""Experiment 1: the FisherSketch estimator against the exact Gram form on a real LM.

Twelve natural domains, 2,000 scored tokens each (documents cut to 64 tokens), SmolLM2-135M-Instruct.
For every pair of domains: the sketch's A, S_a, S_e, ρ (m = 4096, default estimator, seed 0) and the
exact values from the Gram form mean_{t,s} (a_t·a_s)² (e_t·e_s)² (K = 49,152, no approximation).
The exact norms use the same split-sample pairs as the sketch (tokens of documents of different
parity), so the difference is the random-feature error alone; the plug-in (all pairs) and
U-statistic (t ≠ s) norms are reported too. Paper (ViT-B/16): Spearman 0.97 (A), 0.95 (ρ).

    python -m benchmarks.paper.exp1_estimator
"""

from __future__ import annotations

import functools
import time

import torch
from scipy import stats
from tqdm import tqdm

from benchmarks.domains import natural_domains
from benchmarks.paper import common
from benchmarks.paper.report import (
    heatmaps,
    matrix_rows,
    print_table,
    scatter_panels,
    write_json,
)
from fisherhub.core.batch import HeadBatch
from fisherhub import SketchState, alignment_matrix
from fisherhub.core.exact import gram_inner_products
from fisherhub.core.geometry import DECOMPOSITION, GEOMETRIES

QUANTITIES = DECOMPOSITION
LABELS = {q: GEOMETRIES[q].key for q in QUANTITIES}
NORMS = ("split", "u_statistic", "plugin")
CHECK_TOKENS = 200  # tokens per task for the float64 cross-check of the float32 Gram products


def exact_matrices(blocks: dict, n: int, norm: str) -> dict[str, torch.Tensor]:
    """A, S_a, S_e, ρ from the Gram block means, with the self inner products of kind ``norm``."""
    inner = torch.zeros(3, n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(i, n):
            block = blocks[f"{i}|{j}"]
            inner[:, i, j] = inner[:, j, i] = torch.tensor(block[norm] if i == j else block["cross"])
    diagonal = torch.diagonal(inner, dim1=1, dim2=2)
    cosine = inner / torch.sqrt(diagonal[:, :, None] * diagonal[:, None, :])
    fisher, activation, error = cosine
    return {"fisher": fisher, "activation": activation, "error": error, "coupling": fisher / (activation * error)}


def compare(
    sketch: torch.Tensor, exact: torch.Tensor, stderr: torch.Tensor | None, keep: torch.Tensor | None = None
) -> dict:
    """Spearman, MAE, max error and error-bar coverage over the finite off-diagonal pairs i < j (in ``keep``)."""
    upper = torch.triu(torch.ones_like(exact, dtype=torch.bool), diagonal=1) & ~sketch.isnan()
    upper &= torch.ones_like(upper) if keep is None else keep
    x, y = sketch[upper], exact[upper]
    error = (x - y).abs()
    result = {
        "pairs": int(upper.sum()),
        "spearman": float(stats.spearmanr(x, y).statistic),
        "mae": float(error.mean()),
        "max_abs_error": float(error.max()),
    }
    if stderr is not None:
        sigma = stderr[upper]
        result |= {
            "coverage_1se": float((error <= sigma).double().mean()),
            "coverage_2se": float((error <= 2 * sigma).double().mean()),
            "mean_stderr": float(sigma.mean()),
        }
    return result


def main(argv: list[str] | None = None) -> None:
    common.paper_arguments(__doc__.splitlines()[0], argv=argv)
    started = time.time()
    model, tokenizer = common.load_base_model()
    spec = common.paper_spec(model, tokenizer)
    texts = common.domain_texts(common.NATURAL_DOMAINS, natural_domains)
    names = list(texts)
    captured = common.capture_domains(model, tokenizer, spec, texts, common.domain_split())
    tasks, signatures = captured.inputs, captured.signatures
    # e = softmax(W a) − onehot(y): N×K float32 per task (393 MB at n=2000), kept on disk, two in memory
    errors = functools.lru_cache(maxsize=2)(
        lambda i: common.cached_errors(model, tasks[i], common.SETUP.cache_dir / "errors" / f"{names[i]}.npy")
    )

    # exact Gram blocks, one ledger entry per pair (resumable)
    ledger = common.Ledger(common.SETUP.cache_dir / f"exp1_exact_{spec.sketch_id}.json")
    pairs = [(i, j) for i in range(len(names)) for j in range(i, len(names))]

    def block(i: int, j: int) -> dict:
        activation, error = common.gram_kernels(tasks[i].activations, errors(i), tasks[j].activations, errors(j))
        if i != j:
            return {"cross": common.kernel_means(activation, error)}
        masks = common.self_pair_masks(tasks[i].doc_index)
        return {norm: common.kernel_means(activation, error, masks[norm]) for norm in NORMS}

    blocks = {
        f"{i}|{j}": ledger.get(f"{i}|{j}", lambda i=i, j=j: block(i, j))
        for i, j in tqdm(pairs, desc="exact Gram blocks")
    }

    # float32 Gram products against the library's float64 exact form, on a subset
    subset = [(tasks[i].activations[:CHECK_TOKENS], errors(i)[:CHECK_TOKENS]) for i in (0, 1)]
    reference = gram_inner_products(*subset[0], *subset[1])
    ours = torch.tensor(common.kernel_means(*common.gram_kernels(*subset[0], *subset[1])), dtype=torch.float64)
    float32_check = float(((ours - reference).abs() / reference.abs()).max())

    # cost given (a, e), timed in the same run: one exact cross block, and one task's sketch
    errors_0, errors_1 = errors(0), errors(1)
    start = time.perf_counter()
    common.kernel_means(*common.gram_kernels(tasks[0].activations, errors_0, tasks[1].activations, errors_1))
    exact_pair_seconds = 3 * (time.perf_counter() - start)  # the cross term and both self terms
    start = time.perf_counter()
    SketchState(spec).update(
        HeadBatch(activations=tasks[0].activations, doc_index=tasks[0].doc_index, errors=errors_0)
    ).finalize()
    sketch_seconds = time.perf_counter() - start

    sketch = alignment_matrix(signatures, names)
    exact = {norm: exact_matrices(blocks, len(names), norm) for norm in NORMS}
    comparisons = {
        norm: {
            LABELS[q]: compare(sketch.values[q], exact[norm][q], sketch.stderrs[q] if norm == "split" else None)
            for q in QUANTITIES
        }
        for norm in NORMS
    }

    # ρ is a ratio: where A is within noise of 0 its relative error is large; the pairs with A > 2 se
    significant = sketch.fisher > 2 * sketch.stderr
    comparisons["split"]["rho (A > 2 se)"] = compare(
        sketch.coupling, exact["split"]["coupling"], sketch.coupling_stderr, significant
    )
    rows = [
        [
            LABELS.get(q, q),
            c["pairs"],
            c["spearman"],
            c["mae"],
            c["max_abs_error"],
            c["coverage_1se"],
            c["coverage_2se"],
            {"fisher": 0.97, "coupling": 0.95}.get(q),
        ]
        for q, c in zip((*QUANTITIES, "rho (A > 2 se)"), comparisons["split"].values())
    ]
    print_table(
        ["quantity", "pairs", "Spearman", "MAE", "max |err|", "cover 1se", "cover 2se", "paper Spearman"],
        rows,
        title=f"Experiment 1: sketch (m={spec.m}) vs exact Gram form, split-sample norms, "
        f"{len(names)} domains x {len(tasks[0])} tokens",
    )
    print_table(
        ["norm", "Spearman A", "MAE A", "Spearman rho", "MAE rho"],
        [
            [norm, c["A"]["spearman"], c["A"]["mae"], c["rho"]["spearman"], c["rho"]["mae"]]
            for norm, c in comparisons.items()
        ],
        title="Against other exact norms",
    )
    print(
        f"exact Gram, one pair at n={len(tasks[0])} (3 blocks, K={spec.vocab_size:,}): {exact_pair_seconds:.1f} s; "
        f"sketch of one task given (a, e): {sketch_seconds:.1f} s "
        f"(pair: {exact_pair_seconds / (2 * sketch_seconds):.1f}x faster; paper: 89x)"
    )

    results = common.SETUP.results_dir
    heatmaps(
        {f"exact {LABELS[q]}": exact["split"][q] for q in QUANTITIES}
        | {f"sketch {LABELS[q]}": sketch.values[q] for q in QUANTITIES},
        names,
        results / "paper_exp1_heatmaps.png",
        f"Exp. 1: exact (top) vs FisherSketch m={spec.m} (bottom), SmolLM2-135M, {len(names)} domains",
        columns=4,
    )
    upper = torch.triu(torch.ones(len(names), len(names), dtype=torch.bool), diagonal=1)
    scatter_panels(
        {LABELS[q]: (exact["split"][q][upper], sketch.values[q][upper], sketch.stderrs[q][upper]) for q in QUANTITIES},
        results / "paper_exp1_scatter.png",
        "Exp. 1: sketch ± stderr vs exact (split-sample norms), all domain pairs",
        "exact",
        "sketch",
    )
    path = write_json(
        "paper_exp1_estimator",
        {
            "description": "FisherSketch vs exact Gram form on SmolLM2-135M-Instruct, natural domains",
            "spec": spec.to_dict(),
            "sketch_id": spec.sketch_id,
            "domains": names,
            "tokens_per_domain": [len(t) for t in tasks],
            "documents_per_domain": [s.num_documents for s in signatures],
            "paper": {"spearman_A": 0.97, "spearman_rho": 0.95, "speedup_at_n2000": 89},
            "comparisons": comparisons,
            "timing_seconds": {
                "exact_pair": exact_pair_seconds,
                "sketch_one_task": sketch_seconds,
                "speedup_pair": exact_pair_seconds / (2 * sketch_seconds),
            },
            "float32_gram_max_relative_difference_vs_float64": float32_check,
            "sketch": {q: matrix_rows(sketch.values[q]) for q in QUANTITIES}
            | {f"{q}_stderr": matrix_rows(sketch.stderrs[q]) for q in QUANTITIES},
            "exact": {norm: {q: matrix_rows(m[q]) for q in QUANTITIES} for norm, m in exact.items()},
        },
        started,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
