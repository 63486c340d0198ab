"""One geometry's scores of the candidates (larger = more aligned with the target) with their standard errors."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from fisherhub.core.alignment import AlignmentResult
from fisherhub.core.errors import InputError
from fisherhub.core.geometry import GEOMETRIES, HEAD_SCORES, OTHER_KINDS


@dataclasses.dataclass(frozen=True)
class Scores:
    """One geometry's score of each candidate (larger = more aligned with the target) and its standard error."""

    geometry: str
    values: tuple[float, ...]
    stderr: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.values) != len(self.stderr) or not self.values:
            raise InputError(
                f"{self.geometry}: need one standard error per score and at least one candidate, got "
                f"{len(self.values)} scores and {len(self.stderr)} standard errors"
            )

    @classmethod
    def of(cls, geometry: str, results: Sequence[AlignmentResult]) -> Scores:
        """Geometry ``geometry`` (``core.geometry.GEOMETRIES``) of the candidates' alignments with the target; those
        of another signature kind (``"head_input"``, ``"network"``) are A of that kind's alignments."""
        read = GEOMETRIES[geometry]
        return cls(geometry, tuple(read.value(r) for r in results), tuple(read.stderr(r) for r in results))

    def __len__(self) -> int:
        return len(self.values)

    def order(self) -> list[int]:
        """Candidate indices from the highest score down (ties keep the candidates' order)."""
        return sorted(range(len(self)), key=lambda i: -self.values[i])


def candidate_scores(head: Sequence[AlignmentResult], **other: Sequence[AlignmentResult]) -> dict[str, Scores]:
    """Every geometry of the candidates: A, S_a, S_e from ``head`` (candidate ↔ target alignments of head
    signatures), and A of each other signature kind given by keyword (``head_input=``, ``network=``), one
    result per candidate in the same order."""
    scores = {name: Scores.of(name, head) for name in HEAD_SCORES}
    for name, results in other.items():
        if name not in OTHER_KINDS:
            raise InputError(f"unknown signature kind {name!r}; give alignments as one of {', '.join(OTHER_KINDS)}")
        if len(results) != len(head):
            raise InputError(
                f"{name}: {len(results)} alignments for {len(head)} candidates; give one per candidate, "
                "in the same order"
            )
        scores[name] = Scores.of(name, results)
    return scores
