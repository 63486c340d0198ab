"""Synthetic tasks for the estimator benchmarks: one softmax head, many tasks, graded similarity.

A *task* is a set of scored tokens (a_t, e_t) under a fixed head W ∈ R^{K×d} shared by all tasks:

    c_t ∈ {0, 1} uniform, s_t = ±1 (the token's context, paired with a side by the task)
    a_t = r_t (μ + α (cos θ_k v₁ + sin θ_k v₂) + γ s_t g + U_k z_t + σ ε_t)   (activations, d)
    p_t = softmax(W a_t)                                               (the model's prediction)
    y_t ~ softmax(W a_t + β_k 1[y ∈ B_k,c_t])                          (the task's next token)
    e_t = p_t − onehot(y_t)                                            (empirical-Fisher error, K)

μ is a large mean shared by every task (the common component of real LM hidden states, which also sets
a shared "unigram" logit prior W μ); θ_k places the task's mean offset on a quarter circle, and U_k
is a rank-r subspace that mixes a shared subspace with a private one. The labels follow the head's
own softmax shifted by β_k on a label block: the first or second half of the task's vocabulary window,
by the token's context. The windows of different tasks range from identical to disjoint, so the exact
alignments spread over [0, 1]; tasks pair their two contexts (activation side ±g) with the two halves
either way round, so what the model sees and how it errs are coupled and ρ varies between pairs.
r_t = 1 unless ``norm_sigma`` > 0: then log r_t ~ N(0, norm_sigma²), heavy-tailed activation norms (and
logits). Every token is its own document (``doc_index = arange(n)``), so the split halves are iid, unless
``document_length`` > 1: then documents are runs of that many tokens that share one context c_t.

Also the pieces both estimator benchmarks share: ``sketch_task`` and where results are written.

    python -m benchmarks.synthetic     # print the exact A / S_a / S_e / ρ spread of a small configuration
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from fisherhub.core.batch import HeadBatch
from fisherhub import Signature, SketchSpec, SketchState


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
    """Sizes and the knobs of the generator (defaults: realistic proportions, see module docstring)."""

    vocab_size: int
    d: int
    num_tasks: int
    tokens_per_task: int
    seed: int = 0
    logit_scale: float = 3.0  # std of the head's logits W a over the vocabulary
    shared_mean_norm: float = 3.0  # ‖μ‖ (the per-token spread is ≈ 1)
    task_offset_norm: float = 1.0  # α
    context_offset_norm: float = 1.5  # γ: each token's context (±1) moves it by ±γ g
    subspace_rank: int = 8
    subspace_scale: float = 0.8  # ‖U_k z‖ ≈ subspace_scale
    noise_scale: float = 0.5  # σ: ‖σ ε‖ ≈ σ (isotropic)
    label_block_fraction: float = 0.02  # |B_k| / K
    label_boost: float = 8.0  # β
    #: the two contexts move the activation along two orthogonal directions γ g, γ g' instead of ±γ g: the
    #: Fisher sees ±g alike (a aᵀ is even in a), so only this makes the context pairing (and ρ) matter strongly
    separate_context_directions: bool = False
    norm_sigma: float = 0.0  # std of log r_t, the per-token scale of the activation (0: no scaling)
    document_length: int = 1  # tokens per document; a document's tokens share their context

    @property
    def typical_activation_norm(self) -> float:
        return math.sqrt(
            self.shared_mean_norm**2
            + self.task_offset_norm**2
            + self.context_offset_norm**2
            + self.subspace_scale**2
            + self.noise_scale**2
        )

    @property
    def label_block_size(self) -> int:
        return max(1, round(self.label_block_fraction * self.vocab_size))


@dataclasses.dataclass
class SyntheticTask:
    """One task's scored tokens, ready for ``SketchState.update`` and ``fisherhub.core.exact``."""

    name: str
    activations: torch.Tensor  # (n, d) float32
    errors: torch.Tensor  # (n, K) float32
    labels: torch.Tensor  # (n,) int64
    doc_index: torch.Tensor  # (n,) int64, arange // document_length


@dataclasses.dataclass(frozen=True)
class TaskLayout:
    """Where task k sits: activation angle θ_k, subspace mixing φ_k, label window, boost β_k, and the
    pairing of its two contexts (+1: context 0 takes the +g side and the first half of the window)."""

    angle: float
    subspace_mixing: float
    label_block_start: int
    label_boost: float
    context_pairing: int


#: label-window starts in quarter windows: pairs share a window, neighbours overlap by 3/4, 1/2, 1/4, … 0.
_WINDOW_STEPS = (0, 0, 1, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)
#: label boosts relative to ``label_boost``: weak boosts leave a task close to the shared prior.
_BOOST_LEVELS = (1.0, 0.75, 0.5)
#: context pairings: tasks 0 and 1 share a window but pair contexts and labels the other way round.
_PAIRINGS = (1, -1, 1)


