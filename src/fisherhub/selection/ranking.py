"""Ranking as pure functions: the scores, which signature of each candidate to compare, whether a candidate
and the target are comparable (``SketchSpec.differences``), the base model signatures agree on, and the order."""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from fisherhub.core.errors import InputError
from fisherhub.core.geometry import HEAD_SCORES, SCORES, label
from fisherhub.core.spec import SketchSpec

if TYPE_CHECKING:
    from fisherhub.selection.candidates import Candidate, SignatureOption
    from fisherhub.selection.rows import RankedCandidate

#: the label of each geometry a row can be ranked by (``auto`` resolves to one of them)
SCORE_LABELS = {name: label(name) for name in HEAD_SCORES}

Row = TypeVar("Row", bound="RankedCandidate")


def check_score(score: str) -> str:
    if score not in SCORES:
        raise InputError(
            f"score must be one of {SCORES} (Fisher alignment, activation or error only, or auto: the geometry that "
            f"carries the signal), got {score!r}"
        )
    return score


def best_first(rows: Iterable[Row]) -> list[Row]:
    """Rows by their score, highest first; rows in ``doubt`` (numbers the math does not allow, or noise) after
    every other row, so that none of them can be the best."""
    return sorted(
        rows, key=lambda row: (row.doubt is None, row.score if math.isfinite(row.score) else -math.inf), reverse=True
    )


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
