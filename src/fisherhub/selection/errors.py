"""The selection's errors: a candidate that cannot be ranked (internal), no candidate that can, and no adapter of
the second stage that can be measured."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fisherhub.core.errors import FisherHubError

if TYPE_CHECKING:
    from fisherhub.selection.rows import Skipped


class Skip(Exception):
    """Internal: this candidate cannot be ranked, for ``reason``."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


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


class UnmeasurableAdaptersError(FisherHubError):
    """No adapter of the second stage could be measured on the target; ``skipped`` says why for each."""

    def __init__(self, skipped: Sequence[Skipped]):
        self.skipped = list(skipped)
        reasons = "\n".join(f"  - {s.candidate}: {s.reason}" for s in self.skipped)
        super().__init__(
            f"none of the {len(self.skipped)} adapter(s) of the second stage could be measured on the target:\n"
            f"{reasons}\nFix or drop these adapters, or rank by signatures only (rerank=0, --rerank 0)."
        )
