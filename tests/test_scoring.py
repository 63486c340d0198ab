"""Regime-aware scoring on synthetic signatures: activation-dark, error-flat, clear winner, tie."""

from __future__ import annotations

import functools

import pytest
import torch
from fisherhub.testing.oracles import sketch, softmax_errors, synthetic_task
from scipy import stats

from fisherhub.core.batch import HeadBatch
from fisherhub import SketchSpec, SketchState, alignment_matrix
from fisherhub.core.errors import InputError
from fisherhub.analysis.nearest import rank_nearest
from fisherhub.analysis.regime import regime
from fisherhub.analysis.scores import Scores
from fisherhub.analysis.separation import separation
from fisherhub.analysis.shrinkage import shrunk_coupling
from fisherhub.analysis.verdict import probability_best, score_selection
from fisherhub.core.geometry import CLEAR_GAP_Z, bonferroni_z
from fisherhub.core.shrinkage import heterogeneity

D, VOCAB, TOKENS = 16, 128, 600
SPEC = SketchSpec(d=D, vocab_size=VOCAB, m=2048)


def head_results(tasks):
    """Alignments of each candidate (tasks[1:]) with the target (tasks[0])."""
    matrix = alignment_matrix([sketch(SPEC, a, e) for a, e in tasks])
    return [matrix.pair(i, 0) for i in range(1, len(tasks))]


@functools.cache
def shared_activations() -> torch.Tensor:
    return 1.0 + torch.randn(TOKENS, D, generator=torch.Generator().manual_seed(7))


@functools.cache
def activation_dark():
    """Every task on the same activations; the label blocks go from the target's own to disjoint."""
    blocks = [(0, 32), (0, 32), (16, 48), (32, 64), (64, 96)]
    return head_results(
        [
            synthetic_task(TOKENS, D, VOCAB, seed=s, label_block=b, activations=shared_activations())
            for s, b in enumerate(blocks)
        ]
    )


def offset_activations(offset: float, seed: int) -> torch.Tensor:
    """Activations whose mean moves away from the target's along a fixed direction."""
    direction = torch.zeros(D)
    direction[:4] = 1.0
    noise = torch.randn(TOKENS, D, generator=torch.Generator().manual_seed(seed))
    return 1.0 + offset * direction + noise


@functools.cache
def error_flat():
    """Errors ≈ −onehot of uniform labels (a base model with no mass on them) for every task; the activations
    move away from the target's."""
    tasks = []
    for seed, offset in enumerate((0.0, 0.0, 1.5, 3.0, 6.0)):
        labels = torch.randint(0, VOCAB, (TOKENS,), generator=torch.Generator().manual_seed(100 + seed))
        tasks.append((offset_activations(offset, seed), softmax_errors(torch.zeros(TOKENS, VOCAB), labels)))
    return head_results(tasks)


@functools.cache
def clear_winner():
    """One candidate from the target's distribution; the others differ in activations and labels."""
    specs = [(0.0, (0, 64)), (0.0, (0, 64)), (3.0, (32, 96)), (5.0, (64, 128))]
    return head_results(
        [
            synthetic_task(TOKENS, D, VOCAB, seed=s, label_block=b, activations=offset_activations(o, s))
            for s, (o, b) in enumerate(specs)
        ]
    )


@functools.cache
def tie():
    """Two candidates from the target's distribution (only their samples differ), one far away."""
    specs = [(0.0, (0, 64)), (0.0, (0, 64)), (0.0, (0, 64)), (5.0, (64, 128))]
    return head_results(
        [
            synthetic_task(TOKENS, D, VOCAB, seed=s, label_block=b, activations=offset_activations(o, s))
            for s, (o, b) in enumerate(specs)
        ]
    )


def test_heterogeneity_is_cochrans_q_against_chi_square():
    values, stderr = (0.1, 0.5, 0.3, 0.9), (0.1, 0.2, 0.1, 0.3)
    weight = [1 / s**2 for s in stderr]
    mean = sum(w * x for w, x in zip(weight, values)) / sum(weight)
    q, p, got_mean = heterogeneity(values, stderr)
    assert got_mean == pytest.approx(mean)
    assert q == pytest.approx(sum(w * (x - mean) ** 2 for w, x in zip(weight, values)))
    assert p == pytest.approx(stats.chi2.sf(q, df=3))
    assert bonferroni_z(0.05, 5) == pytest.approx(stats.norm.isf(0.01))
    assert bonferroni_z(0.05, 5, two_sided=True) == pytest.approx(stats.norm.isf(0.005))


def test_equal_scores_do_not_separate_and_zero_stderr_is_floored():
    flat = separation(Scores("activation", (1.0, 1.0, 1.0), (0.0, 0.0, 0.0)))
    assert flat.q == 0.0 and not flat.heterogeneous and not flat.separates
    spread = separation(Scores("fisher", (0.9, 0.1, 0.0), (0.02, 0.02, 0.02)))
    assert spread.heterogeneous and spread.detected and spread.separates
    undetected = separation(Scores("fisher", (0.03, -0.03, 0.0), (0.015, 0.015, 0.015)))
    assert undetected.heterogeneous and not undetected.detected and not undetected.separates


