"""No false alarms of the bounded-claims checks: ``PlausibilityTally.watch`` checks every signature that
``SketchState.finalize`` makes while it runs (every signature the library makes goes through it) with
``Signature.findings``, and counts them: plausible, noise (a short signature's unresolved split norms beyond the
bound: warned, not refused) and doubted (a false alarm: an honest signature the checks call forged); and it counts
the pairs ``alignment_matrix`` checks and those it doubts. The test suite runs it over the whole session
(``tests/conftest.py``: a doubted signature fails the session; doubted pairs are counted, since tests forge
files on purpose), ``scripts/plausibility_sweep.py`` over a benchmark."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator


@dataclasses.dataclass
class PlausibilityTally:
    """Signatures checked, those that were noise, and the doubted ones (where they came from, and why)."""

    signatures: int = 0
    noise: int = 0
    short: int = 0
    doubted: list[str] = dataclasses.field(default_factory=list)
    #: pairs of different signatures whose alignment was computed (``alignment_matrix``), and the doubted ones
    pairs: int = 0
    doubted_pairs: list[str] = dataclasses.field(default_factory=list)

    def add(self, signature) -> None:
        from fisherhub.core.state import MIN_DOCUMENTS

        doubt, noise = signature.findings()
        self.signatures += 1
        self.noise += noise is not None
        self.short += signature.num_documents < MIN_DOCUMENTS
        if doubt is not None:
            where = signature.metadata.get("dataset", "a signature")
            self.doubted.append(f"{where} ({signature.num_documents} documents, m = {signature.spec.m}): {doubt}")

    def add_pairs(self, doubts) -> None:
        """Count the pairs i ≠ j of an alignment matrix's doubts (``pair_findings``) and keep the doubted ones."""
        n = len(doubts)
        self.pairs += n * (n - 1)
        self.doubted_pairs += [doubts[i][j] for i in range(n) for j in range(n) if i != j and doubts[i][j]]

    def merge(self, other: PlausibilityTally) -> None:
        """Add ``other``'s counts and doubts to these (a pytest-xdist worker's tally, in the controller)."""
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    @contextlib.contextmanager
    def watch(self) -> Iterator[PlausibilityTally]:
        """Count every signature ``SketchState.finalize`` makes, and every pair ``alignment_matrix`` checks
        (``plausibility.pair_findings``), while the block runs. The signatures are seen as they are built
        (``Signature.__post_init__``, called from ``finalize``), so that no frame is added between ``finalize``
        and its caller: the warnings it gives keep their place, and so their once-per-place filtering."""
        from fisherhub.core import plausibility
        from fisherhub.core.signature import Signature
        from fisherhub.core.state import SketchState

        post_init, pair_findings = Signature.__post_init__, plausibility.pair_findings
        made_by = SketchState.finalize.__code__

        def checked(signature) -> None:
            post_init(signature)
            if sys._getframe(2).f_code is made_by:  # Signature(...) in finalize: this one -> __init__ -> finalize
                self.add(signature)

        def checked_pairs(*args, **kwargs):
            doubts, noise = pair_findings(*args, **kwargs)
            self.add_pairs(doubts)
            return doubts, noise

        Signature.__post_init__ = checked  # type: ignore[method-assign, assignment]
        plausibility.pair_findings = checked_pairs
        try:
            yield self
        finally:
            Signature.__post_init__ = post_init  # type: ignore[method-assign]
            plausibility.pair_findings = pair_findings

    def lines(self, pairs: bool = True) -> list[str]:
        """The count, then each doubted signature with its reason, and (``pairs``) the first doubted pairs."""
        plausible = self.signatures - self.noise - len(self.doubted)
        return [
            f"bounded-claims checks: {self.signatures} signatures made, {plausible} plausible, {self.noise} noise "
            f"(unresolved split norms, warned), {len(self.doubted)} doubted; {self.short} had fewer than 20 "
            f"documents; {self.pairs} ordered pairs aligned, {len(self.doubted_pairs)} doubted",
            *(f"  doubted: {line}" for line in self.doubted),
            *(f"  doubted pair: {line}" for line in self.doubted_pairs[: 20 if pairs else 0]),
        ]
