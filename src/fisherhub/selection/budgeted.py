"""The budgeted second stage, ``select_adapter(rerank="halving", rerank_budget=B)``: the first stage's shortlist
(the first ``HALVING_SHORTLIST`` of the S_a and S_e rankings merged, ``rerank.second_stage_candidates``)
measured by successive halving (``analysis.halving``) within B full passes over the target's documents, the
base model's pass included, so B = 4 costs what ``rerank=3`` costs without the shared layers. An adapter whose
modules all lie in decoder layers L and above (its config, read before the rounds: ``lm.modules.config_first_layer``)
costs ``lm.modules.pass_share`` of a full pass per document, the layers below replaying what the base model's pass
kept (``target_losses``), so the budget measures more of them (``analysis.halving.candidate_capacity``); the passes
run are counted as they cost (``Rerank.full_passes``).

Each adapter measured in a round is one ``rerank.measure_adapter`` call on that round's documents (checked,
loaded, measured and unloaded as there); one it skips drops out with its reason and is never picked. The
finalists (measured on every document) are ranked by their loss, with the measured verdict among them (paired
bootstrap over the documents, ``rerank.measured_verdict``) and its P(best) of every candidate the first stage
ranked (``analysis.halving.best_chance``: its recall at the shortlist measured × the share of resamples in which
the pick beats every adapter measured, each on its own documents); an adapter dropped in an earlier round keeps its
loss and gain on the documents it was measured on (``MeasuredCandidate.documents``), ranked below them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from fisherhub.analysis.halving import BASE, Halving, best_chance, check_budget, halving_plan, successive_halving
from fisherhub.core.batch import IGNORE_INDEX
from fisherhub.core.errors import InputError
from fisherhub.core.registry import DEFAULT_RERANK_BUDGET, HALVING
from fisherhub.data.batches import Document, collate
from fisherhub.lm.modules import pass_share
from fisherhub.selection.errors import Skip, UnmeasurableAdaptersError
from fisherhub.selection.rerank import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    MeasuredCandidate,
    Rerank,
    adapter_first_layers,
    check_rerank,
    measure_adapter,
    measured_verdict,
    paired_bootstrap,
)
from fisherhub.selection.rows import Skipped
from fisherhub.selection.target_losses import DocumentLosses, TargetLosses

if TYPE_CHECKING:
    from fisherhub.analysis.verdict import Verdict
    from fisherhub.selection.rows import RankedCandidate


def check_second_stage(rerank: int | str | None, budget: int | None, has_data: bool) -> tuple[int | str, int | None]:
    """``rerank`` (k ≥ 0 adapters measured on every document, 0: none; or ``HALVING``; None, the default:
    ``HALVING`` for a target given as data, 0 for one given as signatures) and its ``budget`` (full passes, only
    with ``HALVING``; default ``DEFAULT_RERANK_BUDGET``), refused with what to pass instead, and refused without
    the target's data (``has_data``) to measure on."""
    if rerank is None:
        rerank = HALVING if has_data else 0
    if rerank == HALVING:
        checked: tuple[int | str, int | None] = (
            rerank,
            check_budget(DEFAULT_RERANK_BUDGET if budget is None else budget),
        )
    elif isinstance(rerank, str):
        raise InputError(f"rerank must be a number of adapters (0: signatures only) or {HALVING!r}, got {rerank!r}")
    elif budget is not None:
        raise InputError(
            f"rerank_budget is the budget of rerank={HALVING!r} (full passes over the target's documents); "
            f"rerank={rerank!r} measures its k adapters on every document: pass rerank={HALVING!r} or no budget"
        )
    else:
        checked = check_rerank(rerank), None
    if checked[0] and not has_data:
        raise InputError(
            "rerank needs the target's data (texts or a dataset) to measure the adapters' loss on (rerank=k or "
            f"{HALVING!r} with its rerank_budget); a target given as a signature can be ranked by signatures only "
            "(rerank=0)"
        )
    return checked


