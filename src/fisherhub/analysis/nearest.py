"""The signatures most aligned with a target among many (datasets or adapters)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from fisherhub.core.alignment import AlignmentResult, alignment_matrix
from fisherhub.core.errors import InputError
from fisherhub.core.geometry import GEOMETRIES, HEAD_SCORES
from fisherhub.core.signature import Signature


@dataclasses.dataclass(frozen=True)
class Neighbour:
    """A signature near the target: its name, alignment with the target and rank (0 = nearest). ``doubt``: why
    its numbers are not to be trusted (``AlignmentResult.doubt``; such neighbours rank after every other)."""

    name: str
    alignment: AlignmentResult
    rank: int

    @property
    def doubt(self) -> str | None:
        return self.alignment.doubt or self.alignment.noise


def rank_nearest(
    target: Signature, signatures: Mapping[str, Signature], limit: int | None = None, score: str = "fisher"
) -> list[Neighbour]:
    """The signatures most aligned with ``target`` (by head A, or ``score`` a head geometry), those with the
    target's sketch id only (the others cannot be compared) and not the target itself, nearest first; ``limit``
    keeps the first ones."""
    if score not in HEAD_SCORES:
        raise InputError(f"unknown score {score!r} for nearest signatures; choose one of {', '.join(HEAD_SCORES)}")
    own = target.to_bytes()
    comparable = [
        (name, s) for name, s in signatures.items() if s.sketch_id == target.sketch_id and s.to_bytes() != own
    ]
    if not comparable:
        raise InputError(
            f"none of the {len(signatures)} signatures has the target's sketch id {target.sketch_id}; "
            "sketch the target with the same spec as the candidates"
        )
    matrix = alignment_matrix([target] + [s for _, s in comparable], ["target"] + [n for n, _ in comparable])
    if matrix.signature_doubts[0] is not None:
        raise InputError(f"the target signature cannot be ranked against: {matrix.signature_doubts[0]}")
    results = [matrix.pair(i + 1, 0) for i in range(len(comparable))]
    value = GEOMETRIES[score].value
    neighbours = [Neighbour(name, result, 0) for (name, _), result in zip(comparable, results)]
    order = sorted(range(len(comparable)), key=lambda i: (neighbours[i].doubt is not None, -value(results[i])))
    return [dataclasses.replace(neighbours[i], rank=rank) for rank, i in enumerate(order[:limit])]