def test_activation_dark_reads_as_such_and_auto_scores_by_the_errors():
    results = activation_dark()
    readout = regime(results)
    assert readout.name == "activation-dark", readout.reason
    assert not readout.activation.separates and readout.error.separates
    selection = score_selection(results)
    assert selection.choice.geometry == "error"
    assert selection.verdict.best == 0  # the candidate with the target's own labels
    assert "activation" not in selection.verdict.agreeing  # identical S_a: it ties, it picks nothing


def test_error_flat_reads_as_such_and_auto_scores_by_the_activations():
    results = error_flat()
    readout = regime(results)
    assert readout.name == "error-flat", readout.reason
    assert readout.activation.separates and not readout.error.separates
    selection = score_selection(results)
    assert selection.choice.geometry == "activation"
    assert selection.verdict.best == 0


def test_clear_winner_gets_a_clear_verdict_that_the_factors_agree_on():
    results = clear_winner()
    readout = regime(results)
    assert readout.name in ("coupled", "separable"), readout.reason
    selection = score_selection(results, names=["same", "shifted", "far"])
    v = selection.verdict
    assert selection.choice.geometry == "fisher" and v.best == 0 and v.clear
    assert v.gap_z >= CLEAR_GAP_Z and v.probability_best > 0.95 and v.random_top1 == pytest.approx(1 / 3)
    assert set(v.agreeing) == {"fisher", "activation", "error"}
    assert v.message.startswith("same is clearly better")


def test_tie_says_no_candidate_is_clearly_better():
    results = tie()
    v = score_selection(results, names=["twin a", "twin b", "far"]).verdict
    assert v.best in (0, 1) and v.runner_up in (0, 1)
    assert not v.clear and v.gap_z < CLEAR_GAP_Z
    assert v.probability_best < 0.95
    assert v.message.startswith("no candidate is clearly better")


def test_no_signal_when_every_candidate_is_the_target_itself():
    """Candidates drawn from the target's distribution: nothing separates them, whatever the geometry."""
    tasks = [
        synthetic_task(TOKENS, D, VOCAB, seed=s, label_block=(0, 64), activations=offset_activations(0.0, s))
        for s in range(5)
    ]
    results = head_results(tasks)
    assert regime(results).name == "no-signal"
    selection = score_selection(results)
    assert selection.choice.geometry == "fisher" and not selection.verdict.clear  # the only fallback given
    # head-input A that does not separate either: auto scores by whichever of the two is less flat
    for values in ((0.10, 0.12, 0.14, 0.16), (0.13, 0.13, 0.13, 0.13)):
        head_input = [r.replace(fisher=v, stderr=0.02) for r, v in zip(results, values)]
        p_head, p_input = (
            separation(Scores.of(k, head_input if k == "head_input" else results)).p_value
            for k in ("fisher", "head_input")
        )
        choice = score_selection(results, head_input=head_input).choice
        assert not choice.separations["head_input"].separates
        assert choice.geometry == ("head_input" if p_input < p_head else "fisher")
    assert choice.geometry == "fisher"  # equal head-input scores are the flattest possible


def test_auto_prefers_a_network_level_geometry_that_separates():
    head = activation_dark()
    network = clear_winner() + clear_winner()[:1]  # any alignments that separate, one per candidate
    selection = score_selection(head, network=network)
    assert selection.choice.geometry == "network"
    assert selection.scores.values == tuple(r.fisher for r in network)
    with pytest.raises(InputError, match="one per candidate"):
        score_selection(head, network=network[:2])
    with pytest.raises(InputError, match="unknown score"):
        score_selection(head, score="nope")


def test_no_signal_head_falls_back_to_head_input_geometry():
    tasks = [
        synthetic_task(TOKENS, D, VOCAB, seed=s, label_block=(0, 64), activations=offset_activations(0.0, s))
        for s in range(5)
    ]
    head = head_results(tasks)
    selection = score_selection(head, head_input=clear_winner() + clear_winner()[:1])
    assert selection.choice.regime.name == "no-signal" and selection.choice.geometry == "head_input"


