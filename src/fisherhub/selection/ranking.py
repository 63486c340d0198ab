"""Ranking as pure functions: the scores, which signature of each candidate to compare, whether a candidate
and the target are comparable (``SketchSpec.differences``), the base model signatures agree on, and the order."""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from fisherhub.core.errors import InputError
from fisherhub.options import SCORES
from fisherhub.core.spec import SketchSpec

if TYPE_CHECKING:
    from fisherhub.core.alignment import AlignmentResult
    from fisherhub.selection.candidates import Candidate, SignatureOption
    from fisherhub.selection.results import RankedCandidate

SCORE_LABELS = {"fisher": "A (Fisher)", "activation": "S_a (activation)", "error": "S_e (error)"}
#: the geometries a row can be ranked by (``auto`` resolves to one of them)
ROW_SCORES = tuple(SCORE_LABELS)
#: the ``AlignmentResult`` field holding each score's standard error
STDERR_FIELDS = {"fisher": "stderr", "activation": "activation_stderr", "error": "error_stderr"}

Row = TypeVar("Row", bound="RankedCandidate")


def check_score(score: str) -> str:
    if score not in SCORES:
        raise InputError(
            f"score must be one of {SCORES} (Fisher alignment, activation or error only, or auto: the geometry that "
            f"carries the signal), got {score!r}"
        )
    return score


#: an estimate is implausible when it lies more than this many of its standard errors outside [0, 1]
PLAUSIBLE_Z = 4.0


def implausible_scores(result: AlignmentResult) -> str | None:
    """Why an alignment's estimates cannot be true (None: they can): A, S_a and S_e are cosines of
    non-negative kernels, in [0, 1], so an estimate more than ``PLAUSIBLE_Z`` standard errors outside, or a
    value or standard error that is not a finite number, comes from a signature that is not what it says."""
    problems = []
    for score, stderr_field in STDERR_FIELDS.items():
        value, stderr = getattr(result, score), getattr(result, stderr_field)
        if not (math.isfinite(value) and math.isfinite(stderr) and stderr >= 0):
            problems.append(f"{score} = {value:.3g} ± {stderr:.3g}")
        elif not -PLAUSIBLE_Z * stderr <= value <= 1.0 + PLAUSIBLE_Z * stderr:
            problems.append(f"{score} = {value:.3g} ± {stderr:.3g} outside [0, 1]")
    return f"implausible alignment: {'; '.join(problems)}" if problems else None


def best_first(rows: Iterable[Row]) -> list[Row]:
    """Rows by their score, highest first; rows in ``doubt`` (implausible numbers) after every other row, so
    that none of them can be the best."""
    return sorted(rows, key=lambda row: (row.doubt is None, row.score if math.isfinite(row.score) else -math.inf), reverse=True)


def choose_options(
    usable: Sequence[tuple[Candidate, list[SignatureOption]]], target_sketch_ids: Iterable[str]
) -> list[tuple[Candidate, SignatureOption]]:
    """Per candidate, the signature option to compare: one whose sketch id the target has, else the sketch id
    most candidates share (so a target to sketch is sketched as few times as possible)."""
    have = set(target_sketch_ids)
    shared = collections.Counter(sketch_id for _, options in usable for sketch_id in {o.sketch_id for o in options})
    chosen = []
    for candidate, options in usable:
        preferred = [o for o in options if o.sketch_id in have] or options
        chosen.append((candidate, max(preferred, key=lambda o: shared[o.sketch_id])))
    return chosen


def incompatibility(target: SketchSpec, candidate: SketchSpec) -> str | None:
    """Why a candidate's signature cannot be compared with the target's (None when it can): the spec fields
    that differ, or, under the same sketch id, the pilot directions of their reflections."""
    if target.compatible_with(candidate):
        return None
    differences = target.differences(candidate)
    fields = ", ".join(f"{k}: target {mine!r} vs {theirs!r}" for k, (mine, theirs) in differences.items())
    if candidate.sketch_id == target.sketch_id:
        return f"other pilot direction ({fields})"
    return f"other sketch id {candidate.sketch_id} ({fields}); sketch the target like= it"


def common_base_model(base_models: Iterable[str | None], named_by: str) -> str | None:
    """The one base model that ``base_models`` name (None when none does); ``named_by`` says whose they are."""
    named = sorted({base for base in base_models if base})
    if len(named) > 1:
        raise InputError(
            f"{named_by} name several base models ({', '.join(named)}): pass base_model= (--base-model) to choose"
        )
    return named[0] if named else None


#: a candidate is significantly above 0 when its score exceeds this many standard errors
SIGNIFICANT_STDERRS = 2.0
MIX_TYPES = ("cat", "linear")  # the add_weighted_adapter combinations Selection.mix offers


def mixing_weights(scores: Sequence[float], stderrs: Sequence[float], temperature: float = 1.0) -> list[float]:
    """Mixing weights from alignments: w_i ∝ A_i^(1/temperature) for the candidates significantly above 0
    (A_i > 2 σ_i), w_i = 0 for the others; Σ w_i = 1. temperature 1 weighs by the alignment itself,
    → 0 keeps the best only, → ∞ weighs the significant ones equally. ``InputError`` when none is significant."""
    if not isinstance(temperature, (int, float)) or not temperature > 0:
        raise InputError(f"temperature must be a positive number, got {temperature!r}")
    significant = [score > SIGNIFICANT_STDERRS * stderr and score > 0 for score, stderr in zip(scores, stderrs)]
    if not any(significant):
        raise InputError(
            f"no candidate's score is above {SIGNIFICANT_STDERRS:g} standard errors: nothing to mix. Sketch more "
            "target data, or load the best adapter alone (Selection.load)"
        )
    best = max(score for score, keep in zip(scores, significant) if keep)
    raw = [(score / best) ** (1 / temperature) if keep else 0.0 for score, keep in zip(scores, significant)]
    total = sum(raw)
    return [value / total for value in raw]
