"""What a selection returns: the ranked candidates (``rows``), the skipped ones and why, the verdict, and the
display, loading and mixing of the choice."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fisherhub.analysis.mixing import mixing_weights
from fisherhub.core.errors import InputError
from fisherhub.core.signature import Signature
from fisherhub.selection import peft_loading, report
from fisherhub.selection.ranking import best_first
from fisherhub.selection.rows import RankedCandidate, Skipped

if TYPE_CHECKING:
    from fisherhub.analysis.auto import AutoChoice
    from fisherhub.analysis.verdict import Verdict
    from matplotlib.figure import Figure
    from rich.table import Table

    from fisherhub.selection.rerank import Rerank


@dataclasses.dataclass
class Selection:
    """What ``select_adapter`` returns: the candidates ranked (best first), the ones skipped and why, the
    verdict, and the target's signatures. ``best``, ``table()``, ``plot()``, ``load()`` and ``mix()`` read it.

    Args:
        ranking (`list[RankedCandidate]`):
            The ranked candidates, best first, each with its alignment, its signature's source and provenance.
        skipped (`list[Skipped]`):
            The candidates left out, each with its reason.
        score (`str`):
            The geometry ranked by (``fisher``, ``activation`` or ``error``; what ``auto`` chose).
        targets (`dict[str, Signature]`):
            The target's signatures, one per sketch id the candidates use.
        base_model (`str`, *optional*):
            The base model the candidates are adapters of.
        model (`Any`, *optional*):
            The ``PeftModel``, when ``select_adapter(load=True)``.
        verdict (`Verdict`, *optional*):
            How far to trust the pick (``analysis.verdict.verdict``).
        choice (`AutoChoice`, *optional*):
            With ``score="auto"``: the geometry scored by, the regime, and why.
        token (`str`, *optional*):
            ``select_adapter``'s token, used again by ``load`` and ``mix``.
        rerank (`Rerank`, *optional*):
            The second stage (a target given as data: ``rerank="halving"`` by default, or ``rerank=k``): measured
            losses on the target; None when the signatures alone ranked.
        max_adapter_bytes (`int`, *optional*):
            The bound on an adapter's weights file that ``load`` and ``mix`` load.
    """

    ranking: list[RankedCandidate]
    skipped: list[Skipped]
    score: str
    targets: dict[str, Signature]
    base_model: str | None = None
    model: Any = None
    verdict: Verdict | None = None
    choice: AutoChoice | None = None
    token: str | None = dataclasses.field(default=None, repr=False)
    rerank: Rerank | None = None
    max_adapter_bytes: int | None = None

    def reranked(self, second: Rerank) -> Selection:
        """This selection after its second stage: the measured candidates first, lowest target loss first, then
        the others not tried in first-stage order; the ones tried but not measured move to ``skipped`` with their
        reason (never the pick); the verdict is the measured one (the first stage's is in ``second``)."""
        measured = {m.candidate: rank for rank, m in enumerate(second.lowest_first())}
        failed = {s.candidate for s in second.skipped}
        kept = [row for row in self.ranking if row.candidate not in failed]
        ranking = sorted(kept, key=lambda row: measured.get(row.candidate, len(measured)))
        skipped = [*self.skipped, *second.skipped]
        return dataclasses.replace(self, ranking=ranking, skipped=skipped, verdict=second.verdict, rerank=second)

    def unmeasured(self, tried: Sequence[Skipped]) -> Selection:
        """This selection when its default second stage could measure none of the adapters it ``tried``: the first
        stage's ranking and verdict, which says so and why (each distinct reason once)."""
        reasons = list(dict.fromkeys(s.reason.removeprefix("second stage: ") for s in tried))
        note = (
            f"; the second stage could measure none of the {len(tried)} adapters it tried ({'; '.join(reasons)}): "
            "ranked by signatures only"
        )
        verdict = self.verdict and dataclasses.replace(self.verdict, message=self.verdict.message + note)
        return dataclasses.replace(self, verdict=verdict)

    @property
    def best(self) -> RankedCandidate:
        return self.ranking[0]

    def ranked_by(self, score: str) -> list[RankedCandidate]:
        """The same candidates ranked by another score (``fisher``, ``activation`` or ``error``)."""
        return best_first(row.ranked_by(score) for row in self.ranking)

    # -- display ------------------------------------------------------------------------------------
    def table(self, limit: int | None = None, *, wide: bool = False, width: int | None = None) -> str:
        """The ranking as plain text within ``width`` columns (default: the terminal's, else 100): rank, candidate,
        score ± stderr and the other scores of A, S_a, S_e, ρ (and the measured loss after a second stage); then
        each candidate's signature source and provenance, the verdict and the skipped candidates with their
        reasons. ``wide``: one line per candidate with every column (source and provenance too)."""
        return report.plain_table(self, limit, wide=wide, width=width)

    def rich_table(
        self, limit: int | None = None, *, wide: bool = False, width: int | None = None, caption: bool = True
    ) -> Table:
        """The ranking as a ``rich.table.Table``; the details, verdict and skipped candidates in its caption
        (``caption=False``: none; ``report.below_table`` is that text)."""
        return report.rich_table(self, limit, wide=wide, width=width, caption=caption)

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

    # -- verification -------------------------------------------------------------------------------
    def verify(self, top_k: int = 1, **options: Any) -> dict[str, Any]:
        """``verify_signature`` of the ``top_k`` best rows' signatures (``options`` go to it: model, tokenizer,
        tolerance, ...), by candidate. Each verified row's provenance then says ``verified`` or ``NOT
        reproduced``; a row that is not reproduced gets that as its doubt and ranks below every other, so
        ``best`` is never a signature its own data contradicts."""
        from fisherhub.hub import load_signature
        from fisherhub.verify import verify_signature

        results, rows = {}, []
        for rank, row in enumerate(self.ranking):
            if rank < top_k and row.doubt is None:
                verification = verify_signature(
                    load_signature(row.signature_source, token=self.token), token=self.token, **options
                )
                results[row.candidate] = verification
                signer = row.provenance.split(";", 1)[0]
                if verification.verifiable:
                    state = "verified" if verification.reproduced else "NOT reproduced"
                    row = dataclasses.replace(
                        row,
                        provenance=f"{signer}; {state} ({verification.describe()})",
                        doubt=None if verification.reproduced else f"verify: {verification.describe()}",
                    )
            rows.append(row)
        self.ranking = best_first(rows)
        return results

    # -- loading ------------------------------------------------------------------------------------
    def load(self, model=None, top_k: int | None = None):
        """A ``peft.PeftModel`` on ``model`` (the base model; None loads ``base_model``) with the best adapter
        active; with ``top_k`` the k best are loaded as named adapters (``set_adapter(name)`` switches;
        ``peft_config`` lists them by name). The base model is modified in place, as ``peft`` does."""
        return peft_loading.load_adapters(
            self.ranking,
            model,
            self.base_model,
            top_k,
            next(iter(self.targets.values()), None),
            self.token,
            self.max_adapter_bytes,
        )

    # -- mixing -------------------------------------------------------------------------------------
    def weights(self, temperature: float = 1.0, top_k: int | None = None) -> dict[str, float]:
        """Mixing weights of the ``top_k`` best candidates (default: all), by candidate, summing to 1
        (``analysis.mixing.mixing_weights``): w_i ∝ score_i^(1/temperature) for the candidates significantly
        aligned with the target (the verdict's rule: above the one-sided Bonferroni z over all ranked
        candidates), 0 for the others and for the rows in doubt (``RankedCandidate.doubt``)."""
        rows = self.ranking if top_k is None else self.ranking[: peft_loading.check_top_k(top_k)]
        scores = [0.0 if row.doubt else row.score for row in rows]  # a row not to be trusted is never mixed in
        weights = mixing_weights(scores, [row.stderr for row in rows], temperature, comparisons=len(self.ranking))
        return {row.candidate: weight for row, weight in zip(rows, weights)}

    def mix(
        self,
        model=None,
        top_k: int = 2,
        combination_type: str = "cat",
        adapter_name: str = "mix",
        temperature: float = 1.0,
    ):
        """``load(model, top_k)`` and PEFT's ``add_weighted_adapter`` of those adapters with ``weights``
        (those of weight 0 left out) as ``adapter_name``, active. ``cat`` stacks the LoRA factors, so the mix's
        update is exactly ΔW = Σ w_i ΔW_i (its rank the sum of the ranks); ``linear`` sums the factors,
        A = Σ √(w_i s_i) A_i and B = Σ √(w_i s_i) B_i (s_i the LoRA scaling), same rank, whose product has
        cross terms B_i A_j: the weighted sum of the updates only when one weight is nonzero."""
        if combination_type not in peft_loading.MIX_TYPES:
            raise InputError(f"combination_type must be one of {peft_loading.MIX_TYPES}, got {combination_type!r}")
        weights = self.weights(temperature, top_k)
        peft_model = self.load(model, top_k)
        names = peft_loading.adapter_names(list(weights))
        if adapter_name in names:
            raise InputError(f"adapter_name {adapter_name!r} is taken by a loaded adapter; pass another")
        kept = [(name, weight) for name, weight in zip(names, weights.values()) if weight > 0]
        try:
            peft_model.add_weighted_adapter(
                [name for name, _ in kept],
                [weight for _, weight in kept],
                adapter_name,
                combination_type=combination_type,
            )
        except ValueError as exc:  # e.g. linear over adapters of different ranks or target modules
            raise InputError(f"PEFT cannot mix these adapters with {combination_type!r}: {exc}. Try 'cat'") from exc
        peft_model.set_adapter(adapter_name)
        return peft_model.eval()