def test_shrunk_coupling_pulls_noisy_rho_to_the_cohort_mean():
    base = clear_winner()[0]
    noisy = [base.replace(coupling=c, coupling_stderr=s) for c, s in ((0.5, 0.5), (1.5, 0.5), (1.0, 0.5), (0.9, 0.01))]
    shrunk = shrunk_coupling(noisy)
    # scatter within the error bars: τ² = 0, everything goes to the inverse-variance mean
    assert shrunk == pytest.approx([heterogeneity([0.5, 1.5, 1.0, 0.9], [0.5, 0.5, 0.5, 0.01])[2]] * 4)
    spread = [base.replace(coupling=c, coupling_stderr=0.05) for c in (0.2, 0.6, 1.0, 1.4)]
    shrunk = shrunk_coupling(spread)
    assert all(min(c, 0.8) <= s <= max(c, 0.8) for c, s in zip((0.2, 0.6, 1.0, 1.4), shrunk))
    assert shrunk[0] > 0.2 and shrunk[3] < 1.4
    undefined = [base.replace(coupling=None, coupling_stderr=None)] * 2
    assert shrunk_coupling(undefined) == [1.0, 1.0]
    # toward 1: τ² = mean((ρ − 1)² − se²) = (0.64 + 0.16 + 0 + 0.16)/4 − 0.0025 = 0.2375
    toward_one = shrunk_coupling(spread, prior_mean=1.0)
    assert toward_one == pytest.approx([1 + 0.2375 / (0.2375 + 0.0025) * (c - 1) for c in (0.2, 0.6, 1.0, 1.4)])
    assert shrunk_coupling(noisy[:3], prior_mean=1.0) == pytest.approx([1.0, 1.0, 1.0])  # τ² = 0: all at 1


def test_probability_best_is_seeded_and_sums_to_one():
    scores = Scores("fisher", (0.5, 0.45, 0.0), (0.05, 0.05, 0.05))
    p = probability_best(scores)
    assert p == probability_best(scores) and sum(p) == pytest.approx(1.0)
    assert p[0] > p[1] > p[2] and p[2] < 0.01


def test_rank_nearest_orders_by_alignment_and_skips_other_sketches():
    (a0, e0), (a1, e1), (a2, e2) = (
        synthetic_task(TOKENS, D, VOCAB, seed=s, label_block=b, activations=offset_activations(o, s))
        for s, (o, b) in enumerate([(0.0, (0, 64)), (0.0, (0, 64)), (5.0, (64, 128))])
    )
    target = sketch(SPEC, a0, e0)
    other_spec = SketchSpec(d=D, vocab_size=VOCAB, m=2048, seed=1)
    found = rank_nearest(
        target, {"far": sketch(SPEC, a2, e2), "near": sketch(SPEC, a1, e1), "other sketch": sketch(other_spec, a1, e1)}
    )
    assert [n.name for n in found] == ["near", "far"] and [n.rank for n in found] == [0, 1]
    assert found[0].alignment.fisher > found[1].alignment.fisher
    assert [
        n.name for n in rank_nearest(target, {"far": sketch(SPEC, a2, e2), "near": sketch(SPEC, a1, e1)}, limit=1)
    ] == ["near"]
    with pytest.raises(InputError, match="sketch id"):
        rank_nearest(target, {"other": sketch(other_spec, a1, e1)})


def test_nearest_signatures_on_the_hub(hub, hf_api, hf_hub_cache):
    """Adapters and signed datasets of the base model, ranked against the target; other base models, other
    sketches and the target itself left out."""
    from huggingface_hub import CommitOperationAdd

    from fisherhub.hub import push_signature
    from fisherhub.hub.nearest import collect_signatures
    from fisherhub.selection.nearest import nearest_signatures

    def signature(offset: float, block: tuple[int, int], seed: int, spec: SketchSpec = SPEC, base: str = "org/base"):
        a, e = synthetic_task(
            TOKENS, D, VOCAB, seed=seed, label_block=block, activations=offset_activations(offset, seed)
        )
        return (
            SketchState(spec)
            .update(HeadBatch(activations=a, doc_index=torch.arange(TOKENS), errors=e))
            .finalize({"base_model": base, "dataset": f"d{seed}"})
        )

    target = signature(0.0, (0, 64), 0)
    near, far, foreign = (
        signature(0.0, (0, 64), 1),
        signature(5.0, (64, 128), 2),
        signature(0.0, (0, 64), 3, base="org/other"),
    )
    hf_api.create_repo("org/adapter")
    hf_api.create_commit(
        "org/adapter",
        [
            CommitOperationAdd("adapter_config.json", b'{"base_model_name_or_path": "org/base"}'),
            CommitOperationAdd("README.md", b"---\nbase_model: org/base\nlibrary_name: peft\n---\n# adapter\n"),
        ],
        commit_message="adapter",
    )
    push_signature(far, "org/adapter", repo_type="model")
    for repo, sig in (("org/near-data", near), ("org/foreign-data", foreign), ("org/target-data", target)):
        hf_api.create_repo(repo, repo_type="dataset")
        push_signature(sig, f"datasets/{repo}")
    other_sketch = signature(0.0, (0, 64), 4, spec=SketchSpec(d=D, vocab_size=VOCAB, m=2048, seed=5))
    push_signature(other_sketch, "datasets/org/near-data")

    collected = collect_signatures("org/base")
    assert sorted(s.metadata["dataset"] for s in collected.values()) == ["d0", "d1", "d2", "d4"]
    found = nearest_signatures(target)
    assert [n.name.split(":")[0].split("@")[0] for n in found] == ["datasets/org/near-data", "org/adapter"]
    assert found[0].alignment.fisher > found[1].alignment.fisher
    with pytest.raises(InputError, match="no signature of org/nobody"):
        nearest_signatures(target, "org/nobody")
