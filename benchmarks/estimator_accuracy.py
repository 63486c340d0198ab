"""Sketch vs exact Fisher alignment on synthetic tasks, for every estimator, m and reflection choice.

For each configuration (benchmarks/synthetic.py: one softmax head, tasks with graded label overlap),
the exact A, S_a, S_e and ρ of every task pair come from ``fisherhub.core.exact`` (Gram form; norms as
U-statistics, ``exclude_self_pairs=True``, unbiased like the sketch's split-sample norm). Each variant
(estimator × m × Householder reflection on/off, pilot mean = mean activation of a pilot sample) sketches
every task with ``SketchState`` and compares with ``alignment_matrix``. Reported per variant, averaged over
sketch seeds: Spearman and MAE of A, S_a, S_e, ρ over all pairs; Spearman of A on pairs with exact
A ≥ 0.02; for each sketch (A, S_a, S_e, each with its own R̂) the fitted c in sd ≈ c √(R̂_i R̂_j / m)
(RMS of (sketch − exact)/√(R̂_i R̂_j / m) over pairs and seeds) and the coverage of ±2 stderr with that c
and with the c the library ships (``STDERR_CONSTANTS``; NaN for an uncalibrated estimator). ρ is ranked
where it is reported (S_a and S_e above 2 stderr; also where Â is above 2 stderr), once with the shipped
c and once with the run's own fitted c. Per configuration, estimator and reflection, the c of each sketch
(RMS over m and seeds) is written as ``stderr_constants_per_config``. The largest over configurations is
written as ``stderr_constants``, and as ready-to-paste ``STDERR_CONSTANTS`` entries (rounded up to one
decimal, with the configuration that set each) in ``calibration_entries``, in the form of
``fisherhub/core/calibration.json``. The "spread" configurations spread S_a as on a real LM; "heavy-tails" scales
each token's activation by a log-normal factor, "short-docs" groups tokens into 10-token documents that share
their context (the exact norms are then the split-sample ones, documents of even index against odd, like the
sketch's), "strong-coupling" makes the context move the activation far and pick the label half sharply, so ρ
departs from 1. ``bound_comparison`` sets the default estimator's Spearman of A (mean and per-seed range) beside
the Gaussian-projection reference (mean, 10th–90th percentile) for every configuration and m, with the default's
fitted ĉ_A (1 for the Gaussian projection) and R̂ as the measured reasons of a gap.
Per configuration and m, ``random_projection_reference`` scores a Gaussian random projection of the exact
Fisher matrices with exact norms (simulated from their Gram matrix): what a sketch of m numbers, linear in F
and fixed before the data, can be expected to reach on these tasks.

    python -m benchmarks.estimator_accuracy            # full run (≈ 40 min on 2 shared cores, estimated from --reduced)
    python -m benchmarks.estimator_accuracy --reduced  # every configuration at m = 4096, at most 3 seeds
    python -m benchmarks.estimator_accuracy --quick    # small smoke run (writes to the temp dir)
    python -m benchmarks.estimator_accuracy --structured [--seeds 3]   # the structured-vocabulary design

Writes benchmarks/results/estimator_accuracy.{json,png}; ``--structured`` writes
benchmarks/results/estimator_accuracy_structured.{json,png}: tasks sharing one softmax head whose label blocks
are contiguous ranges of ``STRUCTURED.block`` tokens at offsets from identical to disjoint, several of them
multiples of the fold width Q = m, heavy-tailed activation norms (log-normal), 10-token documents and strong
coupling (the token's context picks which half of the block is boosted and shifts the activation). Every
estimator (reflection on) and the paper author's package (``fishersketch`` 0.2.1, run in its own
interpreter on the same (a, e) streams) are scored per seed against the exact Gram form with split-sample
norms: Spearman of A and S_e, MAE of S_e, refusals, clamped norms, and ρ with and without shrinkage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from tqdm import tqdm


from benchmarks.synthetic import (
    SyntheticConfig,
    SyntheticTask,
    add_output_arguments,
    machine_info,
    make_tasks,
    pilot_activations,
    sketch_task,
    write_results,
)

from fisherhub import Signature, SketchSpec, alignment_matrix
from fisherhub.core.alignment import (
    AlignmentMatrix,
    STDERR_CONSTANTS,
    StderrConstants,
    feature_stderr,
    sketch_means,
)
from fisherhub.core.registry import DEFAULT_ESTIMATOR, ESTIMATORS, PREVIOUS_DEFAULT_ESTIMATOR
from fisherhub.core.errors import TooFewDocumentsError
from fisherhub.core.exact import gram_inner_products
from benchmarks.paper.official import official_python
from fisherhub.testing.oracles import random_projection_reference, spearman, upper_pairs
from fisherhub.core.geometry import DECOMPOSITION, GEOMETRIES, HEAD_SCORES, SIGNIFICANCE_Z

QUANTITIES = DECOMPOSITION  # A, S_a, S_e, ρ
SKETCH_OF = {q: GEOMETRIES[q].sketch for q in HEAD_SCORES}  # StderrConstants field
SYMBOLS = {q: GEOMETRIES[q].key for q in QUANTITIES}
A_THRESHOLD = 0.02


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig:
    """One synthetic configuration and the sketch settings tried on it."""

    name: str
    synthetic: SyntheticConfig
    sketch_sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    pilot_tokens_per_task: int = 64


#: the synthetic knobs of the "spread" configurations: a weaker shared mean and larger task offsets spread the
#: exact S_a over 0.07–0.96 (median 0.65), as on a real LM (SmolLM2-135M, benchmarks/paper/exp1_estimator.py:
#: 0.17–0.93, median 0.61); with the defaults S_a is 0.82–0.99, where its c is several times smaller.
SPREAD_ACTIVATIONS = {"shared_mean_norm": 1.0, "task_offset_norm": 3.0}
FULL_CONFIGS = (
    BenchmarkConfig(
        name="K8192-d256",
        synthetic=SyntheticConfig(vocab_size=8192, d=256, num_tasks=14, tokens_per_task=1000, seed=1),
        sketch_sizes=(1024, 4096, 8192),
        seeds=tuple(range(8)),
    ),
    BenchmarkConfig(
        name="K50257-d576",
        synthetic=SyntheticConfig(vocab_size=50257, d=576, num_tasks=12, tokens_per_task=500, seed=2),
        sketch_sizes=(1024, 4096, 8192),
        seeds=(0, 1),
    ),
    BenchmarkConfig(
        name="spread-K8192-d256",
        synthetic=SyntheticConfig(
            vocab_size=8192, d=256, num_tasks=14, tokens_per_task=1000, seed=3, **SPREAD_ACTIVATIONS
        ),
        sketch_sizes=(1024, 4096, 8192),
        seeds=tuple(range(4)),
    ),
)
#: the knobs of the configurations of issue 14 (each its own configuration, on the K8192-d256 sizes)
HEAVY_TAILS = {"norm_sigma": 0.75}
SHORT_DOCUMENTS = {"document_length": 10}
STRONG_COUPLING = {
    "separate_context_directions": True,
    "context_offset_norm": 3.0,
    "shared_mean_norm": 1.0,
    "label_boost": 12.0,
}
FULL_CONFIGS += tuple(
    BenchmarkConfig(
        name=f"{name}-K8192-d256",
        synthetic=SyntheticConfig(vocab_size=8192, d=256, num_tasks=14, tokens_per_task=1000, seed=seed, **knobs),
        sketch_sizes=(1024, 4096, 8192),
        seeds=tuple(range(4)),
    )
    for name, seed, knobs in (
        ("heavy-tails", 4, HEAVY_TAILS),
        ("short-docs", 5, SHORT_DOCUMENTS),
        ("strong-coupling", 6, STRONG_COUPLING),
    )
)
#: ``--reduced``: every full configuration at m = 4096 with at most 3 seeds (when the full run does not fit)
REDUCED_CONFIGS = tuple(dataclasses.replace(c, sketch_sizes=(4096,), seeds=c.seeds[:3]) for c in FULL_CONFIGS)
QUICK_CONFIGS = (  # seconds: a smoke run of every code path, not a measurement
    BenchmarkConfig(
        name="quick-K1024-d32",
        synthetic=SyntheticConfig(vocab_size=1024, d=32, num_tasks=5, tokens_per_task=160, seed=1),
        sketch_sizes=(256, 1024),
        seeds=(0,),
    ),
    BenchmarkConfig(
        name="quick-spread-K1024-d32",
        synthetic=SyntheticConfig(
            vocab_size=1024, d=32, num_tasks=5, tokens_per_task=160, seed=1, **SPREAD_ACTIVATIONS
        ),
        sketch_sizes=(256,),
        seeds=(0,),
    ),
    BenchmarkConfig(
        name="quick-short-docs-heavy-tails-K1026-d32",  # K not a multiple of the permutation chunk
        synthetic=SyntheticConfig(
            vocab_size=1026, d=32, num_tasks=5, tokens_per_task=160, seed=2, **SHORT_DOCUMENTS, **HEAVY_TAILS
        ),
        sketch_sizes=(256,),
        seeds=(0, 1),
    ),
)


@dataclasses.dataclass(frozen=True)
class Variant:
    estimator: str
    m: int
    reflection: bool

    @property
    def label(self) -> str:
        return variant_label(self.estimator, self.reflection)


def variant_label(estimator: str, reflection: bool) -> str:
    return f"{estimator}{'+refl' if reflection else ''}"


def exact_matrices(tasks: list[SyntheticTask]) -> dict[str, torch.Tensor]:
    """Exact A, S_a, S_e, ρ (n × n, float64) by the Gram form, with the norms the sketch's split-sample norm
    estimates (``exact_norms``), and each task's exact self-dominance R = ‖F̂‖² / that norm (of the joint
    kernel): what the sketch's R̂ estimates."""
    n = len(tasks)
    norms, dominance = zip(*(exact_norms(t) for t in tqdm(tasks, desc="exact norms", leave=False)))
    norms = torch.stack(norms)
    cosine = torch.ones(3, n, n, dtype=torch.float64)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    for i, j in tqdm(pairs, desc="exact pairs", leave=False):
        cross = gram_inner_products(tasks[i].activations, tasks[i].errors, tasks[j].activations, tasks[j].errors)
        cosine[:, i, j] = cosine[:, j, i] = cross / torch.sqrt(norms[i] * norms[j])
    fisher, activation, error = cosine
    return {
        "fisher": fisher,
        "activation": activation,
        "error": error,
        "coupling": fisher / (activation * error),
        "self_dominance": torch.stack(dominance),
    }