def document_subset(batches: Sequence, positions: Sequence[int]) -> list:
    """The documents at ``positions`` (0-based, in the order the right-padded ``batches`` hold them), in that
    order, regrouped by ``data.batches.collate`` into batches as large as the largest of ``batches`` (padded with
    the token id of the first padding found)."""
    wanted, documents, position = set(positions), [], 0
    for batch in batches:
        for row, index in enumerate(batch.doc_index.tolist()):
            if position in wanted:
                length = int(batch.attention_mask[row].sum())
                ids, labels = batch.input_ids[row, :length].tolist(), batch.labels[row, :length].tolist()
                documents.append((Document(index, ids, labels), batch.next_index))
            position += 1
    padded = (b.input_ids[b.attention_mask == 0] for b in batches if bool((b.attention_mask == 0).any()))
    pad, size = int(next(padded, torch.zeros(1))[0]), max((len(batch.doc_index) for batch in batches), default=1)
    return [
        collate([document for document, _ in documents[i : i + size]], pad, documents[i : i + size][-1][1])
        for i in range(0, len(documents), size)
    ]


def pass_shares(model, target: TargetLosses, rows: Sequence[RankedCandidate], token: str | None = None) -> list[float]:
    """Each row's adapter's cost of one document in full passes of ``model``: ``lm.modules.pass_share`` from the
    first layer its config adapts, where the base model's pass over ``target`` can keep that layer's input
    (``TargetLosses.keep_prefix_at``, named here); 1 where it cannot, or where the config cannot be read."""
    firsts = adapter_first_layers(model, rows, token)
    kept = target.keep_prefix_at(model, firsts)
    return [pass_share(model, first) if kept else 1.0 for first in firsts]


