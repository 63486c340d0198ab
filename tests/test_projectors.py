"""Projector strategies: dense rows match their definitions; e from logits equals e materialized."""

from __future__ import annotations

import pytest
import torch

from fisherhub.core.batch import HeadBatch
from fisherhub import SketchSpec, SketchState
from fisherhub.core.features import FeatureMap
from fisherhub.core.hadamard import fwht
from fisherhub.core.projectors import (
    PERMUTATION_CHUNK,
    VOCABULARY_PROJECTORS,
    BlockSRHTProjector,
    ChunkPermutedFoldedSRHTProjector,
)
from fisherhub.core.registry import ESTIMATORS
from fisherhub.core.errors import InputError


def _softmax_errors(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    errors = torch.softmax(logits.double(), dim=1)
    errors[torch.arange(len(targets)), targets] -= 1.0
    return errors


@pytest.mark.parametrize("kind", sorted(VOCABULARY_PROJECTORS))
@pytest.mark.parametrize("vocab_size", [64, 50, 200])  # multiples of the fold width, and with tails
def test_vocabulary_rows_are_signed_walsh_functions_of_the_bin(kind, vocab_size):
    """Row r of side s is H_T[row_s(r), bin(j)] · D[s, j]: the fold and the transform as documented."""
    projector = VOCABULARY_PROJECTORS[kind](vocab_size, 32, seed=4)  # fold width 32: two chunks per bin range
    dense = projector.dense_rows()
    walsh = fwht(torch.eye(projector.transform_size))
    bins = projector.bins
    for side in range(2):
        expected = walsh[projector.rows[side]][:, bins] * projector.signs[side][None, :]
        torch.testing.assert_close(dense[side], expected, rtol=0, atol=0)
    assert not torch.equal(projector.signs[0], projector.signs[1])


def test_chunk_permutation_moves_whole_chunks_and_breaks_the_vocabulary_order():
    """pos(j) permutes the full chunks of 16 (the tail stays last); bin(j) = pos(j) mod Q, so coordinates Q apart
    no longer share a bin the way the plain fold makes them."""
    vocab_size, q = 4 * 256 + 5, 256
    projector = ChunkPermutedFoldedSRHTProjector(vocab_size, q, seed=0)
    positions = torch.empty_like(projector.coordinate_at)
    positions[projector.coordinate_at] = torch.arange(vocab_size)
    assert sorted(positions.tolist()) == list(range(vocab_size))
    chunked = positions[: 64 * PERMUTATION_CHUNK].view(64, PERMUTATION_CHUNK)
    assert torch.equal(chunked - chunked[:, :1], torch.arange(PERMUTATION_CHUNK).expand(64, -1))
    assert not torch.equal(chunked[:, 0], torch.arange(64) * PERMUTATION_CHUNK)
    assert torch.equal(positions[-5:], torch.arange(vocab_size - 5, vocab_size))
    assert torch.equal(projector.bins, positions % q)
    same_bin_q_apart = (projector.bins[: 3 * q] == projector.bins[q : 4 * q]).float().mean()
    assert same_bin_q_apart < 0.05  # the plain fold: 1.0; random bins: 1/Q


@pytest.mark.parametrize("kind", sorted(VOCABULARY_PROJECTORS))
def test_softmax_errors_projected_from_logits_equal_materialized_errors(kind):
    torch.manual_seed(0)
    logits = 4.0 * torch.randn(7, 50)
    logits[2] += 200.0  # Σ exp(z) overflows float32: this row is recomputed with max z subtracted
    logits[5] -= 200.0  # ... and this one underflows
    targets = torch.randint(0, 50, (7,))
    projector = VOCABULARY_PROJECTORS[kind](50, 16, seed=1)
    expected = projector.project(_softmax_errors(logits, targets).float())
    got = projector.project_softmax_errors(logits, targets)
    for side in range(2):
        torch.testing.assert_close(got[side], expected[side], rtol=0, atol=1e-4)
    half = logits.bfloat16()  # a bf16 model's logits: e in float32 from the same values
    expected_half = projector.project(_softmax_errors(half.float(), targets).float())
    torch.testing.assert_close(projector.project_softmax_errors(half, targets)[0], expected_half[0], rtol=0, atol=1e-4)
    rows = torch.tensor([1, 4, 6])
    subset = projector.project_softmax_errors(logits, targets[rows], rows)
    torch.testing.assert_close(subset[1], expected[1][rows], rtol=0, atol=1e-4)


@pytest.mark.parametrize("vocab_size", [1024, 1029])  # a whole number of permutation chunks, and a partial one
def test_chunk_permuted_fold_never_reads_the_padding_of_its_rows(vocab_size):
    """Scratch rows are padded to whole chunks: whatever the padding holds, the projections from logits equal
    those of e materialized (a contiguous (N, K) input is copied into a padded buffer, a padded one folded
    in place, with the same bits)."""
    torch.manual_seed(2)
    projector = ChunkPermutedFoldedSRHTProjector(vocab_size, 64, seed=3)
    assert projector.row_width == -(-vocab_size // PERMUTATION_CHUNK) * PERMUTATION_CHUNK
    logits, targets = 3.0 * torch.randn(6, vocab_size), torch.randint(0, vocab_size, (6,))
    first = projector.project_softmax_errors(logits, targets)
    for buffer in projector._scratch_buffers.values():
        buffer.fill_(float("nan"))
    second = projector.project_softmax_errors(logits, targets)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    errors = _softmax_errors(logits, targets).float()
    expected = projector.project(errors)
    for side in range(2):
        torch.testing.assert_close(first[side], expected[side], rtol=0, atol=1e-4)
    padded = torch.full((6, projector.row_width), float("nan"))  # rows already padded: folded in place, no copy
    padded[:, :vocab_size] = errors
    assert torch.equal(projector.fold(padded[:, :vocab_size]), projector.fold(errors))
    dense = projector.dense_rows()  # the fold as documented, on the identity (copied into a padded buffer)
    walsh = fwht(torch.eye(projector.transform_size))
    torch.testing.assert_close(
        dense[0], walsh[projector.rows[0]][:, projector.bins] * projector.signs[0], rtol=0, atol=0
    )


def test_block_srht_rows_are_distinct_signs_and_cover_d_larger_than_m():
    projector = BlockSRHTProjector(5, 20, seed=2)  # P = 8, 3 blocks, 20 of 24 rows kept
    assert (projector.block_size, projector.blocks) == (8, 3)
    for rows in projector.dense_rows():
        assert set(rows.unique().tolist()) == {-1.0, 1.0}
        assert len({tuple(r.tolist()) for r in rows}) == 20
    wide = BlockSRHTProjector(40, 16, seed=2)  # d > m: one block of P = 64, 16 rows kept
    p, q = wide.dense_rows()
    assert wide.blocks == 1 and p.shape == q.shape == (16, 40) and not torch.equal(p, q)


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_update_with_logits_equals_update_with_materialized_errors(estimator):
    torch.manual_seed(1)
    spec = SketchSpec(d=6, vocab_size=50, m=16, estimator=estimator)
    activations, logits = torch.randn(9, 6), 3.0 * torch.randn(9, 50)
    targets = torch.randint(0, 50, (9,))
    targets[[0, 5]] = -100  # not scored
    doc_index = torch.tensor([0, 0, 1, 1, 1, 2, 2, 3, 3])
    logits[0] = float("nan")  # an unscored row (e.g. padding) may hold anything
    scored = targets != -100
    reference = SketchState(spec).update(
        HeadBatch(
            activations=activations[scored],
            doc_index=doc_index[scored],
            errors=_softmax_errors(logits[scored], targets[scored]).float(),
        )
    )
    fused = SketchState(spec).update(
        HeadBatch(activations=activations, doc_index=doc_index, logits=logits, targets=targets)
    )
    torch.testing.assert_close(fused.sums, reference.sums, rtol=1e-4, atol=1e-5)
    assert torch.equal(fused.token_counts, reference.token_counts)
    assert fused.flush().document_counts.tolist() == reference.flush().document_counts.tolist() == [2, 2]


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda a, z, y, d: (a, z[:, :-1], y, d), "shape"),
        (lambda a, z, y, d: (a, z.long(), y, d), "floating"),
        (lambda a, z, y, d: (a, z, y.float(), d), "integer tensor"),
        (lambda a, z, y, d: (a, z, torch.full_like(y, 50), d), "token ids"),
        (lambda a, z, y, d: (a, z, torch.full_like(y, -100), d), "no scored rows"),
        (lambda a, z, y, d: (a[:-1], z, y, d), "row counts"),
        (lambda a, z, y, d: (a, torch.where(torch.arange(4)[:, None] == 2, float("inf"), z), y, d), "NaN or \\+inf"),
        (lambda a, z, y, d: (a.masked_fill(torch.arange(4)[:, None] == 1, float("nan")), z, y, d), "NaN"),
    ],
)
def test_update_with_logits_refuses_bad_input(change, match):
    spec = SketchSpec(d=6, vocab_size=50, m=16, estimator="maclaurin-hadamard")
    batch = (torch.randn(4, 6), torch.randn(4, 50), torch.tensor([1, 2, 3, 4]), torch.tensor([0, 0, 1, 1]))
    with pytest.raises(InputError, match=match):
        a, z, y, d = change(*batch)
        SketchState(spec).update(HeadBatch(activations=a, doc_index=d, logits=z, targets=y))


def test_block_srht_reflection_sends_the_pilot_to_constant_magnitude():
    pilot = torch.tensor([3.0, -1.0, 2.0, 0.5, 1.0])
    spec = SketchSpec(d=5, vocab_size=8, m=32, estimator="maclaurin-hadamard").with_reflection(pilot)
    ua, va = FeatureMap(spec).activation_projector.project(pilot[None])
    torch.testing.assert_close(ua.abs(), torch.full_like(ua, float(pilot.norm())), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(va.abs(), torch.full_like(va, float(pilot.norm())), rtol=1e-5, atol=1e-5)
