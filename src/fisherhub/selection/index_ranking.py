"""Ranking every row of a signature index (``hub/signature_index/``) against a target: one download, one
matrix product, pinned to the index commit; the ``shortlist`` best rows are then ranked from their own files
(``select_adapter``), so the final table is exactly what ranking those candidates directly gives.

Row i's score is Â(i, t) = ‖μ̂_i‖ ⟨u_i, μ̂_t⟩ / √(⟨μ̂^A_i, μ̂^B_i⟩ ⟨μ̂^A_t, μ̂^B_t⟩) with u_i = μ̂_i/‖μ̂_i‖ as the
index stores it (float16 or float32), for the sketch of the score (joint for ``fisher``); a row whose spec
is not comparable with the target's (another sketch id or pilot direction) is left out, saying why.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from fisherhub.core.errors import InputError
from fisherhub.core.features import SKETCHES
from fisherhub.core.geometry import GEOMETRIES, HEAD_SCORES
from fisherhub.options import same_base_model
from fisherhub.selection.candidates import SignedElsewhere
from fisherhub.selection.errors import Skip
from fisherhub.selection.ranking import incompatibility
from fisherhub.selection.rows import Skipped

if TYPE_CHECKING:
    from fisherhub.core.signature import Signature
    from fisherhub.hub.signature_index.rows import IndexRows
    from fisherhub.hub.signature_index.store import LoadedIndex
    from fisherhub.selection.target import Target

#: rows of an index ranked again from their own files (error bars, regime, verdict)
SHORTLIST = 20


def score_sketch(score: str) -> str:
    """The sketch a score ranks the rows by: that of its geometry (``auto`` pre-ranks by A's, then chooses among
    the shortlist)."""
    sketch = GEOMETRIES["fisher" if score == "auto" else score].sketch
    if sketch is None:
        raise InputError(f"score {score!r} is the cosine of no sketch: an index ranks by {', '.join(HEAD_SCORES)}")
    return sketch


def row_scores(rows: IndexRows, target: Signature, sketch: str = "joint") -> np.ndarray:
    """(n,) float64 alignment of every row with ``target`` by ``sketch``; NaN where a row's spec is not
    comparable with the target's."""
    k = SKETCHES.index(sketch)
    mean = getattr(target, sketch).double().numpy()
    dots = rows.units[sketch] @ mean.astype(np.float32)  # the one matrix product
    scores = (
        rows.lengths[:, k] * dots.astype(np.float64) / np.sqrt(rows.split_norms[:, k] * float(target.split_norms[k]))
    )
    comparable = {}
    for i, spec in enumerate(rows.specs):
        if id(spec) not in comparable:
            comparable[id(spec)] = target.spec.compatible_with(spec)
        if not comparable[id(spec)]:
            scores[i] = np.nan
    return scores


@dataclasses.dataclass(frozen=True)
class IndexRanking:
    """Every usable row of an index scored against one target: the rows, their scores (best first), the
    index commit ranked, and the rows left out with their reason."""

    index: str
    commit: str
    rows: IndexRows
    order: list[int]
    scores: np.ndarray
    skipped: list[Skipped]

    def candidates(self, shortlist: int = SHORTLIST) -> list:
        """The repos of the ``shortlist`` best rows, each once, pinned to the commit each row names
        (``org/name@commit``, ``datasets/org/name@commit``); a row sketched by the indexer as the adapter with
        its file in the index repo (``SignedElsewhere``)."""
        from fisherhub.hub.refs import SignatureRef

        names: dict[str, Any] = {}
        for i in self.order:
            ref, row = self.rows.ref(i), self.rows.rows[i]
            name = f"{'datasets/' if ref.repo_type == 'dataset' else ''}{ref.repo_id}@{ref.revision}"
            if row.get("file_repo"):
                file = SignatureRef(row["file_repo"], "dataset", row["file_commit"], ref.path)
                names.setdefault(
                    name, SignedElsewhere(ref.repo_id, row["commit"], file, row["sketch_id"], row["base_model"])
                )
            else:
                names.setdefault(name, name)
            if len(names) == shortlist:
                break
        return list(names.values())


def _target_for(rows: IndexRows, targets: Target, token: str | None) -> Signature:
    """The target's signature comparable with most rows: a given one with the index's sketch ids, else one
    sketched like the file of a row of the most common sketch id (one download)."""
    from fisherhub.hub.read import load_signature

    counts = collections.Counter(row["sketch_id"] for row in rows.rows)
    for sketch_id, _ in counts.most_common():
        if sketch_id in targets.signatures:
            return targets.signatures[sketch_id]
    if targets.sketcher is None:
        have = ", ".join(sorted(targets.signatures)) or "none"
        raise InputError(
            f"the target's signatures have sketch ids {have}; the index's rows have "
            f"{', '.join(sorted(counts))}: sketch the target like= one of its rows"
        )
    first = next(i for i, row in enumerate(rows.rows) if row["sketch_id"] == counts.most_common(1)[0][0])
    return targets.like(load_signature(rows.ref(first).short(), token=token))


def rank_index(
    loaded: LoadedIndex, targets: Target, base_model: str | None, score: str = "fisher", token: str | None = None
) -> IndexRanking:
    """Every row of ``loaded`` for ``base_model`` scored against the target (``row_scores``), best first."""
    where = f"datasets/{loaded.ref.repo_id}@{loaded.commit[:12]}"
    if base_model is not None and not same_base_model(loaded.base_model, base_model):
        raise InputError(f"{where} is the index of {loaded.base_model!r}, not of {base_model!r}")
    sketch = score_sketch(score)
    if sketch not in loaded.layout.sketches:
        raise InputError(
            f"{where} stores the {', '.join(loaded.layout.sketches)} sketch(es) only: rank it with "
            "score='fisher' or 'auto', or build an index with --sketches all"
        )
    rows = loaded.rows(base_model)
    skipped = [Skipped(f"{s.repo_id}:{s.path}", s.reason) for s in rows.skipped]
    if not len(rows):
        raise InputError(
            f"{where}: no usable rows ({len(skipped)} skipped: "
            f"{'; '.join(s.reason for s in skipped[:3]) or 'the index is empty'})"
        )
    try:
        target = _target_for(rows, targets, token)
    except Skip as skip:
        raise InputError(f"{where}: the target cannot be sketched like its rows ({skip.reason})") from skip
    scores = row_scores(rows, target, sketch)
    incomparable = np.flatnonzero(np.isnan(scores))
    for i in incomparable:
        reason = incompatibility(target.spec, rows.specs[i]) or "not comparable"
        skipped.append(Skipped(rows.ref(int(i)).short(), f"index row: {reason}"))
    order = [int(i) for i in np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable") if not np.isnan(scores[i])]
    if not order:
        raise InputError(f"{where}: no row can be compared with the target ({skipped[0].reason})")
    return IndexRanking(where, loaded.commit, rows, order, scores, skipped)


def check_shortlist(shortlist: int) -> int:
    if not isinstance(shortlist, int) or isinstance(shortlist, bool) or shortlist < 1:
        raise InputError(
            f"shortlist must be a positive integer (rows ranked again from their files), got {shortlist!r}"
        )
    return shortlist
