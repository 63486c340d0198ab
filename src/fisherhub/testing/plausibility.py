"""No false alarms of the bounded-claims checks: ``PlausibilityTally.watch`` checks every signature that
``SketchState.finalize`` makes while it runs (every signature the library makes goes through it) with
``Signature.findings``, and counts them: plausible, noise (a short signature's unresolved split norms beyond the
bound: warned, not refused) and doubted (a false alarm: an honest signature the checks call forged). The test
suite runs it over the whole session (``tests/conftest.py``), ``scripts/plausibility_sweep.py`` over a benchmark."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator


@dataclasses.dataclass
class PlausibilityTally:
    """Signatures checked, those that were noise, and the doubted ones (where they came from, and why)."""

    signatures: int = 0
    noise: int = 0
    short: int = 0
    doubted: list[str] = dataclasses.field(default_factory=list)

    def add(self, signature) -> None:
        from fisherhub.core.state import MIN_DOCUMENTS

        doubt, noise = signature.findings()
        self.signatures += 1
        self.noise += noise is not None
        self.short += signature.num_documents < MIN_DOCUMENTS
        if doubt is not None:
            where = signature.metadata.get("dataset", "a signature")
            self.doubted.append(f"{where} ({signature.num_documents} documents, m = {signature.spec.m}): {doubt}")

    @contextlib.contextmanager
    def watch(self) -> Iterator[PlausibilityTally]:
        """Count every signature ``SketchState.finalize`` returns while the block runs."""
        from fisherhub.core.state import SketchState

        finalize = SketchState.finalize

        def checked(state, *args, **kwargs):
            signature = finalize(state, *args, **kwargs)
            self.add(signature)
            return signature

        SketchState.finalize = checked  # type: ignore[method-assign, assignment]
        try:
            yield self
        finally:
            SketchState.finalize = finalize  # type: ignore[method-assign]

    def lines(self) -> list[str]:
        """The count, then each doubted signature with its reason."""
        plausible = self.signatures - self.noise - len(self.doubted)
        return [
            f"bounded-claims checks: {self.signatures} signatures made, {plausible} plausible, {self.noise} noise "
            f"(unresolved split norms, warned), {len(self.doubted)} doubted; {self.short} had fewer than 20 "
            "documents",
            *(f"  doubted: {line}" for line in self.doubted),
        ]
