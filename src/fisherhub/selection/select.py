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
from fisherhub.selection.candidates import candidate_name, discover, resolve_candidate
from fisherhub.selection.errors import NoCompatibleCandidatesError, Skip
from fisherhub.selection.index_ranking import SHORTLIST, check_shortlist, rank_index
from fisherhub.selection.ranking import (
    best_first,
    check_score,
    choose_options,
    common_base_model,
)
from fisherhub.selection.rerank import check_max_adapter_bytes, check_rerank, second_stage_candidates
from fisherhub.selection.rerank import rerank as measure
from fisherhub.selection.results import Selection
from fisherhub.selection.rows import RankedCandidate, Skipped
from fisherhub.selection.target import SketchOptions, Target, TargetSketcher, data_to_sketch, given_signatures

if TYPE_CHECKING:
    from fisherhub.hub.signature_index import LoadedIndex


def provenance(candidate, source: str, signature) -> str:
    """Who signed a candidate's signature and whether it can be verified: "signed by the repo" when it comes
    from the candidate's own repo or folder, else "signed by <where it comes from>"; then "verifiable" or
    "unverifiable (<why>)" (``verify.unverifiable_reason``)."""
    from fisherhub.verify import unverifiable_reason

    own = candidate.adapter.path if candidate.adapter is not None else candidate.name
    signed = source == own or source.startswith((f"{own}@", f"{own}:", f"{own}/", f"{own}{os.sep}"))
    signer = "signed by the repo" if signed else f"signed by {source.split(':', 1)[0].split('@', 1)[0]}"
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
    rerank: int = 0,
    max_adapter_bytes: int | None = None,
) -> Selection:
    """Rank ``candidates`` by the alignment of their training data's signature with ``target``'s.

    ``target``: a ``Signature``; a signature reference (a ``.safetensors`` file, ``datasets/org/name[:path]``,
    ``hf://...``); or data to sketch with each distinct candidate spec (``like=``) under the base model: a
    list of texts, a ``datasets`` Dataset, or a dataset id / folder / data file (``sketch`` sets columns and
    limits). ``candidates``: adapter repo ids (``org/name[@rev]``), local adapter folders (PEFT
    ``adapter_config.json``, signatures under ``.fisher_signatures/``), dataset repos (``datasets/org/name``) or
    local signature files of source datasets;
    None discovers the adapters of ``base_model`` on the Hub. A candidate's signature comes from its repo or
    folder, else from the dataset repos its card names under ``datasets:``. ``base_model`` (default: the one the
    target's signatures name, else the one the candidates' signatures name) filters signatures and adapters,
    and is what is loaded when ``model`` / ``tokenizer`` are not given. A candidate that cannot be compared
    with the target (another base model, sketch id or pilot direction) is skipped, with its reason.
    ``score``: ``auto`` (default: the geometry that carries the signal among these candidates, from their regime:
    ``fisherhub.analysis``), ``fisher`` (A), ``activation`` (S_a only) or ``error`` (S_e only). Every selection
    carries a ``verdict`` (the gap between #1 and #2 in standard errors, P(best) against random, which geometries
    agree, or "no candidate is clearly better"), shown under its table. With ``load=True`` the
    best ``top_k`` (default 1) adapters are loaded onto ``model`` (or the loaded base model) into
    ``selection.model``. ``token`` (default: the logged-in one, ``HF_TOKEN``) goes to every Hub call:
    discovery, repo infos, signature and config downloads, and ``Selection.load`` / ``mix``; a private repo
    it cannot read is skipped, saying so. ``rerank=k`` (a target given as data; 0: signatures only) adds a second
    stage: the first k adapters of the S_a and S_e rankings merged are loaded onto the base model one at a time
    and the target's sketched tokens measured under each (``selection.rerank``: loss ± bootstrap se over the
    target's documents, and the seconds of its k + 1 forward passes); the ranking puts them first, lowest loss
    first, and the verdict is then the measured one (``fisherhub.selection.rerank``). An adapter that cannot be
    measured (a malformed config, another type or base model, no weights or a weights file over
    ``max_adapter_bytes``, default: the base model's parameters at 4 bytes each; one peft cannot load, NaN or inf
    weights or loss) goes to ``skipped`` with its reason, the next of the merged rankings measured in its place.
    ``index`` (``datasets/org/name[@rev]``, built by ``fisherhub index build``) instead of ``candidates``: every
    row of the index is scored in one download and one matrix product, pinned to the index commit
    (``selection.index_ranking``); the ``shortlist`` best are then ranked from their own files at the commit
    each row names, so the result is exactly ``select_adapter`` of those candidates; a ``LoadedIndex``
    (``load_index``'s, pinned to its commit) ranks from the rows it already read. Candidates' repos are
    read ``workers`` at once (``hub.pool``).
    """
    score = check_score(score)
    rerank = check_rerank(rerank)
    max_adapter_bytes = check_max_adapter_bytes(max_adapter_bytes)
    given = given_signatures(target, base_model, token)
    data = data_to_sketch(target) if given is None else None
    if rerank and data is None:
        raise InputError(
            "rerank needs the target's data (texts or a dataset) to measure the adapters' loss on; "
            "a target given as a signature can be ranked by signatures only (rerank=0)"
        )
    if base_model is None and given is not None:
        base_model = common_base_model((s.metadata.get("base_model") for s in given), "the target's signatures")
    skipped: list[Skipped] = []
    targets = None
    if index is not None:
        if candidates is not None:
            raise InputError("pass candidates or index=, not both (the index chooses the candidates)")
        from fisherhub.hub.signature_index import LoadedIndex, load_index

        check_shortlist(shortlist)
        loaded = index if isinstance(index, LoadedIndex) else load_index(index, token)
        base_model = base_model or loaded.base_model
        sketcher = (
            None if data is None else TargetSketcher(data, model, tokenizer, base_model, sketch or SketchOptions())
        )
        targets = Target(given, sketcher)
        ranking = rank_index(loaded, targets, base_model, score, token)
        names, skipped = ranking.candidates(shortlist), list(ranking.skipped)
    else:
        names = list(candidates) if candidates is not None else discover(base_model, token)
    if not names:
        raise InputError("no candidates given: pass adapter repo ids or folders, or None and base_model= to discover")
    resolved = []
    unreadable = (FisherHubError, OSError, ValueError, RecursionError)  # a hostile or broken repo: never fatal
    for outcome in bounded_map(
        lambda name: resolve_candidate(name, base_model, token), names, workers, catch=(Skip, *unreadable)
    ):
        if isinstance(outcome.error, Skip):
            skipped.append(Skipped(candidate_name(outcome.item), outcome.error.reason))
        elif outcome.error is not None:
            skipped.append(Skipped(candidate_name(outcome.item), f"unreadable: {outcome.error}"))
        else:
            resolved.append(outcome.value)
    if base_model is None:
        named = (option.base_model for candidate in resolved for option in candidate.options)
        base_model = common_base_model(named, "the candidates' signatures")
    usable = []
    for candidate in resolved:
        try:
            usable.append((candidate, candidate.options_for(base_model)))
        except Skip as skip:
            skipped.append(Skipped(candidate.name, skip.reason))
    if targets is None:
        sketcher = (
            None if data is None else TargetSketcher(data, model, tokenizer, base_model, sketch or SketchOptions())
        )
        targets = Target(given, sketcher)
    sketcher = targets.sketcher
    rows = []
    chosen = choose_options(usable, targets.signatures)
    for outcome in bounded_map(lambda pair: pair[1].load(), chosen, workers, catch=(FisherHubError,)):
        candidate, option = outcome.item
        if outcome.error is not None:  # a remote file that is not a valid signature
            skipped.append(Skipped(candidate.name, f"unreadable signature {option.source}: {outcome.error}"))
            continue
        signature = outcome.value
        try:
            result = alignment_matrix([signature, plausible_target(targets.like(signature))]).pair(0, 1)
        except Skip as skip:
            skipped.append(Skipped(candidate.name, skip.reason))
            continue
        doubt = result.source_doubt or result.pair_doubt or result.source_noise or result.pair_noise
        rows.append(
            RankedCandidate(
                candidate.name,
                "fisher",
                result,
                option.source,
                candidate.adapter,
                doubt,
                provenance(candidate, option.source, signature),
            )
        )
    if not rows:
        raise NoCompatibleCandidatesError(skipped)
    trusted = [row for row in rows if row.doubt is None] or rows  # the verdict is about the plausible rows
    scored = score_selection([row.alignment for row in trusted], score, names=[row.candidate for row in trusted])
    geometry = scored.scores.geometry if scored.scores.geometry in HEAD_SCORES else "fisher"
    rows = [row.ranked_by(geometry) for row in rows]
    selection = Selection(
        best_first(rows),
        skipped,
        geometry,
        dict(targets.signatures),
        base_model,
        verdict=scored.verdict,
        choice=scored.choice,
        token=token,
        max_adapter_bytes=max_adapter_bytes,
    )
    if rerank:
        second = measure(
            sketcher.model,
            sketcher.batches(),
            second_stage_candidates(selection.ranking, len(selection.ranking)),
            selection.verdict,
            token,
            wanted=rerank,
            base_model=base_model,
            max_adapter_bytes=max_adapter_bytes,
        )
        selection = selection.reranked(second)
    if load:
        base = model if model is not None or sketcher is None else sketcher.model
        selection.model = selection.load(base, top_k)
    return selection
