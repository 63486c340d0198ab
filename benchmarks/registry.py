"""The suites (``SUITES``: what ``python -m benchmarks.run`` runs) and the selection methods (``method``: what
the paper's selection suites score, tabulate and plot).

A selection method is one function and one decorator, in ``benchmarks/paper/selection_methods.py``::

    @method("my_method", "my method (what it compares)")
    def my_method(inputs: SelectionInputs) -> torch.Tensor:
        return ...  # [source, target] similarity of the suite's tasks (higher = pick that source)

Every selection suite (exp3 to exp7) then computes it, ranks sources by it, and puts it in its tables,
heatmaps and JSON; ``suites=`` limits it to some of them. ``check_methods`` runs at a suite's start, so an
unknown name, or a method whose score misses a task, fails before any model is trained.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

import torch

#: the suites that select sources (their tasks are ``SelectionInputs``)
SELECTION_SUITES = ("exp3", "exp4", "exp5", "exp6", "exp7")
#: the suites of LM domains, whose ground truth also measures each target's own sample under the first stage's
#: candidates: they have the two-stage selection (computed after the ground truth: ``benchmarks.paper.recall``)
TWO_STAGE_SUITES = ("exp4", "exp5", "exp6", "exp7")
TWO_STAGE_LABEL = "two-stage: S_a + S_e top 3, re-ranked by the target sample's loss"


@dataclasses.dataclass(frozen=True)
class Method:
    """A selection method: its key (JSON), its label (tables and plots), ``score(inputs)`` → the [source,
    target] score matrix of the suite's tasks, what it ``needs`` beyond the suite's data (left out where that
    is not available), and whether its matrix is ``cached`` in the suite's ledger (slow baselines)."""

    name: str
    label: str
    score: Callable[..., torch.Tensor]
    needs: tuple[str, ...] = ()
    cached: bool = False


#: suite → method name → method, in registration order (the order of every table)
METHODS: dict[str, dict[str, Method]] = {suite: {} for suite in SELECTION_SUITES}


def method(
    name: str, label: str, *, suites: Iterable[str] = SELECTION_SUITES, needs: Iterable[str] = (), cached: bool = False
):
    """Register the decorated ``score(inputs) -> Tensor [source, target]`` as selection method ``name`` of
    ``suites`` (see ``Method`` for ``needs`` and ``cached``)."""
    suites = tuple(suites)
    unknown = [s for s in suites if s not in METHODS]
    if unknown:
        raise ValueError(f"method {name!r}: unknown suites {unknown}; the selection suites are {SELECTION_SUITES}")

    def register(score: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        for suite in suites:
            if name in METHODS[suite]:
                raise ValueError(f"method {name!r} is registered twice for suite {suite}")
            METHODS[suite][name] = Method(name, label, score, tuple(needs), cached)
        return score

    return register


def methods_of(suite: str, available: Iterable[str] = (), only: Iterable[str] | None = None) -> dict[str, Method]:
    """The methods of ``suite`` whose ``needs`` are all ``available`` (all of them, or those named in
    ``only``); an unknown name in ``only`` is an error here, before the suite runs."""
    registered, available = METHODS[suite], set(available)
    names = list(registered) if only is None else list(only)
    unknown = [name for name in names if name not in registered]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown} for suite {suite}; registered: {', '.join(registered)}")
    return {name: registered[name] for name in names if set(registered[name].needs) <= available}


def check_references(suite: str, references: Iterable[str]) -> None:
    """The columns a suite's tables name (its references, its paper's figures) are registered methods of it."""
    unknown = [name for name in references if name not in METHODS[suite]]
    if unknown:
        raise ValueError(f"suite {suite} refers to method(s) {unknown}, which are not registered for it")


def labels(suite: str) -> dict[str, str]:
    """Method key → its label (tables, heatmaps), with the random baseline every selection table has."""
    two_stage = {"two_stage": TWO_STAGE_LABEL} if suite in TWO_STAGE_SUITES else {}
    return two_stage | {name: m.label for name, m in METHODS[suite].items()} | {"random": "random"}


