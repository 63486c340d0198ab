"""Standard errors: each sketch (A, S_a, S_e) has its own constant c in stderr ≈ c √(R̂_i R̂_j / m)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import pytest
import torch
from fisherhub.testing.oracles import sketch, synthetic_task

from fisherhub import Signature, SketchSpec, alignment, alignment_matrix
from fisherhub.core.geometry import SIGNIFICANCE_Z
from fisherhub.core.alignment import (
    STDERR_CONSTANTS,
    AlignmentMatrix,
    StderrConstants,
    feature_stderr,
    sketch_means,
    stderr_constants,
)
from fisherhub.core.registry import ESTIMATORS
from fisherhub.core.errors import InputError
from fisherhub.core.exact import exact_alignment

VARIANTS = [(estimator, reflection) for estimator in ESTIMATORS for reflection in (False, True)]
STDERR_FIELDS = ("stderr", "activation_stderr", "error_stderr")  # of AlignmentMatrix, in SKETCHES order
VALUE_FIELDS = ("fisher", "activation", "error")
D, VOCAB, TOKENS, M, SEEDS = 32, 512, 300, 2048, (0, 1)
#: label blocks from identical to disjoint, so exact A and S_e spread over [0, 0.8]
LABEL_BLOCKS = ((0, 256), (32, 288), (128, 384), (256, 512), (0, 512), (128, 256))


@dataclasses.dataclass(frozen=True)
class ActivationLayout:
    """Activations = shared mean (norm ``shared``) + a task offset (norm ``offset``) + noise of norm ≈ 1."""

    shared: float
    offset: float


#: S_a spread over 0.3–0.6, as on an LM (SmolLM2-135M: 0.17–0.93), where S_a's c is ≈ 0.5–1.1
LM_LIKE = ActivationLayout(shared=2.0, offset=1.5)
#: S_a ≈ 0.9 for every pair (a dominant shared mean), where S_a's c is ≈ 0.1
SHARED_MEAN = ActivationLayout(shared=3.0, offset=0.7)


def pairs() -> list[tuple[int, int]]:
    return list(itertools.combinations(range(len(LABEL_BLOCKS)), 2))


@functools.cache
def make_tasks(layout: ActivationLayout) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """The tasks (activations, errors) and the exact (A, S_a, S_e) of every pair (U-statistic norms)."""
    generator = torch.Generator().manual_seed(0)
    shared = torch.randn(D, generator=generator)
    shared *= layout.shared / shared.norm()
    tasks = []
    for k, block in enumerate(LABEL_BLOCKS):
        offset = torch.randn(D, generator=generator)
        offset *= layout.offset / offset.norm()
        activations = shared + offset + torch.randn(TOKENS, D, generator=generator) / D**0.5
        tasks.append(synthetic_task(TOKENS, D, VOCAB, seed=k, label_block=block, activations=activations))
    exact = [exact_alignment(*tasks[i], *tasks[j], exclude_self_pairs=True) for i, j in pairs()]
    return tasks, torch.tensor([dataclasses.astuple(e) for e in exact], dtype=torch.float64)


@functools.cache
def signatures(layout: ActivationLayout, estimator: str, reflection: bool, seed: int) -> tuple[Signature, ...]:
    """The tasks' signatures (reflection: pilot = the mean activation of all tasks)."""
    tasks, _ = make_tasks(layout)
    pilot = torch.cat([activations for activations, _ in tasks]).mean(dim=0)
    spec = SketchSpec(d=D, vocab_size=VOCAB, m=M, seed=seed, estimator=estimator)
    spec = spec.with_reflection(pilot if reflection else None)
    return tuple(sketch(spec, a, e) for a, e in tasks)


def sketched(layout: ActivationLayout, estimator: str, reflection: bool, seed: int) -> AlignmentMatrix:
    return alignment_matrix(signatures(layout, estimator, reflection, seed))


def pair_values(matrix: AlignmentMatrix, fields: tuple[str, ...]) -> torch.Tensor:
    """(pairs, len(fields)) of the named matrix fields at the task pairs."""
    rows, cols = zip(*pairs())
    return torch.stack([getattr(matrix, field)[list(rows), list(cols)] for field in fields], dim=1)


@pytest.mark.parametrize("estimator,reflection", VARIANTS)
def test_every_estimator_has_positive_constants_per_sketch(estimator, reflection):
    constants = stderr_constants(estimator, reflection)
    values = dataclasses.astuple(constants)
    assert len(values) == 3 and all(math.isfinite(c) and c > 0 for c in values), constants


