"""Label structure aligned with the fold (issue 14): tasks whose label blocks lie Q, 2Q or arbitrary
offsets apart (Q = the fold width 2^⌈log2 m⌉). For every sketch seed, not only on average over seeds, every
estimator's S_e must be within ``Z_BOUND`` of its own standard error of the exact S_e, except where marked."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch
from fisherhub.testing.oracles import sketch, synthetic_task

from fisherhub import SketchSpec, alignment_matrix
from fisherhub.core.exact import exact_alignment
from fisherhub.core.registry import ESTIMATORS

M = 1024
Q = M  # the fold width of the folded estimators
D, VOCAB, TOKENS, WIDTH, SEEDS = 16, 4 * Q, 400, 128, (0, 1, 2, 3)
#: masked-softmax label blocks of WIDTH tokens: at 0, Q, 2Q (multiples of the fold width, so S_e = 0 between
#: them while the plain fold puts them in the same bins), at arbitrary offsets, and one wide block
LABEL_BLOCKS = (
    (0, WIDTH),
    (Q, Q + WIDTH),
    (2 * Q, 2 * Q + WIDTH),
    (77, 77 + WIDTH),
    (Q + 82, Q + 82 + WIDTH),
    (Q // 2, Q // 2 + 3 * Q),
)
Z_BOUND = 3.5
#: estimators whose S_e misses the bound on this design, and why (measured max |z| over the seeds):
#: ``maclaurin-hadamard`` shares one sign per fold slice, so the pairs (j, j + Q) all carry the same sign product
#: and blocks Q apart get S_e off by ≈ ±0.45 (|z| 11–13): biased for each seed. ``maclaurin-folded`` has
#: independent signs (unbiased for each seed) but folds j ↦ j mod Q, so blocks Q apart share all their bins
#: and the collision noise is ≈ 1/√WIDTH instead of ≈ 1/√Q (|z| up to 4.9): its error bars are too narrow here.
KNOWN_TO_MISS = {"maclaurin-hadamard": "biased per seed", "maclaurin-folded": "variance of aligned collisions"}


@functools.cache
def tasks_and_exact() -> tuple[list[tuple[torch.Tensor, torch.Tensor]], dict[tuple[int, int], float]]:
    generator = torch.Generator().manual_seed(0)
    tasks = []
    for k, block in enumerate(LABEL_BLOCKS):
        activations = 1.0 + torch.randn(TOKENS, D, generator=generator)
        tasks.append(synthetic_task(TOKENS, D, VOCAB, seed=k, label_block=block, activations=activations))
    pairs = itertools.combinations(range(len(tasks)), 2)
    exact = {(i, j): exact_alignment(*tasks[i], *tasks[j], exclude_self_pairs=True).error for i, j in pairs}
    return tasks, exact


@functools.cache
def largest_z(estimator: str, seed: int) -> float:
    """max over pairs of |Ŝ_e − S_e| / stderr(Ŝ_e) for one sketch seed."""
    tasks, exact = tasks_and_exact()
    spec = SketchSpec(d=D, vocab_size=VOCAB, m=M, seed=seed, estimator=estimator)
    matrix = alignment_matrix([sketch(spec, a, e) for a, e in tasks])
    return max(
        abs(float(matrix.error[i, j]) - value) / float(matrix.error_stderr[i, j]) for (i, j), value in exact.items()
    )


def test_the_design_puts_blocks_q_apart_with_zero_exact_s_e():
    _, exact = tasks_and_exact()
    assert exact[(0, 1)] == exact[(0, 2)] == exact[(1, 2)] == 0.0
    assert (
        min(exact[(0, 3)], exact[(1, 4)], exact[(2, 5)]) > 0.1
    )  # partial overlaps: offsets 77, 82, and the wide block


@pytest.mark.parametrize("estimator", sorted(set(ESTIMATORS) - set(KNOWN_TO_MISS)))
@pytest.mark.parametrize("seed", SEEDS)
def test_s_e_is_within_its_error_bar_for_every_seed(estimator, seed):
    assert largest_z(estimator, seed) < Z_BOUND


@pytest.mark.parametrize("estimator", sorted(KNOWN_TO_MISS))
def test_the_known_misses_still_miss(estimator):
    """If one of these starts passing, move it out of ``KNOWN_TO_MISS``."""
    assert max(largest_z(estimator, seed) for seed in SEEDS) > Z_BOUND