def exact_norms(task: SyntheticTask) -> tuple[torch.Tensor, torch.Tensor]:
    """(3,) squared norms of the joint, activation and error kernels, and R of the joint one.

    One token per document: U-statistics (all token pairs but t = s, unbiased like the split-sample norm).
    Longer documents: the exact split-sample inner products (documents of even index against odd), like the
    sketch's, and R = ‖F̂‖² / that norm.
    """
    a, e, documents = task.activations, task.errors, task.doc_index
    if len(documents.unique()) == len(documents):
        norms = gram_inner_products(a, e, a, e, exclude_self_pairs=True)
        return norms, self_dominance(task, norms[0])
    even, odd = documents % 2 == 0, documents % 2 == 1
    norms = gram_inner_products(a[even], e[even], a[odd], e[odd])
    return norms, gram_inner_products(a, e, a, e)[0] / norms[0]


def self_dominance(task: SyntheticTask, u_statistic: torch.Tensor) -> torch.Tensor:
    """‖F̂‖² / U for the joint kernel k(t, s) = (a_t·a_s)² (e_t·e_s)²: ‖F̂‖² = (n(n−1) U + Σ_t k(t, t)) / n²."""
    n = task.activations.shape[0]
    self_pairs = (task.activations.double().pow(2).sum(1) * task.errors.double().pow(2).sum(1)).pow(2).sum()
    return (n * (n - 1) * u_statistic + self_pairs) / (n * n * u_statistic)