def task_layouts(config: SyntheticConfig) -> list[TaskLayout]:
    """Graded layouts: label windows from identical to disjoint, boosts from strong to weak, both context
    pairings, and the activation angle sweeping the quarter circle in a shuffled order (independent factors)."""
    block = config.label_block_size
    angle_ranks = torch.randperm(config.num_tasks, generator=torch.Generator().manual_seed(config.seed)).tolist()
    layouts = []
    for k in range(config.num_tasks):
        step = _WINDOW_STEPS[k % len(_WINDOW_STEPS)] + 33 * (k // len(_WINDOW_STEPS))
        fraction = angle_ranks[k] / max(1, config.num_tasks - 1)
        layouts.append(
            TaskLayout(
                angle=0.5 * math.pi * fraction,
                subspace_mixing=0.5 * math.pi * fraction,
                label_block_start=(step * block // 4) % max(1, config.vocab_size - block),
                label_boost=config.label_boost * _BOOST_LEVELS[k % len(_BOOST_LEVELS)],
                context_pairing=_PAIRINGS[k % len(_PAIRINGS)],
            )
        )
    return layouts


class SyntheticHead:
    """The shared parts: head W, shared mean μ, offset directions v₁, v₂, context direction g and the
    shared subspace."""

    def __init__(self, config: SyntheticConfig):
        self.config = config
        generator = torch.Generator().manual_seed(config.seed)
        d = config.d
        scale = config.logit_scale / config.typical_activation_norm  # std of W a ≈ logit_scale
        self.weight = torch.randn(config.vocab_size, d, generator=generator) * scale
        unit = _unit_vectors(generator, 4, d)
        self.shared_mean = unit[0] * config.shared_mean_norm
        self.offset_directions = unit[1:3]
        self.context_direction = unit[3]
        self.shared_subspace = torch.linalg.qr(torch.randn(d, config.subspace_rank, generator=generator))[0]
        second = torch.randn(d, generator=torch.Generator().manual_seed(config.seed + 5_555_555))  # own stream
        second -= (second @ self.context_direction) * self.context_direction
        self.second_context_direction = second / second.norm()

    def context_offsets(self, side: torch.Tensor) -> torch.Tensor:
        """(n, d): s g for the token's side s = ±1, or g / g' by side with ``separate_context_directions``."""
        if self.config.separate_context_directions:
            return torch.where(side[:, None] > 0, self.context_direction, self.second_context_direction)
        return side[:, None] * self.context_direction

    def task(self, k: int, layout: TaskLayout, num_tokens: int, seed: int) -> SyntheticTask:
        """``num_tokens`` tokens of task k; the task's structure depends on k only, the draws on ``seed``."""
        config = self.config
        d, rank, half = config.d, config.subspace_rank, config.label_block_size // 2
        structure = torch.Generator().manual_seed(config.seed * 1_000_003 + 999_983 * (k + 1))
        private = torch.linalg.qr(torch.randn(d, rank, generator=structure))[0]
        subspace = math.cos(layout.subspace_mixing) * self.shared_subspace + math.sin(layout.subspace_mixing) * private
        offset = config.task_offset_norm * (
            math.cos(layout.angle) * self.offset_directions[0] + math.sin(layout.angle) * self.offset_directions[1]
        )
        generator = torch.Generator().manual_seed(seed)
        length = config.document_length
        contexts = torch.randint(0, 2, (-(-num_tokens // length),), generator=generator)
        contexts = contexts.repeat_interleave(length)[:num_tokens]
        side = (1 - 2 * contexts).float() * layout.context_pairing
        latent = torch.randn(num_tokens, rank, generator=generator) * (config.subspace_scale / math.sqrt(rank))
        noise = torch.randn(num_tokens, d, generator=generator) * (config.noise_scale / math.sqrt(d))
        activations = (
            self.shared_mean
            + offset
            + config.context_offset_norm * self.context_offsets(side)
            + latent @ subspace.T
            + noise
        )
        if config.norm_sigma > 0:  # its own stream, so the other draws are those of the unscaled design
            scales = torch.Generator().manual_seed(seed + 7_777_777)
            activations = activations * torch.exp(config.norm_sigma * torch.randn(num_tokens, 1, generator=scales))
        logits = activations @ self.weight.T
        window = layout.label_block_start + contexts[:, None] * half + torch.arange(half)  # the context's half
        boosted = logits.scatter_add(1, window, torch.full(window.shape, layout.label_boost))
        labels = torch.multinomial(torch.softmax(boosted, dim=1), 1, generator=generator).squeeze(1)
        errors = torch.softmax(logits, dim=1)
        errors[torch.arange(num_tokens), labels] -= 1.0
        return SyntheticTask(
            name=f"task{k:02d}",
            activations=activations.float(),
            errors=errors.float(),
            labels=labels,
            doc_index=torch.arange(num_tokens) // length,
        )


def sketch_task(task: SyntheticTask, spec: SketchSpec, batch_size: int = 256) -> Signature:
    """The task's signature: ``SketchState.update`` in batches of ``batch_size`` tokens, then ``finalize``."""
    state = SketchState(spec)
    for start in range(0, len(task.doc_index), batch_size):
        stop = start + batch_size
        state.update(
            HeadBatch(
                activations=task.activations[start:stop],
                doc_index=task.doc_index[start:stop],
                errors=task.errors[start:stop],
            )
        )
    return state.finalize({"dataset": task.name})


RESULTS_DIR = Path(__file__).resolve().parent / "results"
QUICK_OUTPUT_DIR = Path(tempfile.gettempdir()) / "fisherhub-benchmarks"


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--quick`` (a small smoke configuration, written to the temp dir) and ``--output-dir``."""
    parser.add_argument(
        "--quick", action="store_true", help=f"small smoke configuration (writes to {QUICK_OUTPUT_DIR})"
    )
    parser.add_argument("--output-dir", type=Path, help=f"default {RESULTS_DIR}")


def output_dir(args: argparse.Namespace) -> Path:
    """Where the results of ``args`` go (``--output-dir``, else the temp dir for ``--quick``, else
    benchmarks/results/), created."""
    folder = args.output_dir or (QUICK_OUTPUT_DIR if args.quick else RESULTS_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_results(name: str, result: dict, plot: Callable[[Path], None], args: argparse.Namespace) -> None:
    """``<name>.json`` and ``<name>.png`` (drawn by ``plot(path)``) in the output dir of ``args``."""
    folder = output_dir(args)
    (folder / f"{name}.json").write_text(json.dumps(result, indent=1))
    plot(folder / f"{name}.png")
    print(f"wrote {folder}/{name}.{{json,png}}")


def machine_info() -> dict[str, str | int | None]:
    """Platform, CPU model and count, torch version: recorded with every result."""
    return {"platform": platform.platform(), "cpu": cpu_model(), "cpus": os.cpu_count(), "torch": torch.__version__}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else ``platform.processor()``."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def _unit_vectors(generator: torch.Generator, count: int, d: int) -> torch.Tensor:
    vectors = torch.randn(count, d, generator=generator)
    return vectors / vectors.norm(dim=1, keepdim=True)


def task_stream(head: SyntheticHead) -> Iterator[SyntheticTask]:
    """The ``num_tasks`` tasks of ``tokens_per_task`` tokens, one at a time (deterministic in ``seed``)."""
    config = head.config
    for k, layout in enumerate(task_layouts(config)):
        yield head.task(k, layout, config.tokens_per_task, seed=config.seed * 1_000_003 + k + 1)


def make_tasks(config: SyntheticConfig) -> tuple[SyntheticHead, list[SyntheticTask]]:
    """The head and all its tasks, in memory."""
    head = SyntheticHead(config)
    return head, list(task_stream(head))


def pilot_activations(head: SyntheticHead, tokens_per_task: int) -> torch.Tensor:
    """A pilot sample: fresh tokens from every task (independent of the benchmark's), concatenated."""
    config = head.config
    return torch.cat(
        [
            head.task(k, layout, tokens_per_task, seed=config.seed * 1_000_003 + 500_009 + k).activations
            for k, layout in enumerate(task_layouts(config))
        ]
    )


def _describe() -> None:
    from fisherhub.core.exact import gram_inner_products

    config = SyntheticConfig(vocab_size=8192, d=256, num_tasks=14, tokens_per_task=400)
    _, tasks = make_tasks(config)
    norms = [
        gram_inner_products(t.activations, t.errors, t.activations, t.errors, exclude_self_pairs=True) for t in tasks
    ]
    rows = []
    for i in range(len(tasks)):
        for j in range(i + 1, len(tasks)):
            cross = gram_inner_products(tasks[i].activations, tasks[i].errors, tasks[j].activations, tasks[j].errors)
            rows.append(cross / torch.sqrt(norms[i] * norms[j]))
    fisher, activation, error = torch.stack(rows).T
    levels = torch.tensor([0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0], dtype=torch.float64)
    print(f"{len(rows)} pairs; quantiles at {levels.tolist()}")
    for name, values in (("A", fisher), ("S_a", activation), ("S_e", error), ("rho", fisher / (activation * error))):
        print(f"{name:4s} " + "  ".join(f"{q:.3f}" for q in torch.quantile(values, levels).tolist()))


if __name__ == "__main__":
    _describe()
