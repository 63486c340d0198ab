"""``select_adapter``: the candidates' signatures, the target's, and the ranking, put together."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fisherhub.core.alignment import alignment_matrix
from fisherhub.core.errors import FisherHubError, InputError
from fisherhub.core.signature import Signature
from fisherhub.analysis.verdict import score_selection
from fisherhub.core.geometry import DEFAULT_SCORE, HEAD_SCORES
from fisherhub.hub.pool import DEFAULT_WORKERS, bounded_map
from fisherhub.selection.candidates import (
    NO_SIGNATURE,
    Candidate,
    SignatureOption,
    candidate_name,
    discover,
    resolve_candidate,
)
from fisherhub.selection.errors import NoCompatibleCandidatesError, Skip, UnmeasurableAdaptersError
from fisherhub.selection.index_ranking import SHORTLIST, check_shortlist, rank_index
from fisherhub.selection.ranking import (
    best_first,
    check_score,
    choose_options,
    common_base_model,
)
from fisherhub.core.registry import HALVING_SHORTLIST
from fisherhub.selection.budgeted import check_second_stage, halving_rerank
from fisherhub.selection.rerank import check_max_adapter_bytes, second_stage_candidates
from fisherhub.selection.rerank import rerank as measure
from fisherhub.selection.results import Selection
from fisherhub.selection.rows import RankedCandidate, Skipped
from fisherhub.selection.target import SketchOptions, Target, TargetSketcher, data_to_sketch, given_signatures

if TYPE_CHECKING:
    from fisherhub.hub.signature_index.store import LoadedIndex


def provenance(candidate, source: str, signature) -> str:
    """Who signed a candidate's signature and whether it can be verified: "signed by the repo" when it comes
    from the candidate's own repo or folder, else "signed by <where it comes from>", and "from its generations
    (...)" for a signature of the adapter's own samples (``legend.generation_words``); then "verifiable" or
    "unverifiable (<why>)" (``verify.unverifiable_reason``)."""
    from fisherhub.legend import generation_words
    from fisherhub.verify import unverifiable_reason

    own = candidate.adapter.path if candidate.adapter is not None else candidate.name
    signed = source == own or source.startswith((f"{own}@", f"{own}:", f"{own}/", f"{own}{os.sep}"))
    signer = "signed by the repo" if signed else f"signed by {source.split(':', 1)[0].split('@', 1)[0]}"
    if (generated := generation_words(signature.metadata)) is not None:
        signer = f"{signer} {generated}"
    reason = unverifiable_reason(signature)
    return f"{signer}; {'verifiable' if reason is None else f'unverifiable ({reason})'}"


def plausible_target(target: Signature) -> Signature:
    """``target``, unless its own numbers fail the bounded-claims checks (``Signature.findings``): no candidate's
    alignment with it could then be trusted, so the selection is refused."""
    doubt, _ = target.findings()
    if doubt is not None:
        source = target.metadata.get("dataset") or "the target"
        raise InputError(f"the target signature ({source}) cannot be ranked against: {doubt}")
    return target


def _sketcher(data, model, tokenizer, base_model: str | None, sketch: SketchOptions | None) -> TargetSketcher | None:
    """What sketches a target given as data (None for one given as signatures)."""
    return None if data is None else TargetSketcher(data, model, tokenizer, base_model, sketch or SketchOptions())


def _index_shortlist(
    index: str | LoadedIndex,
    shortlist: int,
    score: str,
    token,
    base_model,
    given,
    data,
    model,
    tokenizer,
    sketch,
    skipped,
) -> tuple[list[str], Target, str]:
    """The ``shortlist`` best candidates of the signature index ``index`` (its rows scored at once,
    ``rank_index``; a ``LoadedIndex``: from the rows it read), the target they were scored against, and the base
    model; rows left out go to ``skipped``."""
    from fisherhub.hub.signature_index.store import LoadedIndex, load_index

    check_shortlist(shortlist)
    loaded = index if isinstance(index, LoadedIndex) else load_index(index, token)
    base_model = base_model or loaded.base_model
    targets = Target(given, _sketcher(data, model, tokenizer, base_model, sketch))
    ranking = rank_index(loaded, targets, base_model, score, token)
    skipped.extend(ranking.skipped)
    return ranking.candidates(shortlist), targets, base_model


def candidate_pool(
    names: Sequence[str | os.PathLike], base_model: str | None, token: str | None, workers: int, skipped: list[Skipped]
) -> tuple[list[tuple[Candidate, list[SignatureOption]]], str | None]:
    """Each named candidate resolved (``workers`` at once) with its signatures for the base model, and that base
    model (default: the one the candidates' signatures name); a candidate that cannot be resolved, or has no
    signature for the base model, goes to ``skipped`` with its reason (a hostile or broken repo is never fatal)."""
    if not names:
        raise InputError("no candidates given: pass adapter repo ids or folders, or None and base_model= to discover")
    resolved = []
    unreadable = (FisherHubError, OSError, ValueError, RecursionError)
    for outcome in bounded_map(
        lambda name: resolve_candidate(name, base_model, token), names, workers, catch=(Skip, *unreadable)
    ):
        if isinstance(outcome.error, Skip):
            skipped.append(Skipped(candidate_name(outcome.item), outcome.error.reason))
        elif outcome.error is not None:
            skipped.append(Skipped(candidate_name(outcome.item), f"unreadable: {outcome.error}"))
        else:
            resolved.append(outcome.result())
    if base_model is None:
        named = (option.base_model for candidate in resolved for option in candidate.options)
        base_model = common_base_model(named, "the candidates' signatures")
    usable = []
    for candidate in resolved:
        try:
            usable.append((candidate, candidate.options_for(base_model)))
        except Skip as skip:
            skipped.append(Skipped(candidate.name, skip.reason))
    return usable, base_model


def scored_rows(
    usable: Sequence[tuple[Candidate, list[SignatureOption]]], targets: Target, workers: int, skipped: list[Skipped]
) -> list[RankedCandidate]:
    """One row per candidate: the signature chosen for it (``choose_options``) loaded (``workers`` at once) and
    aligned with the target's of its sketch id; what cannot be loaded or compared goes to ``skipped``."""
    rows = []
    chosen = choose_options(usable, targets.signatures)
    for loaded in bounded_map(lambda pair: pair[1].load(), chosen, workers, catch=(FisherHubError,)):
        candidate, option = loaded.item
        if loaded.error is not None:  # a remote file that is not a valid signature
            skipped.append(Skipped(candidate.name, f"unreadable signature {option.source}: {loaded.error}"))
            continue
        signature = loaded.result()
        try:
            result = alignment_matrix([signature, plausible_target(targets.like(signature))]).pair(0, 1)
        except Skip as skip:
            skipped.append(Skipped(candidate.name, skip.reason))
            continue
        doubt = result.source_doubt or result.pair_doubt or result.source_noise or result.pair_noise
        source = option.source
        provenance_text = provenance(candidate, source, signature)
        rows.append(
            RankedCandidate(candidate.name, "fisher", result, source, candidate.adapter, doubt, provenance_text)
        )
    return rows


def ranked_selection(
    rows: list[RankedCandidate],
    skipped: list[Skipped],
    score: str,
    targets: Target,
    base_model: str | None,
    token: str | None,
    max_adapter_bytes: int | None = None,
) -> Selection:
    """The rows ranked by ``score`` (``auto``: the geometry the plausible rows' regime chooses) with the verdict
    on the plausible rows, as a ``Selection``; ``NoCompatibleCandidatesError`` without rows."""
    if not rows:
        raise NoCompatibleCandidatesError(skipped)
    trusted = [row for row in rows if row.doubt is None] or rows  # the verdict is about the plausible rows
    scored = score_selection([row.alignment for row in trusted], score, names=[row.candidate for row in trusted])
    geometry = scored.scores.geometry if scored.scores.geometry in HEAD_SCORES else "fisher"
    ranked = best_first(row.ranked_by(geometry) for row in rows)
    return Selection(
        ranked,
        skipped,
        geometry,
        dict(targets.signatures),
        base_model,
        verdict=scored.verdict,
        choice=scored.choice,
        token=token,
        max_adapter_bytes=max_adapter_bytes,
    )


def _second_stage(
    selection: Selection,
    sketcher: TargetSketcher,
    rerank: int | str,
    budget: int | None,
    chosen: bool,
    token: str | None,
    max_adapter_bytes: int | None,
) -> Selection:
    """``selection`` re-ranked by the target's measured loss: under ``rerank`` adapters of the merged first-stage
    rankings (``rerank.rerank``; an adapter that cannot be measured gives its place to the next), or under its
    shortlist by successive halving within ``budget`` passes (``budgeted.halving_rerank``). The default stage
    (not ``chosen`` by the user) passes over candidates without an adapter, and keeps the first stage's ranking
    when it can measure none (``Selection.unmeasured``)."""
    adapters = second_stage_candidates(selection.ranking, len(selection.ranking))
    if not chosen and not adapters:
        return selection
    base_model, batches = selection.base_model, sketcher.batches()
    try:
        if budget is None:
            assert isinstance(rerank, int)  # check_second_stage: an int unless halving
            second = measure(
                sketcher.model,
                batches,
                adapters,
                selection.verdict,
                token,
                wanted=rerank,
                base_model=base_model,
                max_adapter_bytes=max_adapter_bytes,
            )
        else:
            second = halving_rerank(
                sketcher.model,
                batches,
                adapters[:HALVING_SHORTLIST],  # second_stage_candidates' first k: the same merge cut at k
                selection.verdict,
                token,
                budget=budget,
                candidates=len(adapters),
                base_model=base_model,
                max_adapter_bytes=max_adapter_bytes,
            )
    except UnmeasurableAdaptersError as error:
        if chosen:
            raise
        return selection.unmeasured(error.skipped)
    return selection.reranked(second)


def select_adapter(
    target: Any,
    candidates: Sequence[str | os.PathLike] | None = None,
    base_model: str | None = None,
    top_k: int | None = None,
    load: bool = False,
    score: str = DEFAULT_SCORE,
    *,
    model=None,
    tokenizer=None,
    sketch: SketchOptions | None = None,
    token: str | None = None,
    index: str | LoadedIndex | None = None,
    shortlist: int = SHORTLIST,
    workers: int = DEFAULT_WORKERS,
    rerank: int | str | None = None,
    rerank_budget: int | None = None,
    max_adapter_bytes: int | None = None,
) -> Selection:
    """Rank ``candidates`` by the alignment of their training data's signature with ``target``'s. A candidate's
    signature comes from its repo or folder, else from the dataset repos its card names under ``datasets:``; a
    candidate that cannot be compared with the target (another base model, sketch id or pilot direction) is
    skipped, with its reason. Every selection carries a ``verdict`` (the gap between #1 and #2 in standard
    errors, P(best) against random, which geometries agree, or "no candidate is clearly better"), shown under
    its table. Candidates' repos are read ``workers`` at once (``hub.pool``).

    Args:
        target (`Signature`, `str`, `list[str]` or `datasets.Dataset`):
            A ``Signature``; a signature reference (a ``.safetensors`` file, ``datasets/org/name[:path]``,
            ``hf://...``); or data to sketch with each distinct candidate spec (``like=``) under the base model:
            a list of texts, a ``datasets`` Dataset, or a dataset id / folder / data file.
        candidates (`Sequence[str | os.PathLike]`, *optional*):
            Adapter repo ids (``org/name[@rev]``), local adapter folders (PEFT ``adapter_config.json``,
            signatures under ``.fisher_signatures/``), dataset repos (``datasets/org/name``) or local signature
            files of source datasets; None discovers the adapters of ``base_model`` on the Hub.
        base_model (`str`, *optional*):
            Filters signatures and adapters, and is what is loaded when ``model`` / ``tokenizer`` are not given
            (default: the one the target's signatures name, else the one the candidates' signatures name).
        top_k (`int`, *optional*):
            With ``load``: how many of the best adapters are loaded (default 1).
        load (`bool`, *optional*):
            Load the best ``top_k`` adapters onto ``model`` (or the loaded base model) into ``selection.model``.
        score (`str`, *optional*):
            ``auto`` (the geometry that carries the signal among these candidates, from their regime:
            ``fisherhub.analysis``), ``fisher`` (A), ``activation`` (S_a only) or ``error`` (S_e only).
        model (`torch.nn.Module`, *optional*):
            The base model, to sketch a target given as data and to load adapters onto.
        tokenizer (`PreTrainedTokenizerBase`, *optional*):
            Its tokenizer.
        sketch (`SketchOptions`, *optional*):
            Columns, limits and batch size of a target given as data.
        token (`str`, *optional*):
            Goes to every Hub call (default: the logged-in one, ``HF_TOKEN``): discovery, repo infos, signature
            and config downloads, and ``Selection.load`` / ``mix``; a private repo it cannot read is skipped.
        index (`str` or `LoadedIndex`, *optional*):
            A signature index (``datasets/org/name[@rev]``, ``fisherhub index build``) instead of
            ``candidates``: every row is scored in one download and one matrix product, pinned to the index
            commit; the ``shortlist`` best are then ranked from their own files at the commit each row names,
            so the result is exactly ``select_adapter`` of those candidates. A ``LoadedIndex`` (``load_index``'s,
            pinned to its commit) ranks from the rows it already read.
        shortlist (`int`, *optional*):
            With ``index``: how many rows are ranked again from their files.
        workers (`int`, *optional*):
            Hub requests in flight at once.
        rerank (`int` or `str`, *optional*):
            The default (None) is ``"halving"`` for a target given as data whose candidates include adapters,
            and the first stage alone otherwise (a target given as signatures, or only dataset repos); when it
            can measure none of the adapters, the first stage's ranking stands and its verdict says why. 0
            ranks by signatures only. k > 0 (a target given as data) adds a second stage: the first k adapters of the S_a and S_e
            rankings merged are loaded onto the base model one at a time and the target's sketched tokens
            measured under each (``selection.rerank``: loss ± bootstrap se over the target's documents); the
            ranking puts them first, lowest loss first, and the verdict is then the measured one. An adapter that
            cannot be measured (a malformed config, another type or base model, no weights or a weights file over
            ``max_adapter_bytes``; one peft cannot load, NaN or inf weights or loss) goes to ``skipped`` with its
            reason, the next of the merged rankings measured in its place. ``"halving"``: the budgeted second
            stage (``selection.budgeted``): the first 32 of the merged rankings measured by successive halving in
            paired rounds over disjoint slices of the target's documents, within ``rerank_budget`` passes.
        rerank_budget (`int`, *optional*):
            With ``rerank="halving"``: full passes over the target's documents, the base model's included
            (default 4, what ``rerank=3`` cost without the shared layers; at least 2; the shortlist's size + 1
            measures every adapter on every document). An adapter whose config adapts only decoder layers L and
            above counts its share of a full pass (the layers below replay the base model's pass), so the budget
            measures more of them (``Rerank.full_passes``: what was spent). A budget too small for the shortlist or the
            documents measures fewer of the shortlist (at worst the first ``rerank_budget - 1``, as ``rerank``).
        max_adapter_bytes (`int`, *optional*):
            The largest adapter weights file the second stage, ``Selection.load`` and ``mix`` load (default: the
            base model's parameters at 4 bytes each).

    Returns:
        `Selection`: the ranking (best first), the candidates skipped and why, the verdict, and the target's
        signatures; ``selection.model`` with ``load=True``.

    Raises:
        `NoCompatibleCandidatesError`: no candidate could be ranked (each skipped one says why).
        `InputError`: no candidates, both ``candidates`` and ``index``, ``rerank`` or ``rerank_budget`` without
            data, a budget without ``rerank="halving"`` or below 2, a bad option.
        `HubError`: discovery or the index could not be read from the Hub.
    """
    score = check_score(score)
    max_adapter_bytes = check_max_adapter_bytes(max_adapter_bytes)
    given = given_signatures(target, base_model, token)
    data = data_to_sketch(target) if given is None else None
    chosen = rerank is not None
    rerank, rerank_budget = check_second_stage(rerank, rerank_budget, data is not None)
    if base_model is None and given is not None:
        base_model = common_base_model((s.metadata.get("base_model") for s in given), "the target's signatures")
    skipped: list[Skipped] = []
    targets = None
    names: Sequence[str | os.PathLike]
    if index is not None:
        if candidates is not None:
            raise InputError("pass candidates or index=, not both (the index chooses the candidates)")
        names, targets, base_model = _index_shortlist(
            index, shortlist, score, token, base_model, given, data, model, tokenizer, sketch, skipped
        )
    elif candidates is not None:
        names = list(candidates)
    else:
        names, unsigned = discover(base_model, token)
        skipped += [Skipped(candidate_name(snapshot), NO_SIGNATURE) for snapshot in unsigned]
        if not names:  # every adapter the Hub lists is unsigned: say so for each
            raise NoCompatibleCandidatesError(skipped)
    usable, base_model = candidate_pool(names, base_model, token, workers, skipped)
    if targets is None:
        targets = Target(given, _sketcher(data, model, tokenizer, base_model, sketch))
    sketcher = targets.sketcher
    selection = ranked_selection(
        scored_rows(usable, targets, workers, skipped), skipped, score, targets, base_model, token, max_adapter_bytes
    )
    if rerank:
        assert sketcher is not None  # rerank needs the target's data (refused above without it)
        selection = _second_stage(selection, sketcher, rerank, rerank_budget, chosen, token, max_adapter_bytes)
    if load:
        base = model if model is not None or sketcher is None else sketcher.model
        selection.model = selection.load(base, top_k)
    return selection