@dataclasses.dataclass
class PairRecords:
    """Per-pair sketch values, error units u = √(R̂_i R̂_j / m) and the library's feature-level floor of the
    standard error (``feature_stderr``), stacked over seeds."""

    sketch: dict[str, list[torch.Tensor]] = dataclasses.field(default_factory=lambda: {q: [] for q in QUANTITIES})
    unit: dict[str, list[torch.Tensor]] = dataclasses.field(default_factory=lambda: {q: [] for q in SKETCH_OF})
    floor: dict[str, list[torch.Tensor]] = dataclasses.field(default_factory=lambda: {q: [] for q in SKETCH_OF})
    dominance: list[torch.Tensor] = dataclasses.field(default_factory=list)  # R̂ of the joint sketch, per task
    seconds: list[float] = dataclasses.field(default_factory=list)
    failures: list[str] = dataclasses.field(default_factory=list)


def record_seed(records: PairRecords, signatures: list[Signature]) -> None:
    matrix = alignment_matrix(signatures, constants=StderrConstants(joint=1.0, activation=1.0, error=1.0))
    fisher, activation, error = matrix.fisher, matrix.activation, matrix.error
    values = {"fisher": fisher, "activation": activation, "error": error, "coupling": fisher / (activation * error)}
    for quantity, value in values.items():
        records.sketch[quantity].append(upper_pairs(value))
    dominance = torch.stack([s.self_dominances() for s in signatures], dim=1)  # (3, n) in SKETCHES order
    records.dominance.append(dominance[0])
    means, norms = sketch_means(signatures)
    m = signatures[0].spec.m
    for k, quantity in enumerate(SKETCH_OF):
        records.unit[quantity].append(upper_pairs(torch.sqrt(dominance[k][:, None] * dominance[k][None, :] / m)))
        records.floor[quantity].append(upper_pairs(feature_stderr(means[k], norms[k], values[quantity])))


def library_stderrs(records: PairRecords, quantity: str, constants: StderrConstants) -> list[torch.Tensor]:
    """Per seed: the library's stderr with these constants, max(c u, feature-level floor)."""
    c = getattr(constants, SKETCH_OF[quantity])
    return [torch.maximum(c * unit, floor) for unit, floor in zip(records.unit[quantity], records.floor[quantity])]


def significant(records: PairRecords, quantity: str, constants: StderrConstants) -> list[torch.Tensor]:
    """Per seed: the pairs whose sketch value exceeds ``SIGNIFICANCE_Z`` of the library's stderr."""
    stderrs = library_stderrs(records, quantity, constants)
    return [value > SIGNIFICANCE_Z * stderr for value, stderr in zip(records.sketch[quantity], stderrs)]


def seed_mean_scores(
    records: PairRecords, exact: torch.Tensor, quantity: str, keeps: list[torch.Tensor]
) -> tuple[float, float]:
    """Spearman and MAE of one quantity against the exact value on the kept pairs, each averaged over seeds."""
    sketches = records.sketch[quantity]
    ranks = [spearman(sketch[keep], exact[keep]) for sketch, keep in zip(sketches, keeps)]
    errors = [float((sketch[keep] - exact[keep]).abs().mean()) for sketch, keep in zip(sketches, keeps)]
    return sum(ranks) / len(ranks), sum(errors) / len(errors)


def standardized_errors(records: PairRecords, exact_pairs: dict[str, torch.Tensor], quantity: str) -> torch.Tensor:
    """(sketch − exact) / √(R̂_i R̂_j / m) for every pair and seed."""
    runs = len(records.sketch[quantity])
    return (torch.cat(records.sketch[quantity]) - exact_pairs[quantity].repeat(runs)) / torch.cat(
        records.unit[quantity]
    )


def library_z(
    records: PairRecords, exact_pairs: dict[str, torch.Tensor], quantity: str, constants: StderrConstants
) -> torch.Tensor:
    """(sketch − exact) / the library's stderr, max(c u, feature-level floor), for every pair and seed."""
    stderr = torch.cat(library_stderrs(records, quantity, constants))
    runs = len(records.sketch[quantity])
    return (torch.cat(records.sketch[quantity]) - exact_pairs[quantity].repeat(runs)) / stderr


def coupling_summary(
    records: PairRecords, exact_pairs: dict[str, torch.Tensor], constants: StderrConstants
) -> dict[str, float]:
    """ρ where ``alignment_matrix`` reports it with these constants (S_a and S_e significant), and where Â
    is significant too: Spearman, MAE and the fraction of pairs."""
    reported = [
        a & e for a, e in zip(significant(records, "activation", constants), significant(records, "error", constants))
    ]
    confident = [r & f for r, f in zip(reported, significant(records, "fisher", constants))]
    spearman_rho, mae_rho = seed_mean_scores(records, exact_pairs["coupling"], "coupling", reported)
    return {
        "spearman_rho": spearman_rho,
        "mae_rho": mae_rho,
        "rho_defined_fraction": float(torch.cat(reported).double().mean()),
        "spearman_rho_A_significant": seed_mean_scores(records, exact_pairs["coupling"], "coupling", confident)[0],
        "rho_A_significant_fraction": float(torch.cat(confident).double().mean()),
    }


