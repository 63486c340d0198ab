"""Random projections of one side of the kernel, in the style of trak's ``projectors.py``:
one abstract ``Projector`` and several strategies.

Each projector maps x ∈ R^n to two independent m-vectors (p·x, q·x) whose rows p_r, q_r satisfy
``E[(p_r·x)(p_r·x')] = x·x'``, so ``(p_r·x)(q_r·x)`` is a random feature of ``(x·x')²``.

- ``DenseSignProjector`` (activation side): p_r, q_r ∈ {±1}^d, optionally composed with a fixed
  Householder reflection R that maps a pilot activation mean onto the first axis
  (``(Ra·Ra')² = (a·a')²``; the large shared mean then costs no variance).
- ``SRHTProjector`` (vocabulary side, the paper's): flip signs, zero-pad to P = 2^⌈log2 K⌉,
  unnormalised Walsh–Hadamard transform, keep m sampled coordinates
  (each projector its own random order, so the two pair different Walsh rows). O(P log P) per token.
- ``FoldedSRHTProjector`` (vocabulary side, ours): flip signs, fold the K coordinates into
  Q = 2^⌈log2 m⌉ bins (coordinate j goes to bin j mod Q), size-Q transform, keep m coordinates.
  Rows ``p_r[j] = H_Q[r, j mod Q] D[j]`` stay ±1 and mutually orthogonal; O(K + Q log Q).

Signs and indices come from ``hashing`` streams, never from torch generators.
"""

from __future__ import annotations

import abc

import torch

from fishersketch.core import hashing
from fishersketch.core.hadamard import fwht, next_power_of_two


class Stream:
    """Hash stream numbers: one per independent random object of a sketch."""

    ACTIVATION_P = 1
    ACTIVATION_Q = 2
    VOCAB_SIGNS_P = 3
    VOCAB_SIGNS_Q = 4
    VOCAB_INDEX_P = 5
    VOCAB_INDEX_Q = 6
    TRUE_FISHER_LABELS = 7


class Projector(abc.ABC):
    """Maps (N, n) inputs to a pair of (N, m) projections (P x, Q x) with independent rows."""

    def __init__(self, in_features: int, m: int):
        self.in_features = in_features
        self.m = m

    @abc.abstractmethod
    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x @ Pᵀ, x @ Qᵀ) in float32, each of shape (N, m)."""

    def dense_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The two (m, n) projection matrices, for tests on small sizes."""
        eye = torch.eye(self.in_features)
        p, q = self.project(eye)
        return p.T.contiguous(), q.T.contiguous()


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
        self._cache: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}

    def _matrix_on(self, like: torch.Tensor) -> torch.Tensor:
        key = (like.device, like.dtype)
        if key not in self._cache:
            self._cache[key] = self._matrix_t.to(device=like.device, dtype=like.dtype)
        return self._cache[key]

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        both = x @ self._matrix_on(x)
        return both[:, : self.m], both[:, self.m :]


def householder_vector(target: torch.Tensor) -> torch.Tensor:
    """Unit w with (I − 2wwᵀ) target/‖target‖ = first axis (w = 0 if already on it)."""
    direction = target.double() / target.double().norm()
    w = direction.clone()
    w[0] -= 1.0
    norm = w.norm()
    if norm < 1e-12:
        return torch.zeros_like(target, dtype=torch.float32)
    return (w / norm).float()


class _VocabularyProjector(Projector):
    """Shared parts of the Hadamard-based vocabulary projectors: sign vectors and sampled rows."""

    def __init__(self, vocab_size: int, m: int, seed: int, transform_size: int):
        super().__init__(vocab_size, m)
        if m > transform_size:
            raise ValueError(f"m={m} exceeds the transform size {transform_size}")
        self.transform_size = transform_size
        self._signs = torch.stack(
            [
                hashing.rademacher(seed, Stream.VOCAB_SIGNS_P, (vocab_size,)),
                hashing.rademacher(seed, Stream.VOCAB_SIGNS_Q, (vocab_size,)),
            ]
        )
        self._rows = torch.stack(
            [
                hashing.random_arrangement(seed, Stream.VOCAB_INDEX_P, transform_size, m),
                hashing.random_arrangement(seed, Stream.VOCAB_INDEX_Q, transform_size, m),
            ]
        )
        self._cache: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def _on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device not in self._cache:
            self._cache[device] = (self._signs.to(device), self._rows.to(device))
        return self._cache[device]

    @abc.abstractmethod
    def _transform_input(self, x: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
        """(N, K) float32 inputs, (2, K) sign vectors -> (2, N, transform_size) sign-flipped inputs."""

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        signs, rows = self._on(x.device)
        transformed = fwht(self._transform_input(x.float(), signs))
        p = transformed[0].index_select(1, rows[0])
        q = transformed[1].index_select(1, rows[1])
        return p, q


class SRHTProjector(_VocabularyProjector):
    """The paper's subsampled randomized Hadamard transform over P = 2^⌈log2 K⌉ coordinates."""

    def __init__(self, vocab_size: int, m: int, seed: int):
        super().__init__(vocab_size, m, seed, next_power_of_two(max(vocab_size, m)))

    def _transform_input(self, x: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
        """D x zero-padded to P, written in place (no (2, N, K) temporary)."""
        padded = x.new_zeros(2, x.shape[0], self.transform_size)
        torch.mul(x[None, :, :], signs[:, None, :], out=padded[:, :, : self.in_features])
        return padded


class FoldedSRHTProjector(_VocabularyProjector):
    """Fold K coordinates into Q = 2^⌈log2 m⌉ bins (j ↦ j mod Q), then a size-Q transform."""

    def __init__(self, vocab_size: int, m: int, seed: int):
        super().__init__(vocab_size, m, seed, next_power_of_two(m))

    def _transform_input(self, x: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
        """Σ_b D_b x_b over the K/Q slices x_b of width Q, accumulated slice by slice in order."""
        q = self.transform_size
        folded = x.new_zeros(2, x.shape[0], q)
        for start in range(0, self.in_features, q):
            stop = min(start + q, self.in_features)
            folded[:, :, : stop - start].addcmul_(x[None, :, start:stop], signs[:, None, start:stop])
        return folded


VOCABULARY_PROJECTORS: dict[str, type[_VocabularyProjector]] = {
    "srht": SRHTProjector,
    "folded": FoldedSRHTProjector,
}
