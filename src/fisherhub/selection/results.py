"""What a selection returns: the ranked candidates, the skipped ones and why, and where an adapter loads from."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fisherhub.core.alignment import AlignmentResult
from fisherhub.core.errors import FisherHubError, InputError
from fisherhub.core.signature import Signature
from fisherhub.selection import peft_loading, report
from fisherhub.selection.ranking import ROW_SCORES, STDERR_FIELDS, best_first, check_score

if TYPE_CHECKING:
    from fisherhub.selection.scoring import AutoChoice, Verdict
    from matplotlib.figure import Figure
    from rich.table import Table


@dataclasses.dataclass(frozen=True)
class AdapterLocation:
    """Where ``peft`` loads an adapter from: a Hub repo id (at ``revision``) or a local folder."""

    path: str
    revision: str | None = None


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A candidate left out of the ranking, and why."""

    candidate: str
    reason: str


class NoCompatibleCandidatesError(FisherHubError):
    """No candidate could be ranked against the target; ``skipped`` says why for each."""

    def __init__(self, skipped: Sequence[Skipped], what: str = "candidate"):
        self.skipped = list(skipped)
        reasons = "\n".join(f"  - {s.candidate}: {s.reason}" for s in self.skipped)
        super().__init__(
            f"no {what} can be compared with the target:\n{reasons}\n"
            "Pass adapters of the target's base model that carry signatures (`fisherhub push` one into the "
            "adapter repo, or into the dataset repo its card names under `datasets:`)."
        )


@dataclasses.dataclass(frozen=True)
class RankedCandidate:
    """One row of a ranking: the candidate's alignment with the target and where its signature came from.
    ``adapter`` is None for a dataset repo (ranked, but nothing to load)."""

    candidate: str
    score_name: str
    alignment: AlignmentResult
    signature_source: str
    adapter: AdapterLocation | None

    @property
    def score(self) -> float:
        return getattr(self.alignment, self.score_name)

    @property
    def stderr(self) -> float:
        return getattr(self.alignment, STDERR_FIELDS[self.score_name])

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
        if check_score(score) not in ROW_SCORES:
            raise InputError(f"a row is ranked by one of {ROW_SCORES}; select_adapter(score='auto') picks among them")
        return dataclasses.replace(self, score_name=score)


@dataclasses.dataclass
class Selection:
    """Candidates ranked by ``score`` (best first), the ones skipped and why, and the target's signatures
    (one per sketch id the candidates use)."""

    ranking: list[RankedCandidate]
    skipped: list[Skipped]
    score: str
    targets: dict[str, Signature]
    base_model: str | None = None
    model: Any = None  # the PeftModel, when select_adapter(load=True)
    verdict: Verdict | None = None  # how far to trust the pick (``selection.scoring.verdict``)
    choice: AutoChoice | None = None  # with score="auto": the geometry scored by, the regime, and why

    @property
    def best(self) -> RankedCandidate:
        return self.ranking[0]

    def ranked_by(self, score: str) -> list[RankedCandidate]:
        """The same candidates ranked by another score (``fisher``, ``activation`` or ``error``)."""
        return best_first(row.ranked_by(score) for row in self.ranking)

    # -- display ------------------------------------------------------------------------------------
    def table(self, limit: int | None = None) -> str:
        """The ranking as plain text: rank, candidate, score ± stderr, A, S_a, S_e, ρ, signature source; then
        the skipped candidates with their reasons."""
        return report.plain_table(self, limit)

    def rich_table(self, limit: int | None = None) -> Table:
        """The ranking as a ``rich.table.Table`` (the skipped candidates in its caption)."""
        return report.rich_table(self, limit)

    def __str__(self) -> str:
        return self.table()

    def figure(self, limit: int | None = None) -> Figure:
        """Bar chart of A, S_a and S_e of each candidate with ±1 stderr error bars, in ranking order."""
        return report.bar_chart(self, limit)

    def plot(self, path: str | os.PathLike, limit: int | None = None) -> Path:
        """Save ``figure(limit)`` to ``path`` (PNG, or any format matplotlib infers from the suffix); return it."""
        path = Path(path)
        self.figure(limit).savefig(path, dpi=120)
        return path

    # -- loading ------------------------------------------------------------------------------------
    def load(self, model=None, top_k: int | None = None):
        """A ``peft.PeftModel`` on ``model`` (the base model; None loads ``base_model``) with the best adapter
        active; with ``top_k`` the k best are loaded as named adapters (``set_adapter(name)`` switches;
        ``peft_config`` lists them by name). The base model is modified in place, as ``peft`` does."""
        return peft_loading.load_adapters(
            self.ranking, model, self.base_model, top_k, next(iter(self.targets.values()), None)
        )