def summarize(
    records: PairRecords, exact_pairs: dict[str, torch.Tensor], shipped: StderrConstants | None
) -> dict[str, float]:
    """Spearman / MAE of A, S_a, S_e (mean over seeds); per sketch the fitted c and the ±2 stderr coverage
    with it and with the ``shipped`` c; ρ's scores with the shipped c (NaN without) and with the fitted c."""
    summary: dict[str, float] = {}
    fitted = {}
    for quantity, sketch_name in SKETCH_OF.items():
        symbol = SYMBOLS[quantity]
        all_pairs = [torch.ones_like(sketch, dtype=torch.bool) for sketch in records.sketch[quantity]]
        summary[f"spearman_{symbol}"], summary[f"mae_{symbol}"] = seed_mean_scores(
            records, exact_pairs[quantity], quantity, all_pairs
        )
        summary[f"spearman_{symbol}_per_seed"] = [
            spearman(sketch, exact_pairs[quantity]) for sketch in records.sketch[quantity]
        ]
        ratio = standardized_errors(records, exact_pairs, quantity)
        fitted[sketch_name] = summary[f"c_{symbol}"] = float(ratio.pow(2).mean().sqrt())
        summary[f"coverage2_{symbol}"] = float((ratio.abs() <= 2 * summary[f"c_{symbol}"]).double().mean())
        summary[f"coverage2_{symbol}_shipped_c"] = (
            math.nan if shipped is None else float((ratio.abs() <= 2 * getattr(shipped, sketch_name)).double().mean())
        )
        summary[f"coverage2_{symbol}_library"] = (
            math.nan
            if shipped is None
            else float((library_z(records, exact_pairs, quantity, shipped).abs() <= 2).double().mean())
        )
        summary[f"mean_unit_{symbol}"] = float(torch.cat(records.unit[quantity]).mean())
    strong = exact_pairs["fisher"] >= A_THRESHOLD
    summary["spearman_A_strong"] = seed_mean_scores(
        records, exact_pairs["fisher"], "fisher", [strong] * len(records.sketch["fisher"])
    )[0]
    summary["num_pairs"] = len(exact_pairs["fisher"])
    summary["num_strong_pairs"] = int(strong.sum())
    with_fitted = coupling_summary(records, exact_pairs, StderrConstants(**fitted))
    summary.update(coupling_summary(records, exact_pairs, shipped) if shipped else dict.fromkeys(with_fitted, math.nan))
    summary.update({f"{key}_fitted_c": value for key, value in with_fitted.items()})
    summary["sketch_seconds_per_seed"] = sum(records.seconds) / len(records.seconds)
    summary["mean_self_dominance_joint"] = float(torch.cat(records.dominance).mean())
    return summary


def run_config(config: BenchmarkConfig) -> dict:
    started = time.perf_counter()
    head, tasks = make_tasks(config.synthetic)
    pilot_mean = pilot_activations(head, config.pilot_tokens_per_task).mean(dim=0)
    generate_seconds = time.perf_counter() - started
    started = time.perf_counter()
    exact = exact_matrices(tasks)
    exact_seconds = time.perf_counter() - started
    exact_pairs = {q: upper_pairs(exact[q]) for q in QUANTITIES}
    variants = [Variant(e, m, r) for e in ESTIMATORS for m in config.sketch_sizes for r in (False, True)]
    results = []
    for variant in tqdm(variants, desc=config.name):
        records = PairRecords()
        for seed in config.seeds:
            spec = SketchSpec(
                d=config.synthetic.d,
                vocab_size=config.synthetic.vocab_size,
                m=variant.m,
                seed=seed,
                estimator=variant.estimator,
            )
            spec = spec.with_reflection(pilot_mean if variant.reflection else None)
            started = time.perf_counter()
            try:
                signatures = [sketch_task(task, spec) for task in tasks]
            except TooFewDocumentsError as error:  # a non-positive split-sample norm: counted, not fatal
                records.failures.append(f"seed {seed}: {error}")
                continue
            records.seconds.append(time.perf_counter() - started)
            record_seed(records, signatures)
        succeeded = bool(records.seconds)
        shipped = STDERR_CONSTANTS.get((variant.estimator, variant.reflection))
        results.append(
            {
                **dataclasses.asdict(variant),
                "failures": records.failures,
                "seeds_succeeded": len(records.seconds),
                "summary": summarize(records, exact_pairs, shipped) if succeeded else None,
                "sketch_A_first_seed": records.sketch["fisher"][0].tolist() if succeeded else None,
            }
        )
    return {
        "name": config.name,
        "synthetic": dataclasses.asdict(config.synthetic),
        "seeds": list(config.seeds),
        "pilot_tokens": config.pilot_tokens_per_task * config.synthetic.num_tasks,
        "exact_pairs": {SYMBOLS[q]: v.tolist() for q, v in exact_pairs.items()},
        "exact_self_dominance": exact["self_dominance"].tolist(),
        "random_projection_reference": {
            str(m): random_projection_reference(exact, m, threshold=A_THRESHOLD) for m in config.sketch_sizes
        },
        "generate_seconds": generate_seconds,
        "exact_seconds": exact_seconds,
        "variants": results,
    }


def succeeded(variant: dict) -> bool:
    """At least one seed sketched every task (no non-positive split-sample norm)."""
    return variant["summary"] is not None


def config_constants(config: dict) -> dict[tuple[str, bool], StderrConstants]:
    """c of each sketch per (estimator, reflection) on one configuration: the RMS over m of the per-run
    fitted c, weighted by the sketched seeds."""
    runs: dict[tuple[str, bool], list[dict]] = {}
    for variant in filter(succeeded, config["variants"]):
        runs.setdefault((variant["estimator"], variant["reflection"]), []).append(variant)

    def pooled(variants: list[dict], quantity: str) -> float:
        key = f"c_{SYMBOLS[quantity]}"
        total = sum(v["seeds_succeeded"] for v in variants)
        return math.sqrt(sum(v["summary"][key] ** 2 * v["seeds_succeeded"] for v in variants) / total)

    return {
        key: StderrConstants(**{SKETCH_OF[q]: pooled(variants, q) for q in SKETCH_OF}) for key, variants in runs.items()
    }


def pooled_constants(
    per_config: list[dict[tuple[str, bool], StderrConstants]],
) -> dict[tuple[str, bool], StderrConstants]:
    """The c to ship: for each sketch the largest per-configuration c, since c differs between regimes (S_a's
    most: small where S_a ≈ 1)."""
    keys = {key for constants in per_config for key in constants}
    return {
        key: StderrConstants(
            **{name: max(getattr(c[key], name) for c in per_config if key in c) for name in SKETCH_OF.values()}
        )
        for key in keys
    }