def test_unknown_estimator_raises_a_clear_error(monkeypatch):
    with pytest.raises(InputError, match="no-such-estimator.*calibration.json"):
        stderr_constants("no-such-estimator", False)
    estimator = next(iter(ESTIMATORS))
    monkeypatch.delitem(STDERR_CONSTANTS, (estimator, False))
    spec = SketchSpec(d=4, vocab_size=16, m=64, estimator=estimator)
    pair = [sketch(spec, *synthetic_task(40, 4, 16, seed=seed)) for seed in (0, 1)]
    with pytest.raises(InputError, match=f"{estimator}.*without the reflection"):
        alignment(*pair)


@pytest.mark.parametrize("estimator,reflection", VARIANTS)
def test_each_sketch_uses_its_own_constant(estimator, reflection):
    """stderr of sketch k = max(c_k √(R̂_i R̂_j / m), feature_stderr) with that sketch's R̂ and features; ρ is
    reported exactly where S_a and S_e exceed SIGNIFICANCE_Z of their own standard errors."""
    shared_mean = signatures(SHARED_MEAN, estimator, reflection, seed=0)
    matrix = alignment_matrix(shared_mean)
    dominance = torch.stack([s.self_dominances() for s in shared_mean], dim=1)  # (3, n)
    constants = stderr_constants(estimator, reflection).as_tensor().tolist()  # SKETCHES order
    off_diagonal = ~torch.eye(len(shared_mean), dtype=torch.bool)
    means, norms = sketch_means(shared_mean)
    for k, (field, value_field, c) in enumerate(zip(STDERR_FIELDS, VALUE_FIELDS, constants)):
        floor = feature_stderr(means[k], norms[k], getattr(matrix, value_field))
        expected = torch.maximum(c * torch.sqrt(dominance[k][:, None] * dominance[k][None, :] / M), floor)
        torch.testing.assert_close(getattr(matrix, field)[off_diagonal], expected[off_diagonal], rtol=1e-12, atol=0)
    unit = alignment_matrix(shared_mean, constants=StderrConstants(joint=1.0, activation=1.0, error=1.0))
    floor = feature_stderr(means[1], norms[1], matrix.activation)
    unit_formula = torch.sqrt(dominance[1][:, None] * dominance[1][None, :] / M)
    torch.testing.assert_close(
        unit.activation_stderr[off_diagonal], torch.maximum(unit_formula, floor)[off_diagonal], rtol=1e-12, atol=0
    )
    reported = (matrix.activation > SIGNIFICANCE_Z * matrix.activation_stderr) & (
        matrix.error > SIGNIFICANCE_Z * matrix.error_stderr
    )
    assert torch.equal(~torch.isnan(matrix.coupling[off_diagonal]), reported[off_diagonal])
    assert reported[off_diagonal].any() and not reported[off_diagonal].all()  # disjoint label blocks: S_e ≈ 0


@pytest.mark.parametrize("estimator,reflection", VARIANTS)
def test_z_scores_have_unit_scale_for_every_sketch(estimator, reflection):
    """On LM-like tasks, the RMS of (sketch − exact) / stderr over pairs and seeds is within 4× of 1 for A, S_a
    and S_e."""
    _, exact = make_tasks(LM_LIKE)
    matrices = [sketched(LM_LIKE, estimator, reflection, seed) for seed in SEEDS]
    z = torch.cat([(pair_values(m, VALUE_FIELDS) - exact) / pair_values(m, STDERR_FIELDS) for m in matrices])
    rms = z.pow(2).mean(dim=0).sqrt()
    for symbol, value in zip(("A", "S_a", "S_e"), rms.tolist()):
        assert 1 / 4 < value < 4, (
            f"{estimator} reflection={reflection}: RMS z of {symbol} is {value:.3f} (all: {rms.tolist()})"
        )


@pytest.mark.parametrize("estimator,reflection", VARIANTS)
def test_activation_stderr_is_below_joint_stderr_when_activations_share_a_mean(estimator, reflection):
    stderr = pair_values(sketched(SHARED_MEAN, estimator, reflection, seed=0), ("stderr", "activation_stderr"))
    assert (stderr[:, 1] < stderr[:, 0]).all(), stderr


