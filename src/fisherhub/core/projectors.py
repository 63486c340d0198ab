"""Random projections of one side of the kernel, in the style of trak's ``projectors.py``:
one abstract ``Projector`` and several strategies.

Each projector maps x ∈ R^n to two independent m-vectors (p·x, q·x) whose rows p_r, q_r satisfy
``E[(p_r·x)(p_r·x')] = x·x'``, so ``(p_r·x)(q_r·x)`` is a random feature of ``(x·x')²``.

Activation side (optionally after a fixed Householder reflection R that maps a pilot activation mean
onto the first axis: ``(Ra·Ra')² = (a·a')²`` and the large shared mean then costs no variance):

- ``DenseSignProjector``: p_r, q_r ∈ {±1}^d, one GEMM, O(md) per token.
- ``BlockSRHTProjector``: zero-pad to P = 2^⌈log2 d⌉, ⌈m/P⌉ blocks per side, each with its own sign
  vector, size-P transforms, keep m of the rows. Rows stay ±1; O(m log P) per token.

Vocabulary side (all three fold ``Σ_j D[j] x_j`` into bin j mod T, transform, keep m rows, so a one-hot
x = onehot(y) folds to D[y] in bin y mod T):

- ``SRHTProjector`` (the paper's): flip signs, zero-pad to T = P = 2^⌈log2 K⌉, unnormalised
  Walsh–Hadamard transform, keep m sampled coordinates. O(P log P) per token.
- ``FoldedSRHTProjector`` (ours): T = Q = 2^⌈log2 m⌉ bins; rows ``p_r[j] = H_Q[r, j mod Q] D[j]`` stay
  ±1 and mutually orthogonal; O(K + Q log Q).
- ``SliceSignFoldedSRHTProjector`` (ours, the default before ``maclaurin-hadamard-permuted``): the same
  fold with signs D[bQ + q] = α_b β_q (one sign per width-Q slice b times one per bin q), so folding is
  one small GEMM, ``β ∘ (αᵀ X)`` with X the (K/Q, Q) slices, instead of K/Q passes. Unbiased over seeds,
  but every pair (j, j + Q) shares one sign product α_0 α_1: label structure Q apart adds up instead of
  cancelling, and one seed's S_e is off by ±0.4 (issue 14).
- ``ChunkPermutedFoldedSRHTProjector`` (ours, the default's): i.i.d. signs per coordinate, and before the
  fold the vocabulary is permuted at random in chunks of ``PERMUTATION_CHUNK`` coordinates, so which
  coordinates share a bin does not follow the vocabulary's order: two contiguous label blocks collide in
  as many bins as two random sets do (in expectation), whatever their offsets, and each colliding pair
  has its own random sign product.

Each projector keeps its own random order of rows, so the two sides of a feature pair different
Walsh functions. Signs and indices come from ``hashing`` streams, never from torch generators.
"""

from __future__ import annotations

import abc
import math
import threading
from collections.abc import Callable

import torch

from fisherhub.core import hashing
from fisherhub.core.hashing import Stream
from fisherhub.core.hadamard import fwht, next_power_of_two

#: Σ exp(z) below this (float32 normal range ends at 1.2e-38) is recomputed with the max logit subtracted.
SMALLEST_SAFE_NORMALIZER = 1e-30
LOG2_E = 1.0 / math.log(2.0)
#: on the CPU, projections run over blocks of rows whose largest intermediate (exp(z), or a transform's input)
#: is about this size, so each pass over it stays in cache.
CPU_BLOCK_BYTES = 4 * 2**20
#: the same for the transforms' inputs (read by small GEMMs: they fit in L2). On the vocabulary side a transform
#: block is a whole number of exp blocks, so at large K (few rows per exp block) the GEMMs stay large enough.
CPU_TRANSFORM_BLOCK_BYTES = 2**20
#: coordinates moved together by ``ChunkPermutedFoldedSRHTProjector``: 16 float32 = one 64-byte cache line,
#: so the permutation is one gather of lines (measured 4.5× faster than a gather of single coordinates).
PERMUTATION_CHUNK = 16