def calibration_entries(per_config: dict[str, dict[tuple[str, bool], StderrConstants]], command: str) -> list[dict]:
    """Entries of ``fisherhub/core/calibration.json``: per (estimator, reflection) each c is the largest over
    the configurations, rounded up to one decimal, and ``fitted_by`` names the run and the configuration
    that set each."""

    def up(c: float) -> float:
        return math.ceil(round(c * 10, 6)) / 10

    keys = sorted({key for constants in per_config.values() for key in constants})
    entries = []
    for estimator, reflection in keys:
        entry: dict = {"estimator": estimator, "reflection": reflection}
        sources = []
        for quantity, name in SKETCH_OF.items():
            fits = {
                config: getattr(c[(estimator, reflection)], name)
                for config, c in per_config.items()
                if (estimator, reflection) in c
            }
            largest = max(fits, key=fits.get)
            entry[name] = up(fits[largest])
            sources.append(f"{SYMBOLS[quantity]} {fits[largest]:.2f} on {largest}")
        entry["fitted_by"] = f"{command} (largest of {len(per_config)} configurations: {'; '.join(sources)})"
        entries.append(entry)
    return entries


def bound_comparison(configs: list[dict], estimator: str = DEFAULT_ESTIMATOR) -> list[dict]:
    """The estimator's Spearman of A (mean over seeds, per-seed range), with and without the reflection, beside
    the Gaussian-projection reference (mean, 10th–90th percentile) per configuration and m; the gap is
    reference mean − estimator mean. ĉ_A (the Gaussian projection's is 1: variance (R_i R_j + A²) / m) and the
    mean R̂ are the measured reasons of a gap (a larger c: a noisier sketch of the same F̂)."""
    rows = []
    for config in configs:
        for variant in filter(succeeded, config["variants"]):
            if variant["estimator"] != estimator:
                continue
            reference = config["random_projection_reference"][str(variant["m"])]
            summary = variant["summary"]
            per_seed = summary["spearman_A_per_seed"]
            rows.append(
                {
                    "config": config["name"],
                    "m": variant["m"],
                    "reflection": variant["reflection"],
                    "seeds": variant["seeds_succeeded"],
                    "spearman_A": summary["spearman_A"],
                    "spearman_A_seed_min": min(per_seed),
                    "spearman_A_seed_max": max(per_seed),
                    "bound": reference["spearman_A"],
                    "bound_p10": reference["spearman_A_p10"],
                    "bound_p90": reference["spearman_A_p90"],
                    "gap": reference["spearman_A"] - summary["spearman_A"],
                    "c_A": summary["c_A"],
                    "mean_self_dominance": summary["mean_self_dominance_joint"],
                }
            )
    return rows


def print_bound_comparison(rows: list[dict]) -> None:
    print(f"\n{DEFAULT_ESTIMATOR} vs the Gaussian-projection bound (Spearman A, all pairs):")
    print(
        "| configuration | m | reflection | default mean [seed min–max] | bound mean [p10–p90] | gap | within 0.01 | ĉ_A | mean R̂ |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['config']} | {row['m']} | {'on' if row['reflection'] else 'off'} | {row['spearman_A']:.3f} "
            f"[{row['spearman_A_seed_min']:.3f}–{row['spearman_A_seed_max']:.3f}] | {row['bound']:.3f} "
            f"[{row['bound_p10']:.3f}–{row['bound_p90']:.3f}] | {row['gap']:+.3f} | {'yes' if row['gap'] <= 0.01 else 'no'} | "
            f"{row['c_A']:.2f} | {row['mean_self_dominance']:.2f} |"
        )


#: the two tables printed per configuration: (summary key, header) columns
ACCURACY_COLUMNS = (
    ("spearman_A", "ρs A"),
    ("spearman_A_strong", "ρs A≥.02"),
    ("mae_A", "MAE A"),
    ("spearman_S_a", "ρs S_a"),
    ("mae_S_a", "MAE S_a"),
    ("spearman_S_e", "ρs S_e"),
    ("mae_S_e", "MAE S_e"),
    ("spearman_rho", "ρs ρ"),
    ("spearman_rho_A_significant", "ρs ρ|A"),
    ("mae_rho", "MAE ρ"),
    ("rho_defined_fraction", "ρ rep"),
    ("spearman_rho_fitted_c", "ρs ρ@ĉ"),
    ("spearman_rho_A_significant_fitted_c", "ρs ρ|A@ĉ"),
    ("rho_defined_fraction_fitted_c", "ρ rep@ĉ"),
    ("sketch_seconds_per_seed", "sec"),
)
ERROR_BAR_COLUMNS = tuple(
    (f"{key}_{symbol}{suffix}", f"{header} {symbol}")
    for symbol in ("A", "S_a", "S_e")
    for key, suffix, header in (
        ("c", "", "ĉ"),
        ("coverage2", "", "cov@ĉ"),
        ("coverage2", "_shipped_c", "cov@c"),
        ("coverage2", "_library", "cov lib"),
    )
)


def print_table(configs: list[dict]) -> None:
    """Per configuration: accuracy (ρ with the shipped c, then with the fitted ĉ), then error bars (fitted ĉ
    per sketch and the ±2 stderr coverage with ĉ, with the shipped c, and with the library's stderr: the
    shipped c with its feature-level floor)."""
    for config in configs:
        synthetic = config["synthetic"]
        print(
            f"\n{config['name']}: K={synthetic['vocab_size']} d={synthetic['d']} tasks={synthetic['num_tasks']} "
            f"tokens/task={synthetic['tokens_per_task']} seeds={len(config['seeds'])} "
            f"(exact {config['exact_seconds']:.0f} s)"
        )
        for columns in (ACCURACY_COLUMNS, ERROR_BAR_COLUMNS):
            print(f"{'estimator':28s} {'m':>5s} " + " ".join(f"{header:>9s}" for _, header in columns))
            for variant in config["variants"]:
                label = Variant(variant["estimator"], variant["m"], variant["reflection"]).label
                row = " ".join(f"{variant['summary'][key]:9.3f}" for key, _ in columns) if succeeded(variant) else ""
                failed = (
                    f"  ({len(variant['failures'])} of {len(config['seeds'])} seeds failed)"
                    if variant["failures"]
                    else ""
                )
                print(f"{label:28s} {variant['m']:5d} {row}{failed}")
        print("Gaussian random projection of the exact F̂ (exact norms), mean [10th–90th percentile]:")
        for m, reference in config["random_projection_reference"].items():
            print(
                f"  m={m:>5s}  "
                + "  ".join(
                    f"{header} {reference[key]:.3f} [{reference[key + '_p10']:.3f}–{reference[key + '_p90']:.3f}]"
                    for key, header in (("spearman_A", "ρs A"), ("spearman_A_strong", "ρs A≥.02"), ("mae_A", "MAE A"))
                )
            )