def check_scores(scores: Mapping[str, torch.Tensor], count: int) -> None:
    """Every score matrix is [count, count]; the error names the method that broke the rule."""
    for name, score in scores.items():
        if not isinstance(score, torch.Tensor) or tuple(score.shape) != (count, count):
            shape = tuple(score.shape) if isinstance(score, torch.Tensor) else type(score).__name__
            raise ValueError(f"method {name!r} returned {shape}, not a [{count}, {count}] [source, target] matrix")


@dataclasses.dataclass(frozen=True)
class Suite:
    """A benchmark: ``python -m <module>`` runs it in full (results in benchmarks/results/); ``quick`` are
    the arguments of a run of seconds on tiny random models, whose ``outputs`` (file names: JSON and PNG)
    ``python -m benchmarks.run NAME --quick`` writes to a temp folder or ``--out``."""

    name: str
    module: str
    description: str
    outputs: tuple[str, ...]
    quick: tuple[str, ...] = ("--quick",)


#: every suite, in the order ``benchmarks.run --all`` runs them: the suites on the local Hub first, since
#: importing the first of them (``benchmarks.local_hub``) points ``huggingface_hub`` at the one local server,
#: which must happen before anything else imports ``huggingface_hub``
SUITES = {
    suite.name: suite
    for suite in (
        Suite(
            "discovery",
            "benchmarks.discovery",
            "adapter discovery on a local Hub of N repos",
            ("discovery.json", "discovery.png"),
        ),
        Suite(
            "index",
            "benchmarks.index",
            "the signature index vs per-repo discovery on a local Hub with latency",
            ("index.json", "index.png"),
        ),
        Suite(
            "index_wire",
            "benchmarks.index_wire",
            "the index built through a local Hub with latency, 429s, pages and broken repos; killed and resumed",
            ("index_wire.json", "index_wire.png"),
        ),
        Suite(
            "index_sign",
            "benchmarks.index_sign",
            "fisherhub index sign: unsigned adapters signed from the datasets they name",
            ("index_sign.json", "index_sign.png", "index_sign_report.json"),
        ),
        Suite(
            "space",
            "benchmarks.space",
            "the index Space in Chromium: first page, filter, neighbours, a target ranked",
            ("space.json", "space.png"),
        ),
        Suite(
            "estimator_accuracy",
            "benchmarks.estimator_accuracy",
            "sketch vs exact A, S_a, S_e, rho on synthetic tasks",
            ("estimator_accuracy.json", "estimator_accuracy.png"),
        ),
        Suite(
            "estimator_accuracy_structured",
            "benchmarks.estimator_accuracy",
            "the structured-vocabulary design, beside the official package where installed",
            ("estimator_accuracy_structured.json", "estimator_accuracy_structured.png"),
            ("--quick", "--structured"),
        ),
        Suite(
            "speed_vs_exact",
            "benchmarks.speed_vs_exact",
            "all-pairs exact vs sketch time",
            ("speed_vs_exact.json", "speed_vs_exact.png"),
        ),
        Suite(
            "throughput",
            "benchmarks.throughput",
            "forward alone vs forward + sketch, memory vs K",
            ("throughput.json", "throughput.png"),
            ("--quick", "--random-weights"),
        ),
        Suite(
            "throughput_cpu_time",
            "benchmarks.throughput",
            "the update against its exp + sum floor in CPU time, 1 and 2 threads, with a profile",
            ("throughput_cpu_time.json", "throughput_cpu_time.png"),
            ("--quick", "--cpu-time"),
        ),
        Suite(
            "throughput_sketch_texts",
            "benchmarks.throughput",
            "sketch_texts against a bare forward pass at K = 262,144 (random Gemma-3-270M shape)",
            ("throughput_sketch_texts.json", "throughput_sketch_texts.png"),
            ("--quick", "--sketch-texts"),
        ),
        Suite(
            "rerank_speed",
            "benchmarks.rerank_speed",
            "the second stage's seconds per candidate against the shortlist's size, beside a bare PEFT forward",
            ("rerank_speed.json", "rerank_speed.png"),
        ),
        Suite(
            "halving_cost",
            "benchmarks.halving_cost",
            "the default second stage's seconds against its budget, beside rerank=3 and a bare forward pass",
            ("halving_cost.json", "halving_cost.png"),
        ),
        Suite(
            "head_fingerprint",
            "benchmarks.head_fingerprint",
            "one-time cost of a big head",
            ("head_fingerprint.json", "head_fingerprint.png"),
        ),
        Suite(
            "network_cost",
            "benchmarks.network_cost",
            "cost of network-level and head-input signatures",
            ("network_cost.json", "network_cost.png"),
        ),
        Suite(
            "mixing",
            "benchmarks.mixing",
            "LoRA adapters selected and mixed by signature",
            ("mixing.json", "mixing.png"),
        ),
        Suite(
            "exp1",
            "benchmarks.paper.exp1_estimator",
            "paper exp. 1: sketch vs exact on natural domains",
            ("paper_exp1_estimator.json", "paper_exp1_heatmaps.png", "paper_exp1_scatter.png"),
        ),
        Suite(
            "exp2",
            "benchmarks.paper.exp2_witness",
            "paper exp. 2: witness of shared structure",
            ("paper_exp2_witness.json", "paper_exp2_witness.png"),
        ),
        Suite(
            "exp3",
            "benchmarks.paper.exp3_verbalizer",
            "paper exp. 3: verbalizer-shift source selection",
            ("paper_exp3_verbalizer.json", "paper_exp3_verbalizer.png"),
        ),
        Suite(
            "exp4",
            "benchmarks.paper.exp4_domains",
            "paper exp. 4: LoRA source selection over natural domains",
            ("paper_exp4_domains.json", "paper_exp4_domains.png"),
        ),
        Suite(
            "exp5",
            "benchmarks.paper.exp5_smiles",
            "paper exp. 5: SMILES subdomains",
            ("paper_exp5_smiles.json", "paper_exp5_smiles.png"),
        ),
        Suite(
            "exp6",
            "benchmarks.paper.exp6_heldout_domains",
            "exp. 6: held-out natural domains, fixed in advance (issue 27)",
            ("paper_exp6_heldout.json", "paper_exp6_heldout.png"),
        ),
        Suite(
            "generation_signatures",
            "benchmarks.paper.generation_vs_data",
            "exp. 4-6 adapters signed from their generations vs their training data: A, top-1, regret, cost",
            ("paper_generation_signatures.json", "paper_generation_signatures.png"),
        ),
        Suite(
            "exp7",
            "benchmarks.paper.exp7_preregistered",
            "exp. 7: a fifth selection suite, pre-registered (issue 33): every method and the budgeted second stage",
            (
                "paper_exp7_preregistered.json",
                "paper_exp7_preregistered.png",
                "paper_exp7_preregistered_heatmaps.png",
            ),
        ),
        Suite(
            "halving",
            "benchmarks.paper.halving",
            "the budgeted second stage (successive halving) simulated over the suites' per-document losses",
            ("paper_halving.json", "paper_halving.png"),
        ),
        Suite(
            "wide_suite",
            "benchmarks.paper.wide_suite",
            "128 candidate adapters per exp6 target: recall@k of the first stages, halving on the own samples",
            ("paper_wide_suite.json", "paper_wide_suite.png"),
        ),
        Suite(
            "own_sample",
            "benchmarks.paper.own_sample",
            "exp4–6: each target's own sample under every candidate adapter (the real second stage's losses)",
            ("paper_own_sample.json", "paper_own_sample.png"),
        ),
    )
}