class Projector(abc.ABC):
    """Maps (N, n) inputs to a pair of (N, m) projections (P x, Q x) with independent rows."""

    def __init__(self, in_features: int, m: int):
        self.in_features = in_features
        self.m = m
        self._device_copies: dict[tuple, torch.Tensor] = {}

    @abc.abstractmethod
    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x @ Pᵀ, x @ Qᵀ) in float32, each of shape (N, m)."""

    def dense_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The two (m, n) projection matrices, for tests on small sizes."""
        eye = torch.eye(self.in_features)
        p, q = self.project(eye)
        return p.T.contiguous(), q.T.contiguous()

    def _on(self, like: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``tensors`` moved to ``like``'s device (floating ones to its dtype), cached per device."""
        copies = []
        for tensor in tensors:
            dtype = like.dtype if tensor.is_floating_point() else tensor.dtype
            key = (id(tensor), like.device, dtype)
            if key not in self._device_copies:
                self._device_copies[key] = tensor.to(device=like.device, dtype=dtype)
            copies.append(self._device_copies[key])
        return tuple(copies)


def row_blocks(count: int, row_bytes: int, device: torch.device, block_bytes: int | None = None) -> list[slice]:
    """Contiguous ranges covering ``range(count)``: on the CPU of ``block_bytes`` (default ``CPU_BLOCK_BYTES``)
    over rows of ``row_bytes`` each (at least one row), elsewhere one range. Every projection here computes
    each row alone, so its bits do not depend on the blocks."""
    if device.type != "cpu":
        return [slice(0, count)]
    rows = max(1, (CPU_BLOCK_BYTES if block_bytes is None else block_bytes) // row_bytes)
    return [slice(start, min(start + rows, count)) for start in range(0, count, rows)]


def kept_rows(seed: int, streams: tuple[int, int], population: int, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The m kept rows of each side, (2, m) in feature order (each side its own random arrangement), and
    the same as indices into a side-major (2 · population) layout, for ``keep_rows``."""
    rows = torch.stack([hashing.random_arrangement(seed, stream, population, m) for stream in streams])
    return rows, torch.cat([rows[0], rows[1] + population])


def keep_rows(transformed: torch.Tensor, flat: torch.Tensor, out: torch.Tensor) -> None:
    """(N, 2, population) transforms -> the kept rows of both sides, side-major into ``out`` (N, 2m), in one gather."""
    torch.index_select(transformed.reshape(transformed.shape[0], -1), 1, flat, out=out)


def split_sides(kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 2m) side-major projections -> the two sides' (N, m) views."""
    half = kept.shape[1] // 2
    return kept[:, :half], kept[:, half:]


def householder_vector(target: torch.Tensor) -> torch.Tensor:
    """Unit w with (I − 2wwᵀ) target/‖target‖ = first axis (w = 0 if already on it)."""
    direction = target.double() / target.double().norm()
    w = direction.clone()
    w[0] -= 1.0
    norm = w.norm()
    if norm < 1e-12:
        return torch.zeros_like(target, dtype=torch.float32)
    return (w / norm).float()


class DenseSignProjector(Projector):
    """Rademacher rows on the activation side, optionally after a Householder reflection."""

    def __init__(self, d: int, m: int, seed: int, reflection_target: torch.Tensor | None = None):
        super().__init__(d, m)
        signs = torch.cat(
            [
                hashing.rademacher(seed, Stream.ACTIVATION_P, (m, d)),
                hashing.rademacher(seed, Stream.ACTIVATION_Q, (m, d)),
            ]
        )
        if reflection_target is not None:
            w = householder_vector(reflection_target)
            signs = signs - 2.0 * (signs @ w)[:, None] * w[None, :]
        self._matrix_t = signs.T.contiguous()  # (d, 2m): [P; Q]ᵀ, reflection folded in (P R, Q R)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (matrix_t,) = self._on(x, self._matrix_t)
        both = x @ matrix_t
        return both[:, : self.m], both[:, self.m :]


class BlockSRHTProjector(Projector):
    """Activation side: ⌈m/P⌉ independent SRHT blocks per side over a zero-padded to P = 2^⌈log2 d⌉.

    Row (b, r) of a side is ``H_P[r, i] D_b[i]`` (i < d), after the optional reflection
    ``a ↦ a − 2(w·a)w``; m of the blocks·P rows are kept, in a random order per side.
    """

    def __init__(self, d: int, m: int, seed: int, reflection_target: torch.Tensor | None = None):
        super().__init__(d, m)
        self.block_size = next_power_of_two(d)
        self.blocks = -(-m // self.block_size)
        self._signs = torch.cat(
            [
                hashing.rademacher(seed, Stream.ACTIVATION_P, (self.blocks, self.block_size))[:, :d],
                hashing.rademacher(seed, Stream.ACTIVATION_Q, (self.blocks, self.block_size))[:, :d],
            ]
        )  # (2·blocks, d)
        streams = (Stream.ACTIVATION_INDEX_P, Stream.ACTIVATION_INDEX_Q)
        self.rows, self._flat_rows = kept_rows(seed, streams, self.blocks * self.block_size, m)
        self._reflection = None if reflection_target is None else householder_vector(reflection_target)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        signs, rows = self._on(x, self._signs, self._flat_rows)
        w = None if self._reflection is None else self._on(x, self._reflection)[0]
        kept = x.new_empty(x.shape[0], 2 * self.m)
        row_bytes = 4 * len(signs) * self.block_size
        for block in row_blocks(x.shape[0], row_bytes, x.device, CPU_TRANSFORM_BLOCK_BYTES):
            rows_in = x[block]
            if w is not None:
                rows_in = rows_in - 2.0 * (rows_in * w).sum(dim=1, keepdim=True) * w  # row by row
            keep_rows(fwht(rows_in[:, None, :] * signs[None, :, :], self.block_size), rows, out=kept[block])
        return split_sides(kept)


class _VocabularyProjector(Projector):
    """Vocabulary side: fold ``Σ_j D[j] x_j`` into bin(j) (per side), size-T transform, keep m rows.

    ``signs`` (2, K) is D for the two sides, ``bins`` (K,) the bin of each coordinate (j mod T unless a
    subclass permutes the vocabulary first); subclasses fold x with them (possibly faster than
    elementwise). Because the fold is linear and one-hot vectors fold to a single signed bin,
    ``project_softmax_errors`` gets the projections of e = softmax(z) − onehot(y) without forming e.
    """

    def __init__(self, vocab_size: int, m: int, seed: int, transform_size: int, signs: torch.Tensor):
        super().__init__(vocab_size, m)
        if m > transform_size:
            raise ValueError(f"m={m} exceeds the transform size {transform_size}")
        self.transform_size = transform_size
        self.signs = signs  # D, (2, K) float32 ±1: the sign of coordinate j on each side
        self.bins = torch.arange(vocab_size) % transform_size  # the bin coordinate j folds into
        self.row_width = vocab_size  # floats per row of the scratch buffers (≥ K; a subclass may pad)
        self._scratch_buffers: dict[tuple[str, torch.device, int], torch.Tensor] = {}
        streams = (Stream.VOCAB_INDEX_P, Stream.VOCAB_INDEX_Q)
        self.rows, self._flat_rows = kept_rows(seed, streams, transform_size, m)

    def _scratch(self, name: str, rows: int, device: torch.device, width: int | None = None) -> torch.Tensor:
        """A float32 (rows, K) view of a (rows, ``row_width``) buffer (for exp(z), or a permuted copy), or a
        (rows, ``width``) one, kept between calls (a fresh one each block would cost as much in page faults as
        the exp itself), one per thread (``parallel.map_row_ranges`` runs row ranges in threads)."""
        key = (name, device, threading.get_ident())
        buffer = self._scratch_buffers.get(key)
        if buffer is None or buffer.shape[0] < rows:
            buffer = self._scratch_buffers[key] = torch.empty(rows, width or self.row_width, device=device)
        return buffer[:rows, : width or self.in_features]

    def _blocks(self, count: int, device: torch.device) -> list[tuple[slice, list[slice]]]:
        """Transform blocks, each with the blocks of rows whose exp(z) (``row_width`` floats a row) stays in
        cache: a transform block is the most of these that fit in ``CPU_TRANSFORM_BLOCK_BYTES`` of folds (2T
        floats a row), at least one."""
        exp_rows = row_blocks(count, 4 * max(self.row_width, 2 * self.transform_size), device)
        if not exp_rows:
            return []
        per_transform = max(1, CPU_TRANSFORM_BLOCK_BYTES // (8 * self.transform_size * exp_rows[0].stop))
        groups = [exp_rows[start : start + per_transform] for start in range(0, len(exp_rows), per_transform)]
        return [(slice(group[0].start, group[-1].stop), group) for group in groups]

    def fold(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """(N, K) float32 -> (N, 2, T): ``Σ_j D[s, j] x_j`` in bin j mod T for each side s (into ``out``)."""
        if out is None:
            out = x.new_empty(x.shape[0], 2, self.transform_size)
        self._fold_into(x, out)
        return out

    @abc.abstractmethod
    def _fold_into(self, x: torch.Tensor, out: torch.Tensor) -> None:
        """Write the fold of x (N, K) into out (N, 2, T)."""

    def _folded(self, rows: int, device: torch.device) -> torch.Tensor:
        """A (rows, 2, T) scratch buffer for a block's fold."""
        return self._scratch("folded", rows, device, width=2 * self.transform_size).unflatten(
            1, (2, self.transform_size)
        )

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kept = torch.empty(x.shape[0], 2 * self.m, device=x.device)
        (rows,) = self._on(kept, self._flat_rows)
        for group, blocks in self._blocks(x.shape[0], x.device):
            folded = self._folded(group.stop - group.start, x.device)
            for block in blocks:
                self.fold(x[block].float(), out=folded[block.start - group.start : block.stop - group.start])
            keep_rows(fwht(folded), rows, out=kept[group])
        return split_sides(kept)

    def project_softmax_errors(
        self, logits: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Projections of e = softmax(z) − onehot(y) for the logits rows ``rows`` (all if None).

        fold(e) = fold(exp(z − c)) / Σ exp(z − c) − D[y] in y's bin for any shift c: exp, sum, fold and
        transform over blocks of rows that stay in cache, no (N, K) temporary. c = 0, unless Σ exp(z)
        overflows or underflows for a row: then c = max z for that row. ``targets`` are the rows' y.
        """
        count = logits.shape[0] if rows is None else len(rows)
        kept = torch.empty(count, 2 * self.m, device=logits.device)
        signs, bins, kept_indices = self._on(kept, self.signs, self.bins, self._flat_rows)
        target_bins = bins[targets][:, None] + torch.tensor([0, self.transform_size], device=kept.device)  # in (2T)
        negated_target_signs = -signs[:, targets].T  # x + (−s) is x − s exactly
        for group, blocks in self._blocks(count, logits.device):
            folded = self._folded(group.stop - group.start, logits.device)
            for block in blocks:
                block_logits = logits[block] if rows is None else logits.index_select(0, rows[block])
                exps = self._scratch("exp", len(block_logits), logits.device)
                if block_logits.dtype == torch.float32:  # exp(z) = 2^(z log2 e): exp2 is the faster kernel
                    torch.mul(block_logits, LOG2_E, out=exps).exp2_()
                else:  # bf16 / fp16 logits: in float32
                    exps.copy_(block_logits).mul_(LOG2_E).exp2_()
                normalizers = exps.sum(dim=1)
                _shift_unsafe_rows(block_logits, exps, normalizers)
                block_folded = self.fold(exps, out=folded[block.start - group.start : block.stop - group.start])
                block_folded.div_(normalizers[:, None, None])
                block_folded.view(len(exps), -1).scatter_add_(1, target_bins[block], negated_target_signs[block])
            keep_rows(fwht(folded), kept_indices, out=kept[group])
        return split_sides(kept)


def _shift_unsafe_rows(logits: torch.Tensor, exps: torch.Tensor, normalizers: torch.Tensor) -> None:
    """Recompute exp(z − max z) and its sum, in place, for the rows whose Σ exp(z) overflows or underflows
    (only those, so each row's value does not depend on the others in the block)."""
    smallest, largest = torch.aminmax(normalizers)  # NaN in either: some row is unsafe
    if not (float(smallest) > SMALLEST_SAFE_NORMALIZER and float(largest) < math.inf):
        rows_unsafe = (~(normalizers.isfinite() & (normalizers > SMALLEST_SAFE_NORMALIZER))).nonzero().flatten()
        unsafe_logits = logits.index_select(0, rows_unsafe).float()
        recomputed = (unsafe_logits - unsafe_logits.amax(dim=1, keepdim=True)).exp_()
        exps.index_copy_(0, rows_unsafe, recomputed)
        normalizers.index_copy_(0, rows_unsafe, recomputed.sum(dim=1))


def _iid_signs(vocab_size: int, seed: int) -> torch.Tensor:
    return torch.stack(
        [
            hashing.rademacher(seed, Stream.VOCAB_SIGNS_P, (vocab_size,)),
            hashing.rademacher(seed, Stream.VOCAB_SIGNS_Q, (vocab_size,)),
        ]
    )


class SRHTProjector(_VocabularyProjector):
    """The paper's subsampled randomized Hadamard transform over P = 2^⌈log2 K⌉ coordinates."""

    def __init__(self, vocab_size: int, m: int, seed: int):
        super().__init__(vocab_size, m, seed, next_power_of_two(max(vocab_size, m)), _iid_signs(vocab_size, seed))

    def _fold_into(self, x: torch.Tensor, out: torch.Tensor) -> None:
        """D x zero-padded to P (each coordinate its own bin)."""
        (signs,) = self._on(x, self.signs)
        out[:, :, self.in_features :] = 0.0
        torch.mul(x[:, None, :], signs[None, :, :], out=out[:, :, : self.in_features])


class FoldedSRHTProjector(_VocabularyProjector):
    """Fold K coordinates into Q = 2^⌈log2 m⌉ bins (j ↦ j mod Q) with i.i.d. signs, size-Q transform."""

    def __init__(self, vocab_size: int, m: int, seed: int):
        super().__init__(vocab_size, m, seed, next_power_of_two(m), _iid_signs(vocab_size, seed))
        self._sign_ratio = self.signs[0] * self.signs[1]

    def _fold_into(self, x: torch.Tensor, out: torch.Tensor) -> None:
        signs, ratio = self._on(x, self.signs, self._sign_ratio)
        _sum_signed_slices(x, signs[0], ratio, out, signed=self._scratch("signed", x.shape[0], x.device))


def _sum_signed_slices(
    x: torch.Tensor, signs: torch.Tensor, ratio: torch.Tensor, out: torch.Tensor, signed: torch.Tensor
) -> None:
    """out (N, 2, Q) = Σ_b D_b x_b over the slices x_b of width Q of x (N, K), summed in slice order, for the
    two sides' signs D_0 = ``signs`` and D_1 = D_0 ∘ ``ratio``. ``signed`` (N, K; may be x) receives x ∘ D_0,
    then in place ∘ D_0 D_1, which is x ∘ D_1 exactly for ±1 signs: each side is one sum over the slices."""
    q, width = out.shape[2], x.shape[1]
    full = width // q * q
    torch.mul(x, signs, out=signed)
    for side in range(2):
        if side:
            signed.mul_(ratio)
        torch.sum(signed[:, :full].unflatten(1, (full // q, q)), dim=1, out=out[:, side])
        if full < width:  # the partial last slice, added last
            out[:, side, : width - full] += signed[:, full:]


class ChunkPermutedFoldedSRHTProjector(_VocabularyProjector):
    """``FoldedSRHTProjector``'s fold and transform after a random permutation of the vocabulary in chunks
    of ``PERMUTATION_CHUNK`` coordinates (the < ``PERMUTATION_CHUNK`` coordinates of a partial last chunk
    stay last): coordinate j goes to position pos(j), bin(j) = pos(j) mod Q, sign D[j] i.i.d.

    Scratch rows are padded to whole chunks (``row_width``), so the permutation is one gather of aligned
    chunks whatever K; the padding is gathered last, after position K, and never folded.
    """

    def __init__(self, vocab_size: int, m: int, seed: int):
        super().__init__(vocab_size, m, seed, next_power_of_two(m), _iid_signs(vocab_size, seed))
        self.chunks = vocab_size // PERMUTATION_CHUNK
        self.chunk_order = hashing.random_arrangement(seed, Stream.VOCAB_CHUNK_ORDER, self.chunks, self.chunks)
        within = torch.arange(PERMUTATION_CHUNK)
        permuted = (self.chunk_order[:, None] * PERMUTATION_CHUNK + within).flatten()  # coordinate at each position
        self.coordinate_at = torch.cat([permuted, torch.arange(len(permuted), vocab_size)])
        self.bins = torch.empty_like(self.coordinate_at)
        self.bins[self.coordinate_at] = torch.arange(vocab_size) % self.transform_size
        self._position_signs = self.signs[:, self.coordinate_at].contiguous()
        self._position_sign_ratio = self._position_signs[0] * self._position_signs[1]
        self.row_width = -(-vocab_size // PERMUTATION_CHUNK) * PERMUTATION_CHUNK
        self._padded_chunk_order = torch.cat(
            [self.chunk_order, torch.arange(self.chunks, self.row_width // PERMUTATION_CHUNK)]
        )  # the partial last chunk, if any, stays last

    def _chunks(self, x: torch.Tensor) -> torch.Tensor | None:
        """x (N, K) as (N, row_width / chunk, chunk) over its rows' storage, or None if its rows are not
        ``row_width`` apart with the padding in x's storage (then the fold copies x into a padded buffer)."""
        rows = x.shape[0]
        padded = x.stride(1) == 1 and (rows <= 1 or x.stride(0) == self.row_width)
        end = x.storage_offset() + rows * self.row_width  # floats the padded rows span (none for no rows)
        if not padded or end * x.element_size() > x.untyped_storage().nbytes():
            return None
        return x.as_strided(
            (rows, self.row_width // PERMUTATION_CHUNK, PERMUTATION_CHUNK),
            (self.row_width, PERMUTATION_CHUNK, 1),
            x.storage_offset(),
        )

    def _fold_into(self, x: torch.Tensor, out: torch.Tensor) -> None:
        order, signs, ratio = self._on(x, self._padded_chunk_order, self._position_signs, self._position_sign_ratio)
        chunks = self._chunks(x)
        if chunks is None:
            chunks = self._chunks(self._scratch("padded input", x.shape[0], x.device).copy_(x))
        assert chunks is not None  # the padded scratch has its rows row_width apart
        permuted = self._scratch("permuted", x.shape[0], x.device)
        torch.index_select(chunks, 1, order, out=self._chunks(permuted))
        _sum_signed_slices(permuted, signs[0], ratio, out, signed=permuted)


class SliceSignFoldedSRHTProjector(_VocabularyProjector):
    """Fold with signs D[bQ + q] = α_b β_q: ``β ∘ Σ_b α_b x_b`` as one GEMM over the K/Q slices x_b."""

    def __init__(self, vocab_size: int, m: int, seed: int):
        q = next_power_of_two(m)
        slices = -(-vocab_size // q)
        streams = (Stream.VOCAB_SIGNS_P, Stream.VOCAB_SIGNS_Q)
        both = torch.stack([hashing.rademacher(seed, stream, (slices + q,)) for stream in streams])
        slice_signs, bin_signs = both[:, :slices].contiguous(), both[:, slices:].contiguous()
        signs = (slice_signs[:, :, None] * bin_signs[:, None, :]).reshape(2, -1)[:, :vocab_size]
        super().__init__(vocab_size, m, seed, q, signs)
        self._slice_signs, self._bin_signs = slice_signs, bin_signs

    def _fold_into(self, x: torch.Tensor, out: torch.Tensor) -> None:
        slice_signs, bin_signs = self._on(x, self._slice_signs, self._bin_signs)
        q = self.transform_size
        full = (self.in_features // q) * q
        torch.matmul(slice_signs[:, : full // q], x[:, :full].unflatten(1, (full // q, q)), out=out)  # (N, 2, Q)
        if full < self.in_features:
            out[:, :, : self.in_features - full].addcmul_(x[:, None, full:], slice_signs[None, :, -1:])
        out.mul_(bin_signs)


#: each built as (d, m, seed) or (d, m, seed, reflection_target).
ACTIVATION_PROJECTORS: dict[str, Callable[..., Projector]] = {
    "dense-sign": DenseSignProjector,
    "block-srht": BlockSRHTProjector,
}
VOCABULARY_PROJECTORS: dict[str, Callable[[int, int, int], _VocabularyProjector]] = {
    "srht": SRHTProjector,
    "folded": FoldedSRHTProjector,
    "folded-slice-signs": SliceSignFoldedSRHTProjector,
    "folded-chunk-permuted": ChunkPermutedFoldedSRHTProjector,
}