class _MeasuringOracle:
    """``analysis.halving``'s oracle over the library: the base ``model`` alone (``BASE``) or with the adapter of
    ``rows[c]`` (``measure_adapter``) on some of the target's documents; an adapter skipped once keeps its reason
    (``reasons``) and gives NaN, as it does for every later call. Each document-pass served moves ``bar``;
    ``spent`` counts them in full passes of a document (``TargetLosses.spent``)."""

    def __init__(self, model, target: TargetLosses, rows: Sequence[RankedCandidate], bar, **measure_options):
        self.model, self.target, self.rows, self.measure_options = model, target, rows, measure_options
        self.reasons: dict[int, str] = {}
        self.bar = bar
        self.spent = 0.0

    def __call__(self, candidates: Sequence[int], documents: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        ordered = sorted(documents)
        columns = torch.tensor([ordered.index(d) for d in documents])
        subset = self.target.regrouped(document_subset(self.target.batches, ordered))
        measured = []
        for c in candidates:
            losses = self._losses(c, subset) if c not in self.reasons else None
            measured.append(
                torch.full((len(ordered),), torch.nan, dtype=torch.float64) if losses is None else losses.nll
            )
            self.bar.update(len(ordered))
        self.spent += subset.spent
        tokens = torch.cat([(batch.labels[:, 1:] != IGNORE_INDEX).sum(dim=1).double() for batch in subset])
        return torch.stack(measured)[:, columns], tokens[columns]

    def _losses(self, candidate: int, subset: TargetLosses) -> DocumentLosses | None:
        if candidate == BASE:
            base = subset.losses(self.model)
            if not bool(torch.isfinite(base.nll).all()):
                raise InputError("the base model's own loss on the target is not finite: check the model and its dtype")
            return base
        adapter = self.rows[candidate].adapter
        assert adapter is not None  # second_stage_candidates keeps the rows that have an adapter
        try:
            return measure_adapter(self.model, subset, adapter, **self.measure_options)
        except Skip as skip:
            self.reasons[candidate] = skip.reason
            return None


def _measured(name: str, outcome: Halving, candidate: int, base: DocumentLosses) -> MeasuredCandidate:
    """``candidate``'s loss and its gain over the base model, each ± its paired bootstrap se, on the documents
    it was measured on."""
    seen = torch.isfinite(outcome.nll[candidate])
    own = DocumentLosses(outcome.nll[candidate, seen], base.tokens[seen])
    base_seen = DocumentLosses(base.nll[seen], base.tokens[seen])
    draws, base_draws = paired_bootstrap(base_seen, [own])
    gain_stderr = float((base_draws - draws[:, 0]).std())
    return MeasuredCandidate(
        name, own.loss, float(draws[:, 0].std()), base_seen.loss - own.loss, gain_stderr, int(seen.sum())
    )


def _halving_message(message: str, only: str, finalists: int, outcome: Halving) -> str:
    """The measured verdict's ``message`` among the ``finalists`` (``only``: the one, when there is one), and
    how many adapters were dropped in earlier rounds, and why. A single finalist is clearly the best when every
    other was dropped as clearly behind (none for the budget)."""
    behind = sum(len(r.clearly_behind) for r in outcome.rounds)
    budget = sum(len(r.over_budget) for r in outcome.rounds)
    if finalists == 1:
        rest = message.removeprefix(f"{only} is the only adapter measured")
        message = f"{only} is the only adapter left for the last round (measured on every document){rest}"
    if behind + budget:
        message += (
            f"; {behind + budget} more measured on fewer documents and dropped in earlier rounds ({behind} clearly "
            f"behind the leader, {budget} for the budget)"
        )
    return message


def _finalists_verdict(names: Sequence[str], outcome: Halving, in_order: list[int], candidates: int) -> Verdict:
    """The measured verdict among the adapters measured on the most documents (the finalists; ``in_order``
    indexes the ranking's measured rows), with P(best of all ``candidates``) (``best_chance``)."""
    most = max(outcome.documents(c) for c in in_order)  # every document, unless the last round's all broke
    finalists = [c for c in in_order if outcome.documents(c) == most]
    seen = torch.isfinite(outcome.nll[finalists[0]])
    draws, _ = paired_bootstrap(
        DocumentLosses(outcome.base_nll[seen], outcome.tokens[seen]),
        [DocumentLosses(outcome.nll[c, seen], outcome.tokens[seen]) for c in finalists],
    )
    chance = best_chance(outcome, candidates, draws=BOOTSTRAP_DRAWS, seed=BOOTSTRAP_SEED)
    verdict = measured_verdict(
        [names[c] for c in finalists], [outcome.loss(c) for c in finalists], draws, (chance, candidates)
    )
    position = {c: in_order.index(c) for c in finalists}
    return dataclasses.replace(
        verdict,
        best=position[finalists[verdict.best]],
        runner_up=None if verdict.runner_up is None else position[finalists[verdict.runner_up]],
        message=_halving_message(verdict.message, names[finalists[0]], len(finalists), outcome),
        clear=verdict.clear if len(finalists) > 1 else not any(r.over_budget for r in outcome.rounds),
    )


def halving_rerank(
    model,
    batches: Sequence,
    rows: Sequence[RankedCandidate],
    first_stage_verdict: Verdict | None = None,
    token: str | None = None,
    *,
    budget: int,
    candidates: int | None = None,
    base_model: str | None = None,
    max_adapter_bytes: int | None = None,
) -> Rerank:
    """``rows`` (the shortlist, first-stage order) measured on the target's ``batches`` by successive halving
    within ``budget`` full passes (module docstring); the verdict among the adapters measured on the most
    documents (the finalists), its P(best) of all the ``candidates`` the first stage ranked (default: the rows;
    ``analysis.halving.best_chance``). ``InputError`` for no rows, no documents, a bad budget or a base model
    whose own loss is not finite (before any adapter is loaded); ``UnmeasurableAdaptersError`` when none can be
    measured."""
    if not rows:
        raise InputError("no adapter among the candidates to re-rank: the first stage ranked only dataset repos")
    started = time.perf_counter()
    model.eval()
    batches = list(batches)
    documents = sum(len(batch.doc_index) for batch in batches)
    target = TargetLosses(batches)
    shares = pass_shares(model, target, rows, token)
    most = documents + halving_plan(len(rows), documents, budget, shares).passes
    from huggingface_hub.utils import tqdm  # off under HF_HUB_DISABLE_PROGRESS_BARS=1 or disable_progress_bars()

    with tqdm(total=most, unit="doc", desc=f"second stage (halving, {len(rows)} adapters)") as bar:
        oracle = _MeasuringOracle(
            model, target, rows, bar, base_model=base_model, token=token, max_adapter_bytes=max_adapter_bytes
        )
        outcome = successive_halving(len(rows), documents, budget, oracle, shares)
    base = DocumentLosses(outcome.base_nll, outcome.tokens)
    skipped = [Skipped(rows[c].candidate, f"second stage: {reason}") for c, reason in sorted(oracle.reasons.items())]
    if not outcome.order:
        raise UnmeasurableAdaptersError(skipped)
    in_order = sorted(outcome.order)
    measured = [_measured(rows[c].candidate, outcome, c, base) for c in in_order]
    verdict = _finalists_verdict([row.candidate for row in rows], outcome, in_order, max(len(rows), candidates or 0))
    seconds = time.perf_counter() - started
    return Rerank(
        measured,
        base.loss,
        verdict,
        first_stage_verdict,
        documents,
        int(base.tokens.sum()),
        seconds,
        skipped,
        budget=budget,
        passes=outcome.passes,
        full_passes=oracle.spent / documents,
    )
