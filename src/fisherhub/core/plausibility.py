"""Bounded claims (SPEC §3, "Bounded claims"): what the math allows a signature's numbers and an alignment estimate
to be, checked in one place. ``alignment_matrix`` runs these checks on every signature and every pair it computes
(so ``alignment``, ``compare``, the metric, ``nearest`` and selection all get them), and the index's rows get the
same bounds from their stored figures. Each check gives None or one line: what lies outside its bound, the
numbers, and the name of the check.

- *Self-dominance* (one file): R̂ = ‖μ̂‖²/D of each sketch lies in [4(n − 1)/n², 1 + √m/2] (``dominance_bounds``).
  Outside it on a sketch the writer marked unresolved (``clamped_split_norms``): noise (a short signature;
  warned, ranked after the plausible ones, not refused). Outside it otherwise: implausible (forged or damaged).
- *Alignment range* (a pair): A, S_a, S_e are cosines of non-negative kernels, so each estimate is finite and
  within ``PLAUSIBLE_Z`` of its standard errors of [0, 1 + ``shared_allowance``] (what shared documents add).
  Outside it with a signature of fewer than ``MIN_DOCUMENTS`` documents: noise.
- *Parts of one signature* (a pair): two sketches whose joint means agree to rounding are of the same (a, e)
  pairs, so their other sketches, split norms and counts agree too. Equal activation sketches alone are allowed:
  the same inputs with other labels (SPEC §5's witness).

What the file's header says against its body (fields, tensors, counts) is the loader's to refuse
(``Signature.from_bytes``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from fisherhub.core.registry import MIN_DOCUMENTS, SKETCHES
from fisherhub.core.spec import SketchSpec

#: an estimate is implausible when it lies more than this many of its standard errors outside [0, 1]: a
#: one-sided normal tail of 3e-7, so that the matrices of the benchmarks (up to 10⁵ cells) raise no false alarm
PLAUSIBLE_Z = 5.0
#: the names of the checks, as the reasons end: "(check: NAME)"
SELF_DOMINANCE = "self-dominance bound"
ALIGNMENT_RANGE = "alignment range"
SHARED_PARTS = "parts of one signature"
#: the cosine of each sketch, as a reason names it
_COSINES = dict(zip(SKETCHES, ("fisher", "activation", "error")))


def max_self_dominance(m: int) -> float:
    """The largest self-dominance R̂ = ‖μ̂‖²/D a sketch of m features can show with a resolved split norm:
    1 + √m/2. A resolved D is at least ``SPLIT_NORM_Z`` = 2 feature-level standard errors σ, and for random
    features (m exchangeable products μ̂^A_r μ̂^B_r) σ ≈ ‖μ̂^A‖‖μ̂^B‖/√m ≳ ‖μ̂‖²/√m, so R̂ ≲ √m/2; the 1 is
    slack for small m (tests/test_trust.py: resolved sketches stay under it). Larger means the split
    norm is too small for the mean: the sketch has not resolved its task, or the file was forged (shrinking
    D inflates every alignment of the signature by 1/√D)."""
    return 1.0 + m**0.5 / 2


def dominance_bounds(spec: SketchSpec, num_tokens: int, num_documents: int) -> list[tuple[float, float]]:
    """(lowest, highest) R̂ each sketch (joint, activation, error) can show. Highest: ``max_self_dominance``.
    Lowest: with half means a, b and token weights w, 1 − w, ‖μ̂‖² = ‖wa − (1 − w)b‖² + 4w(1 − w)⟨a, b⟩, so
    R̂ ≥ 4w(1 − w) ≥ 4(n − 1)/n² over the sketch's n examples (tokens; documents for the joint sketch of
    sequence granularity). Network sketches count other positions, so they get no lower bound."""
    high = max_self_dominance(spec.m)
    if spec.modules is not None:
        return [(0.0, high)] * 3
    joint = num_tokens if spec.granularity == "token" else num_documents
    return [(4 * (n - 1) / n**2, high) for n in (joint, num_tokens, num_tokens)]


def self_dominance_findings(
    spec: SketchSpec, num_tokens: int, num_documents: int, unresolved: str, dominances: Sequence[float]
) -> tuple[str | None, str | None]:
    """(doubt, noise) of a signature from its R̂ per sketch (``dominances``, ``SKETCHES`` order) and the sketches
    its writer marked unresolved (``unresolved``: the comma-separated names of ``clamped_split_norms``). The
    doubt: a sketch marked resolved whose R̂ lies outside ``dominance_bounds`` (forged or damaged). The noise:
    only sketches marked unresolved lie outside (their alignments are noise)."""
    marked = set(unresolved.split(","))
    out = [
        (name, value, low, high)
        for name, value, (low, high) in zip(SKETCHES, dominances, dominance_bounds(spec, num_tokens, num_documents))
        if not low <= value <= high
    ]
    if not out:
        return None, None
    described = ", ".join(f"{name} R̂ = {value:.3g} outside [{low:.3g}, {high:.3g}]" for name, value, low, high in out)
    if all(name in marked for name, *_ in out):
        noise = f"unresolved split norms: {described}: its alignments are noise; sketch more documents"
        return None, f"{noise} (check: {SELF_DOMINANCE})"
    doubt = (
        f"implausible split norms: {described} (the most a resolved split norm allows) although marked resolved: "
        f"forged, or damaged (check: {SELF_DOMINANCE})"
    )
    return doubt, None


def shared_allowance(dominances: torch.Tensor) -> torch.Tensor:
    """(…, n, n) min((R̂_i − 1)₊, (R̂_j − 1)₊): the most two tasks that share documents add to a cosine. Their
    shared tokens' self-pairs enter ⟨μ̂_i, μ̂_j⟩ but not the split norms; they are a part of each task's own
    self-pairs, whose excess over its split norm is R̂ − 1 (a half against its whole: the half's excess / 2, which
    is the whole's; two equal sketches: exactly R̂ − 1). ``dominances``: (…, n) R̂ of one sketch."""
    excess = (dominances - 1.0).clamp_min(0.0)
    return torch.minimum(excess[..., :, None], excess[..., None, :])


def range_doubt(values: dict[str, tuple[float, float, float]]) -> str | None:
    """Why the estimates ``values`` (cosine name -> (value, stderr, ``shared_allowance``)) cannot be true (None:
    they can): a value or standard error that is not a finite number, or a value more than ``PLAUSIBLE_Z``
    standard errors outside [0, 1 + allowance], where every cosine of non-negative kernels lies (up to what
    shared documents add)."""
    problems = []
    for name, (value, stderr, allowance) in values.items():
        if not (math.isfinite(value) and math.isfinite(stderr) and stderr >= 0):
            problems.append(f"{name} = {value:.3g} ± {stderr:.3g} is not a number")
        elif not -PLAUSIBLE_Z * stderr <= value <= 1.0 + allowance + PLAUSIBLE_Z * stderr:
            bound = f"[0, {1.0 + allowance:.3g}]"
            problems.append(f"{name} = {value:.3g} ± {stderr:.3g} outside {bound} by more than {PLAUSIBLE_Z:g} se")
    if not problems:
        return None
    return (
        f"implausible alignment: {'; '.join(problems)}: no estimate of a cosine of non-negative kernels "
        f"(check: {ALIGNMENT_RANGE})"
    )


def outside_range(values: torch.Tensor, stderr: torch.Tensor, allowance: torch.Tensor | float = 0.0) -> torch.Tensor:
    """Element-wise: the cells ``range_doubt`` refuses (not finite, or more than ``PLAUSIBLE_Z`` se outside
    [0, 1 + allowance])."""
    finite = values.isfinite() & stderr.isfinite() & (stderr >= 0)
    inside = (values >= -PLAUSIBLE_Z * stderr) & (values <= 1.0 + allowance + PLAUSIBLE_Z * stderr)
    return ~(finite & inside)


def short_noise(reason: str) -> str:
    """A ``range_doubt`` of a pair with a signature of fewer than ``MIN_DOCUMENTS`` documents, as its noise: the
    split-half estimate of such a signature's norm has noise its error bars do not show."""
    return (
        f"{reason.removesuffix(f' (check: {ALIGNMENT_RANGE})')}, from a signature of fewer than {MIN_DOCUMENTS} "
        f"documents, whose error bars miss part of its noise (check: {ALIGNMENT_RANGE})"
    ).replace("implausible alignment", "noisy alignment", 1)


def parts_doubt(differing: Sequence[str]) -> str:
    """The doubt of a pair whose joint sketches agree to rounding but whose ``differing`` parts do not."""
    return (
        f"the two share their joint sketch but not their {', '.join(differing)}: sketches of the same data agree in "
        f"all, so one was assembled from the other's parts (check: {SHARED_PARTS})"
    )


def pair_findings(
    cosines: torch.Tensor,
    stderrs: torch.Tensor,
    dominances: torch.Tensor,
    documents: Sequence[int],
    differing_parts: dict[tuple[int, int], list[str]],
) -> tuple[tuple[tuple[str | None, ...], ...], tuple[tuple[str | None, ...], ...]]:
    """(doubts, noise), each (n, n), of the pairs of an alignment matrix: ``range_doubt`` of its three cosines
    ((3, n, n) ``cosines`` and ``stderrs``, ``SKETCHES`` order; ``dominances`` (3, n) the R̂ of each sketch), a
    noise (``short_noise``) where either signature has fewer than ``MIN_DOCUMENTS`` ``documents``; then
    ``parts_doubt`` of the pairs in ``differing_parts`` ((i, j) -> what differs although their joint sketches
    agree)."""
    n = cosines.shape[-1]
    allowance = shared_allowance(dominances)
    flagged = outside_range(cosines, stderrs, allowance).any(dim=0)
    doubts: list[list[str | None]] = [[None] * n for _ in range(n)]
    noise: list[list[str | None]] = [[None] * n for _ in range(n)]
    for i, j in flagged.nonzero().tolist():
        reason = range_doubt(
            {
                _COSINES[name]: (float(cosines[k, i, j]), float(stderrs[k, i, j]), float(allowance[k, i, j]))
                for k, name in enumerate(SKETCHES)
            }
        )
        if min(documents[i], documents[j]) < MIN_DOCUMENTS and reason is not None:
            noise[i][j] = short_noise(reason)
        else:
            doubts[i][j] = reason
    for (i, j), differing in differing_parts.items():
        doubts[i][j] = "; ".join(filter(None, (doubts[i][j], parts_doubt(differing))))
    return tuple(tuple(row) for row in doubts), tuple(tuple(row) for row in noise)