def plot(configs: list[dict], constants: dict[tuple[str, bool], StderrConstants], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pooled = {variant_label(*key): c for key, c in constants.items()}
    labels = sorted(pooled)
    colors = {label: f"C{index}" for index, label in enumerate(labels)}
    figure, axes = plt.subplots(2, 2, figsize=(12, 9))
    scatter_config = configs[-1]
    exact_a = scatter_config["exact_pairs"]["A"]
    for label in labels:
        for variant in filter(succeeded, scatter_config["variants"]):
            if (
                variant["m"] == 4096
                and Variant(variant["estimator"], variant["m"], variant["reflection"]).label == label
            ):
                axes[0, 0].scatter(
                    exact_a, variant["sketch_A_first_seed"], s=10, alpha=0.7, color=colors[label], label=label
                )
    axes[0, 0].plot([0, 1], [0, 1], color="gray", lw=0.8)
    axes[0, 0].set(
        xlabel="exact A", ylabel="sketch A (m=4096, seed 0)", title=f"{scatter_config['name']}: sketch vs exact"
    )
    axes[0, 0].legend(fontsize=8)
    for axis, metric, title in (
        (axes[0, 1], "spearman_A", "Spearman A, all pairs"),
        (axes[1, 0], "spearman_A_strong", f"Spearman A, pairs with exact A ≥ {A_THRESHOLD}"),
    ):
        for config, style in zip(configs, ("-", "--", ":", "-.", (0, (1, 1)), (0, (5, 1)), (0, (3, 1, 1, 1)))):
            for label in labels:
                points = [
                    (v["m"], v["summary"][metric])
                    for v in filter(succeeded, config["variants"])
                    if Variant(v["estimator"], v["m"], v["reflection"]).label == label
                ]
                axis.plot(
                    *zip(*points), linestyle=style, marker="o", color=colors[label], label=f"{label} [{config['name']}]"
                )
            reference = config["random_projection_reference"]
            axis.plot(
                [int(m) for m in reference],
                [r[metric] for r in reference.values()],
                linestyle=style,
                color="black",
                lw=2,
                label=f"Gaussian projection of exact F̂ [{config['name']}]",
            )
        axis.set(xscale="log", xlabel="m", ylabel="Spearman vs exact", title=title)
        axis.minorticks_off()
        axis.set_xticks([1024, 4096, 8192], ["1024", "4096", "8192"])
        axis.axhline(0.93 if metric == "spearman_A" else 0.97, color="gray", lw=0.8, ls=":")
        axis.legend(fontsize=6)
    width = 0.8 / len(labels)
    for index, label in enumerate(labels):
        heights = [getattr(pooled[label], SKETCH_OF[q]) for q in SKETCH_OF]
        positions = [k + (index - (len(labels) - 1) / 2) * width for k in range(len(SKETCH_OF))]
        axes[1, 1].bar(positions, heights, width, color=colors[label], label=label)
    axes[1, 1].set_xticks(range(len(SKETCH_OF)), [SYMBOLS[q] for q in SKETCH_OF])
    axes[1, 1].set(
        yscale="log", ylabel="c (largest over configurations)", title="fitted c in sd ≈ c √(R̂_i R̂_j / m), per sketch"
    )
    axes[1, 1].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


@dataclasses.dataclass(frozen=True)
class StructuredDesign:
    """Tasks k with label block [offset_k, offset_k + block) of one shared head (see the module docstring)."""

    vocab_size: int = 8192
    d: int = 64
    m: int = 4096
    block: int = 1024
    offsets: tuple[int, ...] = (0, 0, 256, 512, 1024, 2048, 3072, 4096, 4096, 4352, 6144, 7168)
    tokens_per_task: int = 600
    document_length: int = 10
    boost: float = 5.0
    norm_sigma: float = 0.75  # log-normal spread of the activation norms (heavy tail)
    seed: int = 11


STRUCTURED = StructuredDesign()
#: ``--structured --quick``: the same design at an eighth of the sizes, 6 tasks
QUICK_STRUCTURED = StructuredDesign(
    vocab_size=1024, d=32, m=512, block=128, offsets=(0, 0, 32, 128, 512, 896), tokens_per_task=200
)


def structured_tasks(design: StructuredDesign) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(activations, errors, doc_index) per task: a = r (μ + o_k + c v + noise) with log-normal r, context
    c = ±1 per token; y ~ softmax(W a + boost on the half of the block picked by c); e = softmax − onehot(y)."""
    generator = torch.Generator().manual_seed(design.seed)
    head = torch.randn(design.vocab_size, design.d, generator=generator) / design.d**0.5
    shared, context_direction = torch.randn(2, design.d, generator=generator)
    tasks = []
    for offset in design.offsets:
        n = design.tokens_per_task
        context = torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0)
        task_offset = torch.randn(design.d, generator=generator)
        noise = torch.randn(n, design.d, generator=generator)
        scale = torch.exp(design.norm_sigma * torch.randn(n, 1, generator=generator))
        activations = scale * (shared + task_offset + context[:, None] * context_direction + noise) / 2.0
        logits = activations @ head.T
        half = design.block // 2
        starts = offset + torch.where(context > 0, 0, half).long()
        columns = starts[:, None] + torch.arange(half)
        logits.scatter_add_(1, columns, torch.full((n, half), design.boost))
        probabilities = torch.softmax(logits.double(), dim=1)
        labels = torch.multinomial(probabilities.float(), 1, generator=generator).squeeze(1)
        errors = probabilities
        errors[torch.arange(n), labels] -= 1.0
        tasks.append((activations, errors.float(), torch.arange(n) // design.document_length))
    return tasks


def structured_exact(tasks) -> dict[str, torch.Tensor]:
    """Exact A, S_a, S_e, ρ (n × n) by the Gram form, norms as the exact split-sample inner products
    (``exact_matrices`` on the tasks' 10-token documents)."""
    empty = torch.empty(0, dtype=torch.long)
    return exact_matrices([SyntheticTask("structured", a, e, empty, docs) for a, e, docs in tasks])


def structured_scores(fisher: torch.Tensor, error: torch.Tensor, exact: dict[str, torch.Tensor]) -> dict[str, float]:
    exact_a, exact_e = upper_pairs(exact["fisher"]), upper_pairs(exact["error"])
    sketch_a, sketch_e = upper_pairs(fisher), upper_pairs(error)
    return {
        "spearman_A": spearman(sketch_a, exact_a),
        "spearman_S_e": spearman(sketch_e, exact_e),
        "mae_S_e": float((sketch_e - exact_e).abs().mean()),
        "max_error_S_e": float((sketch_e - exact_e).abs().max()),
    }


def run_structured_variant(
    tasks, exact, estimator: str, reflection: bool, seeds: list[int], design: StructuredDesign
) -> dict:
    pilot = torch.cat([a[:64] for a, _, _ in tasks]).mean(dim=0)
    per_seed = []
    for seed in seeds:
        spec = SketchSpec(d=design.d, vocab_size=design.vocab_size, m=design.m, seed=seed, estimator=estimator)
        spec = spec.with_reflection(pilot if reflection else None)
        signatures, refused = [], 0
        for a, e, docs in tasks:
            try:
                task = SyntheticTask("structured", a, e, torch.empty(0, dtype=torch.long), docs)  # labels unused here
                signatures.append(sketch_task(task, spec))
            except TooFewDocumentsError:
                refused += 1
        if refused:
            per_seed.append({"seed": seed, "refusals": refused})
            continue
        matrix = alignment_matrix(signatures)
        shrunk = alignment_matrix(signatures, shrink_coupling=True)
        scores = structured_scores(matrix.fisher, matrix.error, exact)
        z = (upper_pairs(matrix.error) - upper_pairs(exact["error"])) / upper_pairs(matrix.error_stderr)
        scores.update(
            seed=seed,
            refusals=0,
            clamped=int(upper_pairs(matrix.norm_clamped.double()).sum()),
            max_abs_z_S_e=float(z.abs().max()),
            **coupling_errors(matrix, exact, "rho"),
            **coupling_errors(shrunk, exact, "rho_shrunk"),
        )
        per_seed.append(scores)
    return {"estimator": estimator, "reflection": reflection, "per_seed": per_seed}


def coupling_errors(matrix: AlignmentMatrix, exact: dict[str, torch.Tensor], name: str) -> dict[str, float]:
    """MAE of ρ and the ±2 se coverage of the exact ρ, over the pairs where ρ is reported."""
    rho, se, truth = (upper_pairs(t) for t in (matrix.coupling, matrix.coupling_stderr, exact["coupling"]))
    keep = rho.isfinite()
    if not keep.any():
        return {f"mae_{name}": math.nan, f"coverage2_{name}": math.nan, f"reported_{name}": 0}
    errors = (rho - truth)[keep]
    return {
        f"mae_{name}": float(errors.abs().mean()),
        f"coverage2_{name}": float((errors.abs() <= 2 * se[keep]).double().mean()),
        f"reported_{name}": int(keep.sum()),
    }


def run_official(tasks, exact, seeds: list[int], design: StructuredDesign, workdir: Path) -> dict | None:
    """The paper author's package on the same (a, e) streams, in its own interpreter (None where
    ``FISHERSKETCH_OFFICIAL_PYTHON`` is not set)."""
    import subprocess

    import numpy as np

    python = official_python(required=False)
    if python is None:
        return None
    streams = workdir / "structured_streams.npz"
    arrays = {"m": np.array(design.m)}
    for k, (a, e, docs) in enumerate(tasks):
        arrays.update({f"a_{k}": a.numpy(), f"e_{k}": e.numpy(), f"half_{k}": (docs % 2).numpy()})
    np.savez(streams, **arrays)
    out = workdir / "structured_official.json"
    runner = Path(__file__).resolve().parent / "official_fishersketch_runner.py"
    subprocess.run([str(python), str(runner), str(streams), str(out), *map(str, seeds)], check=True)
    results = json.loads(out.read_text())
    per_seed = []
    for seed in seeds:
        values = {k: torch.tensor(v, dtype=torch.float64) for k, v in results[str(seed)].items()}
        scores = structured_scores(values["fisher"], values["error"], exact)
        scores.update(
            seed=seed,
            refusals=0,
            spearman_A_unshrunk=structured_scores(values["fisher_unshrunk"], values["error"], exact)["spearman_A"],
        )
        per_seed.append(scores)
    return {
        "estimator": "fishersketch 0.2.1 (paper author's; SRHT, shrunk ρ)",
        "reflection": False,
        "per_seed": per_seed,
    }


def summarize_structured(variant: dict) -> dict[str, float | str]:
    done = [s for s in variant["per_seed"] if not s["refusals"]]
    row = {
        "variant": variant["estimator"] + (" + reflection" if variant["reflection"] else ""),
        "refusals": sum(s["refusals"] for s in variant["per_seed"]),
        "seeds": len(variant["per_seed"]),
    }
    for key in done[0] if done else ():
        if key in ("seed", "refusals"):
            continue
        values = [s[key] for s in done]
        row[key] = sum(values) / len(values)
        row[f"{key}_per_seed"] = values
    return row


def print_structured(rows: list[dict], reference: dict[str, float]) -> None:
    print(
        f"\nstructured design (K = {STRUCTURED.vocab_size}, blocks of {STRUCTURED.block}, m = {STRUCTURED.m}); "
        f"Gaussian projection of exact F: Spearman A {reference['spearman_A']:.3f} "
        f"[{reference['spearman_A_p10']:.3f}-{reference['spearman_A_p90']:.3f}]"
    )
    print(
        "| estimator | Spearman A (all) | Spearman S_e (per seed) | MAE S_e | max |z| S_e | refusals | clamped pairs | MAE ρ / shrunk | ±2se cov ρ / shrunk |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        if "spearman_A" not in row:
            print(f"| {row['variant']} | | | | | {row['refusals']} of {row['seeds']} seeds | | | |")
            continue
        per_seed = ", ".join(f"{v:.3f}" for v in row["spearman_S_e_per_seed"])
        rho = f"{row.get('mae_rho', math.nan):.3f} / {row.get('mae_rho_shrunk', math.nan):.3f}"
        cov = f"{row.get('coverage2_rho', math.nan):.2f} / {row.get('coverage2_rho_shrunk', math.nan):.2f}"
        print(
            f"| {row['variant']} | {row['spearman_A']:.3f} | {row['spearman_S_e']:.3f} ({per_seed}) | {row['mae_S_e']:.3f} | "
            f"{row.get('max_abs_z_S_e', math.nan):.1f} | {row['refusals']} | {row.get('clamped', 0):.0f} | {rho} | {cov} |"
        )


def plot_structured(rows: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 4), constrained_layout=True)
    axes = figure.subplots(1, 2)
    scored = [r for r in rows if "spearman_S_e" in r]
    for axis, key, title in (
        (axes[0], "spearman_S_e_per_seed", "Spearman S_e per seed"),
        (axes[1], "mae_S_e_per_seed", "MAE S_e per seed"),
    ):
        for x, row in enumerate(scored):
            axis.plot([x] * len(row[key]), row[key], "o")
        axis.set_xticks(range(len(scored)), [r["variant"] for r in scored], rotation=25, ha="right", fontsize=7)
        axis.set_title(title)
    figure.savefig(path, dpi=110)


def run_structured(args) -> None:
    design = QUICK_STRUCTURED if args.quick else STRUCTURED
    seeds = list(range(1 if args.quick else args.seeds))
    started = time.perf_counter()
    tasks = structured_tasks(design)
    exact = structured_exact(tasks)
    variants = [
        run_structured_variant(tasks, exact, estimator, True, seeds, design)
        for estimator in tqdm(ESTIMATORS, desc="estimators")
    ]
    variants += [
        run_structured_variant(tasks, exact, e, False, seeds, design)
        for e in (PREVIOUS_DEFAULT_ESTIMATOR, DEFAULT_ESTIMATOR)
    ]
    import tempfile

    with tempfile.TemporaryDirectory() as workdir:
        official = run_official(tasks, exact, seeds, design, Path(workdir))
    if official is not None:
        variants.append(official)
    rows = [summarize_structured(v) for v in variants]
    reference = random_projection_reference(exact, design.m)
    print_structured(rows, reference)
    result = {
        "benchmark": "estimator_accuracy --structured",
        "design": dataclasses.asdict(design),
        "seeds": seeds,
        "machine": machine_info(),
        "total_seconds": time.perf_counter() - started,
        "exact_S_e_pairs": upper_pairs(exact["error"]).tolist(),
        "gaussian_projection_reference": reference,
        "rows": rows,
        "variants": variants,
    }
    write_results("estimator_accuracy_structured", result, lambda path: plot_structured(rows, path), args)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run only the configuration of this name")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--structured", action="store_true", help="run the structured-vocabulary design instead")
    parser.add_argument("--seeds", type=int, default=3, help="sketch seeds of --structured (default 3)")
    parser.add_argument(
        "--reduced",
        action="store_true",
        help="every configuration at m = 4096 with at most 3 seeds (when the full run does not fit)",
    )
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.structured:
        run_structured(args)
        return
    started = time.perf_counter()
    available = QUICK_CONFIGS if args.quick else REDUCED_CONFIGS if args.reduced else FULL_CONFIGS
    selected = [c for c in available if args.only in (None, c.name)]
    command = (
        "python -m benchmarks.estimator_accuracy"
        + " --quick" * args.quick
        + " --reduced" * args.reduced
        + (f" --only {args.only}" if args.only else "")
    )
    configs = [run_config(config) for config in selected]
    per_config = [config_constants(config) for config in configs]
    constants = pooled_constants(per_config)
    entries = calibration_entries({c["name"]: p for c, p in zip(configs, per_config)}, command)
    comparison = bound_comparison(configs)
    print_table(configs)
    print_bound_comparison(comparison)
    for name, pooled in [(c["name"], p) for c, p in zip(configs, per_config)] + [("largest", constants)]:
        print(f"\nc per variant (A / S_a / S_e), {name}:")
        for key, c in sorted(pooled.items()):
            print(f"  {variant_label(*key):28s} {c.joint:.3f} / {c.activation:.3f} / {c.error:.3f}")
    print("calibration.json entries (rounded up):\n  " + "\n  ".join(json.dumps(entry) for entry in entries))
    result = {
        "benchmark": "estimator_accuracy",
        "command": command,
        "threads": args.threads,
        "machine": machine_info(),
        "total_seconds": time.perf_counter() - started,
        "stderr_constants": {variant_label(*key): dataclasses.asdict(c) for key, c in sorted(constants.items())},
        "stderr_constants_per_config": {
            config["name"]: {variant_label(*key): dataclasses.asdict(c) for key, c in sorted(pooled.items())}
            for config, pooled in zip(configs, per_config)
        },
        "calibration_entries": entries,
        "bound_comparison": comparison,
        "configs": configs,
    }
    write_results("estimator_accuracy", result, lambda path: plot(configs, constants, path), args)
    print(f"total {result['total_seconds']:.0f} s")


if __name__ == "__main__":
    main()