def test_feature_stderr_is_the_delta_method_over_features():
    """The Gram-matrix expansion equals m/(m−1) Σ_r g_r² computed feature by feature."""
    generator = torch.Generator().manual_seed(0)
    means = torch.randn(4, 64, generator=generator, dtype=torch.float64)
    norms = means.square().sum(dim=1) * (0.5 + torch.rand(4, generator=generator, dtype=torch.float64))
    cosine = means @ means.T / torch.sqrt(norms[:, None] * norms[None, :])
    expected = torch.zeros(4, 4, dtype=torch.float64)
    for i, j in itertools.product(range(4), repeat=2):
        share = means[i].square() / means[i].square().sum() + means[j].square() / means[j].square().sum()
        g = means[i] * means[j] / torch.sqrt(norms[i] * norms[j]) - cosine[i, j] / 2 * share
        expected[i, j] = torch.sqrt(g.square().sum() * 64 / 63)
    # (the diagonal is ≈ 0 by cancellation: its square root keeps rounding of ~1e-9)
    torch.testing.assert_close(feature_stderr(means, norms, cosine), expected, rtol=1e-10, atol=1e-7)


def test_tasks_sharing_their_inputs_get_wide_enough_error_bars():
    """Six tasks on the very same inputs whose labels follow one shared binary attribute, each in its own
    2-token block (verbalizers): exact A = 0. The calibrated c √(R̂_i R̂_j / m) alone is too narrow there
    (the features' activation factors are common to all tasks); the feature-level floor is not."""
    d, tokens = 64, 256
    generator = torch.Generator().manual_seed(0)
    mean = torch.randn(d, generator=generator)
    activations = 3.0 * mean / mean.norm() + torch.randn(tokens, d, generator=generator) / d**0.5
    attribute = torch.randint(0, 2, (tokens,), generator=generator)
    logits = activations.double() @ (torch.randn(VOCAB, d, generator=generator).double() / d**0.5).T
    tasks = []
    for k in range(6):
        masked = torch.full_like(logits, float("-inf"))
        masked[:, 2 * k : 2 * k + 2] = logits[:, 2 * k : 2 * k + 2]
        probabilities = torch.softmax(masked, dim=1)
        probabilities[torch.arange(tokens), 2 * k + attribute] -= 1.0
        tasks.append(probabilities.float())
    off_diagonal = ~torch.eye(6, dtype=torch.bool)
    with_floor, formula_only = [], []
    for seed in range(4):
        spec = SketchSpec(d=d, vocab_size=VOCAB, m=M, seed=seed).with_reflection(torch.randn(d, generator=generator))
        shared = [sketch(spec, activations, errors) for errors in tasks]
        matrix = alignment_matrix(shared)
        dominance = torch.stack([s.self_dominances()[0] for s in shared])
        formula = stderr_constants(spec.estimator, True).joint * torch.sqrt(dominance[:, None] * dominance[None, :] / M)
        with_floor.append((matrix.fisher / matrix.stderr)[off_diagonal])
        formula_only.append((matrix.fisher / formula)[off_diagonal])
    rms_with_floor = torch.cat(with_floor).square().mean().sqrt()
    rms_formula = torch.cat(formula_only).square().mean().sqrt()
    assert rms_formula > 1.5, rms_formula  # the failure the floor is there for
    assert 0.2 < rms_with_floor < 1.2, rms_with_floor


def test_coupling_shrinkage_pulls_toward_one_by_the_noise_share():
    """ρ̃ − 1 = w (ρ̂ − 1), w = τ²/(τ² + se²) with τ² = mean (ρ̂ − 1)² − mean se²; a signature with itself stays 1."""
    from fisherhub.core.alignment import shrink_toward_separable

    coupling = torch.tensor([[1.0, 1.5, 0.4], [1.5, 1.0, math.nan], [0.4, math.nan, 1.0]], dtype=torch.float64)
    stderr = torch.tensor([[0.0, 0.2, 0.4], [0.2, 0.0, math.nan], [0.4, math.nan, 0.0]], dtype=torch.float64)
    prior = ((0.5**2 + 0.6**2) / 2) - (0.2**2 + 0.4**2) / 2
    shrunk = shrink_toward_separable(coupling, stderr)
    assert float(shrunk[0, 1]) == pytest.approx(1 + 0.5 * prior / (prior + 0.04))
    assert float(shrunk[0, 2]) == pytest.approx(1 - 0.6 * prior / (prior + 0.16))
    assert math.isnan(float(shrunk[1, 2])) and torch.equal(shrunk.diagonal(), torch.ones(3, dtype=torch.float64))
    noise_only = shrink_toward_separable(coupling, stderr * 10)  # all spread explained by noise: τ² = 0, ρ̃ = 1
    assert float(noise_only[0, 1]) == float(noise_only[0, 2]) == 1.0
