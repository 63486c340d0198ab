"""The rows of a selection: a ranked candidate, a skipped one and why, and where an adapter loads from."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from fisherhub.core.alignment import AlignmentResult
from fisherhub.core.errors import InputError
from fisherhub.core.geometry import GEOMETRIES, HEAD_SCORES


@dataclasses.dataclass(frozen=True)
class AdapterLocation:
    """Where ``peft`` loads an adapter from: a Hub repo id (at ``revision``, under ``subfolder``) or a local folder."""

    path: str
    revision: str | None = None
    subfolder: str | None = None

    def hub_kwargs(self, token: str | None) -> dict[str, Any]:
        """What ``PeftModel.from_pretrained`` / ``load_adapter`` take besides the path."""
        return {"revision": self.revision, "token": token, **({"subfolder": self.subfolder} if self.subfolder else {})}


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A candidate left out of the ranking, and why (control characters of the repo's metadata taken out)."""

    candidate: str
    reason: str

    def __post_init__(self):
        from fisherhub.safe_text import printable

        object.__setattr__(self, "reason", printable(self.reason))


@dataclasses.dataclass(frozen=True)
class RankedCandidate:
    """One row of a ranking: the candidate's alignment with the target and where its signature came from.
    ``adapter`` is None for a dataset repo (ranked, but nothing to load). ``doubt``: why its numbers cannot be
    taken at face value (a bounded-claims check it fails, ``AlignmentResult.doubt``, or its noise; such rows rank
    below all others), else None.
    ``provenance``: who signed it (the candidate's own repo or folder, or the dataset repo its card names) and
    whether ``fisherhub verify`` can re-sketch it (its data is a Hub dataset at a recorded commit)."""

    candidate: str
    score_name: str
    alignment: AlignmentResult
    signature_source: str
    adapter: AdapterLocation | None
    doubt: str | None = None
    provenance: str = ""

    @property
    def implausible(self) -> bool:
        """Whether ``doubt`` is more than the noise of a short signature (``AlignmentResult.source_noise`` or
        ``pair_noise``, which is warned about, not refused): numbers the math does not allow, or a failed re-sketch."""
        return self.doubt is not None and self.doubt not in (self.alignment.source_noise, self.alignment.pair_noise)

    @property
    def score(self) -> float:
        value = GEOMETRIES[self.score_name].value(self.alignment)
        return math.nan if value is None else value

    @property
    def stderr(self) -> float:
        stderr = GEOMETRIES[self.score_name].stderr(self.alignment)
        return math.nan if stderr is None else stderr

    @property
    def fisher(self) -> float:
        return self.alignment.fisher

    @property
    def activation(self) -> float:
        return self.alignment.activation

    @property
    def error(self) -> float:
        return self.alignment.error

    @property
    def coupling(self) -> float | None:
        return self.alignment.coupling

    def ranked_by(self, score: str) -> RankedCandidate:
        """This row scored by one geometry (``fisher``, ``activation`` or ``error``)."""
        if score not in HEAD_SCORES:
            raise InputError(f"a row is ranked by one of {HEAD_SCORES}; select_adapter(score='auto') picks among them")
        return dataclasses.replace(self, score_name=score)
