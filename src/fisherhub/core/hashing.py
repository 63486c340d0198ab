"""Counter-based hashing: every random sign and sampled index is a pure function of
(seed, stream, index), computed on the CPU with numpy's wrapping uint64 arithmetic.

``hash64(seed, stream, i) = splitmix64(splitmix64(splitmix64(seed) + stream) + i)`` where
splitmix64 is Steele, Lea & Flood's finaliser (the one in ``java.util.SplittableRandom``).
The same (seed, stream, index) gives the same bits on every machine, OS and library version,
unlike ``torch.Generator`` streams.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 output function applied element-wise to a uint64 array."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def hash64(seed: int, stream: int, index: np.ndarray) -> np.ndarray:
    """64 hashed bits for each ``index`` (uint64 array) of the given (seed, stream)."""
    with np.errstate(over="ignore"):
        key = splitmix64(splitmix64(np.uint64(seed % 2**64)) + np.uint64(stream))
        return splitmix64(key + np.asarray(index, dtype=np.uint64))


def rademacher(seed: int, stream: int, shape: tuple[int, ...]) -> torch.Tensor:
    """A float32 tensor of ±1 entries (the top hash bit), indexed in row-major order."""
    count = int(np.prod(shape))
    bits = hash64(seed, stream, np.arange(count, dtype=np.uint64)) >> np.uint64(63)
    signs = 1.0 - 2.0 * bits.astype(np.float32)
    return torch.from_numpy(signs.reshape(shape))


def random_arrangement(seed: int, stream: int, population: int, count: int) -> torch.Tensor:
    """``count`` distinct indices of ``range(population)`` in hash-key order (a random k-permutation).

    The order matters: two projectors that keep the same rows must pair them differently, or their
    products share Walsh functions and the features stop being independent.
    """
    keys = hash64(seed, stream, np.arange(population, dtype=np.uint64))
    return torch.from_numpy(np.argsort(keys, kind="stable")[:count].astype(np.int64))


def derived_seed(seed: int, label: str) -> int:
    """A seed in [0, 2⁶³) for an independent set of projections named ``label`` (e.g. a module name):
    the top 63 bits of ``hash64(seed, Stream.DERIVED_SEED, k)``, k the first 8 bytes (little-endian) of
    sha256(label)."""
    key = np.array([int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "little")], dtype=np.uint64)
    return int(hash64(seed, Stream.DERIVED_SEED, key)[0] >> np.uint64(1))


def uniforms(seed: int, stream: int, index: np.ndarray) -> torch.Tensor:
    """Float64 uniforms in [0, 1) from the top 53 hash bits of each index."""
    bits = hash64(seed, stream, index) >> np.uint64(11)
    return torch.from_numpy(bits.astype(np.float64) * 2.0**-53)


class Stream:
    """Hash stream numbers: one per independent random object of a sketch."""

    ACTIVATION_P = 1
    ACTIVATION_Q = 2
    VOCAB_SIGNS_P = 3
    VOCAB_SIGNS_Q = 4
    VOCAB_INDEX_P = 5
    VOCAB_INDEX_Q = 6
    TRUE_FISHER_LABELS = 7
    ACTIVATION_INDEX_P = 8
    ACTIVATION_INDEX_Q = 9
    DERIVED_SEED = 10
