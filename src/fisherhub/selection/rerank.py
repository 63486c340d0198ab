"""The second stage of a two-stage selection: measure the target's loss under each of the first stage's top k
adapters, one adapter on the base model at a time, and re-rank them by it.

The first stage ranks every candidate by its signature (cheap for thousands). Its candidates for the second
stage are the first ``k`` distinct ones of the round-robin merge of the S_a and S_e rankings (``FIRST_STAGE``):
on the paper suites that pool held the true best source in its top 3 in 22 of 24 natural-domain selections and
18 of 18 SMILES ones (``benchmarks/paper/recall.py``; a selection is a target under one LoRA seed). Each is loaded onto the base model with ``peft``,
the target's documents go through it once, and it is unloaded (``PeftModel.unload``) before the next one; the
layers below an adapter's first adapted one are the base model's: the base model's own pass keeps their output
at the layers the adapters' configs start at (``adapter_first_layers``), and every adapter starting there replays
it (``target_losses.TargetLosses``).

The tokens measured are the ones the target's signature was sketched from: the same documents, truncated to the
same ``max_length``, every token whose label is scored (all next tokens of a text; the assistant turns of chat
data). Neither stage was fitted to them (an adapter learnt its source's data; a signature is an average), so they
measure how well each adapter predicts the target without holding back a part of the user's sample, which would
leave both stages fewer tokens. The loss of candidate c is L_c = Σ_d NLL_c(d) / Σ_d n_d over documents d (n_d
scored tokens); its error bars come from a bootstrap over the target's documents, the same draws for every
candidate and the base model, so differences are paired.

Adapters come from strangers: ``measure_adapter``, the one place a candidate is loaded and measured (``rerank``
and any other schedule of the second stage call it), checks each first (``peft_loading.check_adapter``: its
config, type, base model and weights file size), loads it, refuses NaN or inf weights and a loss that is not
finite, and gives the base model back unchanged whatever happened; an adapter it cannot measure is skipped with
its reason (``Rerank.skipped``), the next candidate of the merged order measured in its place, and never picked.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from fisherhub.analysis.verdict import Verdict
from fisherhub.core.errors import InputError
from fisherhub.core.geometry import CLEAR_GAP_Z
from fisherhub.lm.adapter_config import adapter_config_file, read_peft_config
from fisherhub.lm.modules import config_first_layer
from fisherhub.selection.errors import Skip, UnmeasurableAdaptersError
from fisherhub.selection.peft_loading import brief, checked_adapter_on
from fisherhub.selection.ranking import best_first
from fisherhub.selection.rows import Skipped
from fisherhub.selection.target_losses import DocumentLosses, TargetLosses

if TYPE_CHECKING:
    from fisherhub.analysis.halving import BestChance
    from fisherhub.selection.rows import AdapterLocation, RankedCandidate

#: the geometries whose rankings are merged into the second stage's candidates
FIRST_STAGE = ("activation", "error")
#: bootstrap resamples of the target's documents (seeded)
BOOTSTRAP_DRAWS, BOOTSTRAP_SEED = 2000, 0


def check_rerank(rerank: int) -> int:
    """``rerank`` (0: no second stage), refused unless a non-negative int."""
    if not isinstance(rerank, int) or isinstance(rerank, bool) or rerank < 0:
        raise InputError(f"rerank must be a non-negative int (0: rank by signatures only), got {rerank!r}")
    return rerank


def check_max_adapter_bytes(limit: int | None) -> int | None:
    """``max_adapter_bytes`` (None: ``default_max_adapter_bytes`` of the base model), refused unless a positive int."""
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise InputError(f"max_adapter_bytes must be a positive int (bytes) or None, got {limit!r}")
    return limit


def second_stage_candidates(ranking: Sequence[RankedCandidate], k: int) -> list[RankedCandidate]:
    """The first ``k`` distinct adapters (rows that have one, and no doubt about their signature when some have
    none) of the round-robin merge of the rankings by each geometry of ``FIRST_STAGE``, highest score first."""
    adapters = [row for row in ranking if row.adapter is not None]
    adapters = [row for row in adapters if row.doubt is None] or adapters
    rankings = [best_first(row.ranked_by(score) for row in adapters) for score in FIRST_STAGE]
    chosen: list[str] = []
    for position in range(len(adapters)):
        for ordered in rankings:
            if ordered[position].candidate not in chosen:
                chosen.append(ordered[position].candidate)
    by_name = {row.candidate: row for row in ranking}
    return [by_name[name] for name in chosen[:k]]


def adapter_first_layers(model, rows: Sequence[RankedCandidate], token: str | None = None) -> list[int]:
    """The first decoder layer of ``model`` that each row's adapter adapts, read from its config
    (``lm.modules.config_first_layer``); 0 where the config cannot be read (the adapter is then skipped when
    measured)."""
    firsts = []
    for row in rows:
        adapter = row.adapter
        assert adapter is not None  # second_stage_candidates keeps the rows that have an adapter
        try:
            file = adapter_config_file(
                adapter.path, revision=adapter.revision, subfolder=adapter.subfolder, token=token
            )
            firsts.append(config_first_layer(model, read_peft_config(file)))
        except Exception:  # noqa: BLE001 (a stranger's config: measure_adapter says why it is skipped)
            firsts.append(0)
    return firsts


def measure_adapter(
    model,
    batches,
    adapter: AdapterLocation,
    *,
    base_model: str | None = None,
    token: str | None = None,
    max_adapter_bytes: int | None = None,
) -> DocumentLosses:
    """The target's per-document losses (``batches``: a ``TargetLosses``, whose base model's hidden states the
    adapters measured in turn share, or the batches themselves) under ``adapter`` loaded onto ``model`` alone
    (``peft_loading.adapter_on``: ``model`` is the plain base model again afterwards). ``Skip`` with the reason
    when it cannot be measured: ``check_adapter`` refuses it (config, type, base model ``base_model``, a weights
    file over ``max_adapter_bytes``, default ``default_max_adapter_bytes(model)``), peft cannot load it, its
    weights hold NaN or inf, the forward pass fails, or its loss is not finite."""
    target = batches if isinstance(batches, TargetLosses) else TargetLosses(batches)
    with checked_adapter_on(model, adapter, base_model, token, max_adapter_bytes) as peft_model:
        try:
            losses = target.losses(peft_model)
        except Exception as exc:  # noqa: BLE001 (a stranger's adapter on the target: any failure is the adapter's)
            raise Skip(f"it fails on the target's documents ({brief(exc)})") from exc
    if not bool(torch.isfinite(losses.nll).all()):
        raise Skip("its loss on the target is not finite (NaN or inf): a broken adapter, not measured")
    return losses


@dataclasses.dataclass(frozen=True)
class MeasuredCandidate:
    """A candidate's mean loss on the target's tokens with its bootstrap standard error, and the drop from the
    base model's loss (positive: the adapter helps) with the paired bootstrap standard error of that drop, over
    the ``documents`` of the target it was measured on (all of them, but for one a budgeted second stage
    dropped early)."""

    candidate: str
    loss: float
    stderr: float
    gain: float
    gain_stderr: float
    documents: int


@dataclasses.dataclass(frozen=True)
class Rerank:
    """The second stage: the measured candidates (in first-stage order; ``verdict.best`` indexes them), the base
    model's loss, the verdict from the measured losses, the first stage's verdict, the target's documents and
    scored tokens, the seconds spent (the forward passes over the target, k + 1 of them with the base model's),
    and the candidates tried but not measured, with the reason (``measure_adapter``); after a budgeted second
    stage (``budgeted.halving_rerank``), its ``budget`` in full passes and the document-passes spent (``passes``,
    the base model's included); after either, what its passes cost in full passes over the target
    (``full_passes``: a document whose layers below the adapter were replayed counts as the share of the pass it
    ran)."""

    measured: list[MeasuredCandidate]
    base_loss: float
    verdict: Verdict
    first_stage_verdict: Verdict | None
    documents: int
    tokens: int
    seconds: float
    skipped: list[Skipped] = dataclasses.field(default_factory=list)  # tried, not measured: why
    budget: int | None = None
    passes: int | None = None
    full_passes: float | None = None

    def lowest_first(self) -> list[MeasuredCandidate]:
        """The measured candidates, those measured on more documents first (a budgeted stage's finalists, then
        the later dropped), each group lowest loss first."""
        return sorted(self.measured, key=lambda m: (-m.documents, m.loss))


def paired_bootstrap(
    base: DocumentLosses, adapted: Sequence[DocumentLosses], draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED
) -> tuple[torch.Tensor, torch.Tensor]:
    """Resampled mean losses (draws, k) of the adapters and (draws,) of the base model, every draw one
    resample of the target's documents with replacement, shared by all."""
    generator = torch.Generator().manual_seed(seed)
    counts = torch.zeros(draws, len(base.nll), dtype=torch.float64)
    picks = torch.randint(len(base.nll), (draws, len(base.nll)), generator=generator)
    counts.scatter_add_(1, picks, torch.ones_like(picks, dtype=torch.float64))
    tokens = counts @ base.tokens
    losses = torch.stack([counts @ a.nll for a in adapted], dim=1) / tokens[:, None]
    return losses, (counts @ base.nll) / tokens


def measured_verdict(
    names: Sequence[str], losses: Sequence[float], draws: torch.Tensor, of_all: tuple[BestChance, int] | None = None
) -> Verdict:
    """The verdict on the lowest measured loss: its lead over the runner-up in bootstrap standard errors of the
    paired difference, and P(best) = the share of resamples in which it has the lowest loss: the best of the
    measured adapters, not of every candidate (the first stage's recall bounds that); with ``of_all`` (the
    budgeted stage's ``BestChance`` and the candidates the first stage ranked), P(best of all of them)."""
    order = sorted(range(len(losses)), key=lambda i: losses[i])
    best = order[0]
    runner_up = order[1] if len(order) > 1 else None
    p_best = float((draws.argmin(dim=1) == best).double().mean())
    random_top1 = 1.0 / len(losses)
    chance = (
        f"; P(best of the {len(losses)} measured) {p_best:.0%} vs {random_top1:.0%} at random over the target's "
        "documents (an adapter not measured, ranked by its signature only, can still be better)"
    )
    if of_all is not None:
        p_best, random_top1 = of_all[0].probability, 1.0 / of_all[1]
        chance = (
            f"; P(best of all {of_all[1]} candidates) {p_best:.0%} vs {random_top1:.0%} at random (the first "
            f"stage's recall at the shortlist measured, {of_all[0].recall:.0%}, × the share of resamples of the "
            f"target's documents in which it beats every adapter measured, {of_all[0].measured_share:.0%})"
        )
    geometry = "measured loss"
    if runner_up is None:
        return Verdict(
            geometry,
            best,
            None,
            None,
            p_best,
            random_top1,
            (geometry,),
            (geometry,),
            True,
            f"{names[best]} is the only adapter measured" + (chance if of_all is not None else ""),
        )
    difference = draws[:, runner_up] - draws[:, best]
    spread = float(difference.std())
    gap = losses[runner_up] - losses[best]
    gap_z = gap / spread if spread > 0 else (float("inf") if gap > 0 else 0.0)
    clear = gap_z >= CLEAR_GAP_Z
    lead = (
        f"{names[best]} has the lowest loss on the target, {gap:.4f} nats/token below {names[runner_up]} "
        f"({gap_z:.1f} se)"
    )
    message = (f"{lead}: clearly better" if clear else f"no adapter is clearly better: {lead}") + chance
    return Verdict(geometry, best, runner_up, gap_z, p_best, random_top1, (geometry,), (geometry,), clear, message)


def _measured_candidates(
    names: Sequence[str],
    adapted: Sequence[DocumentLosses],
    base: DocumentLosses,
    draws: torch.Tensor,
    base_draws: torch.Tensor,
) -> list[MeasuredCandidate]:
    """Each adapter's loss and its gain over the base model, each ± its paired bootstrap standard error (``draws``
    of the adapters' losses, ``base_draws`` of the base model's), over every document."""
    return [
        MeasuredCandidate(
            name,
            a.loss,
            float(draws[:, i].std()),
            base.loss - a.loss,
            float((base_draws - draws[:, i]).std()),
            len(a.nll),
        )
        for i, (name, a) in enumerate(zip(names, adapted))
    ]


def rerank(
    model,
    batches: Sequence,
    rows: Sequence[RankedCandidate],
    first_stage_verdict: Verdict | None = None,
    token: str | None = None,
    *,
    wanted: int | None = None,
    base_model: str | None = None,
    max_adapter_bytes: int | None = None,
) -> Rerank:
    """Measure the target's loss (``batches``: its documents, as sketched) under the base ``model`` and under
    ``rows``' adapters in turn (``measure_adapter``, one at a time) until ``wanted`` (default: all) are measured,
    with paired bootstrap error bars; the ones that cannot be measured are skipped with their reason. The base
    model's pass keeps the input of the layers the first ``wanted`` adapters start at (``adapter_first_layers``:
    only their configs are read); one measured in place of a skipped one from another layer runs the full pass
    first. ``UnmeasurableAdaptersError`` when none can be."""
    if not rows:
        raise InputError("no adapter among the candidates to re-rank: the first stage ranked only dataset repos")
    started = time.perf_counter()
    model.eval()
    wanted = len(rows) if wanted is None else wanted
    target = TargetLosses(batches)
    target.keep_prefix_at(model, adapter_first_layers(model, rows[:wanted], token))  # those measured unless skipped
    base = target.losses(model)
    if not bool(torch.isfinite(base.nll).all()):
        raise InputError("the base model's own loss on the target is not finite: check the model and its dtype")
    measured_rows: list[RankedCandidate] = []
    adapted: list[DocumentLosses] = []
    skipped: list[Skipped] = []
    for row in rows:
        if len(adapted) == wanted:
            break
        assert row.adapter is not None  # second_stage_candidates keeps the rows that have an adapter
        try:
            losses = measure_adapter(
                model, target, row.adapter, base_model=base_model, token=token, max_adapter_bytes=max_adapter_bytes
            )
        except Skip as skip:
            skipped.append(Skipped(row.candidate, f"second stage: {skip.reason}"))
            continue
        measured_rows.append(row)
        adapted.append(losses)
    if not adapted:
        raise UnmeasurableAdaptersError(skipped)
    seconds = time.perf_counter() - started
    draws, base_draws = paired_bootstrap(base, adapted)
    names = [row.candidate for row in measured_rows]
    measured = _measured_candidates(names, adapted, base, draws, base_draws)
    verdict = measured_verdict(names, [m.loss for m in measured], draws)
    documents, tokens, spent = len(base.nll), int(base.tokens.sum()), target.spent / len(base.nll)
    return Rerank(
        measured, base.loss, verdict, first_stage_verdict, documents, tokens, seconds, skipped, full_passes=spent
    )
