"""A signature index (``hub/signature_index.py``) read once, pinned to its commit, for browsing: its rows as a
table, filtered; one row's nearest neighbours with A ± se, the decomposition and the verdict; the heatmap of A
among the rows shown; a target signature ranked exactly as ``select_adapter(target, index=...)`` ranks it; links
to the repos on the Hub the app reads; copy-paste snippets. No Gradio here: the index Space
(``space/index_app.py``) only lays these out.

A row's neighbours: the row's own signature file (one download) scores every row of the index in one matrix
product (``selection.index_ranking.row_scores``); the ``SHORTLIST`` best other rows are loaded from their files
and ranked by ``analysis.nearest.rank_nearest``, so the neighbours and their error bars are those of
``rank_nearest`` over the signatures of those rows.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from fisherhub.core.errors import FisherHubError, InputError, SignatureFileError
from fisherhub.core.registry import GENERATED_SOURCE, MIN_DOCUMENTS
from fisherhub.core.signature import CLAMPED_NORMS_KEY
from fisherhub.hub.pool import bounded_map
from fisherhub.selection.index_ranking import SHORTLIST, row_scores

if TYPE_CHECKING:
    from fisherhub.analysis.nearest import Neighbour
    from fisherhub.analysis.verdict import Verdict
    from fisherhub.core.signature import Signature
    from fisherhub.hub.signature_index import IndexRows, LoadedIndex
    from fisherhub.selection.results import Selection

GENERATED = GENERATED_SOURCE
#: how each row's signature was obtained, in words (the table's "signature source")
SOURCES = {
    "published": "the repo's own",
    "verified": "the repo's own",
    "sketched": "from the card's datasets",
    GENERATED: "from generations",
}
#: the words of a row that the task-word filter offers: from its dataset's name and its card's tags
_WORD = re.compile(r"[a-z][a-z0-9]{2,}")
#: words too common in repo and dataset names to say anything of a task
_NOT_TASK_WORDS = frozenset({"lora", "peft", "adapter", "adapters", "the", "and", "for", "dataset", "datasets", "data"})
#: how many task words the filter offers (the most frequent)
TASK_WORDS = 200
#: neighbours shown for one row
NEIGHBOURS = 10
#: signature files kept in memory by a browser (53 KB each at m = 4,096), the least recently used dropped first
KEPT_SIGNATURES = 1024


@dataclasses.dataclass(frozen=True)
class Filters:
    """Which rows to show: of ``base_model`` ("" any), having every one of ``task_words``, of ``license`` (""
    any; ``UNKNOWN_LICENSE`` for rows whose card names none), whose repo id or dataset contains ``search``
    (case-insensitive)."""

    base_model: str = ""
    task_words: tuple[str, ...] = ()
    license: str = ""
    search: str = ""


UNKNOWN_LICENSE = "(none given)"


@dataclasses.dataclass(frozen=True)
class RowView:
    """What the table shows of one index row."""

    repo_id: str
    repo_type: str
    commit: str
    base_model: str
    dataset: str
    tokens: int
    documents: int
    source: str
    verified: bool
    license: str
    words: frozenset[str]
    flags: tuple[str, ...]

    @property
    def kind(self) -> str:
        return "adapter" if self.repo_type == "model" else "dataset"


def row_flags(row: dict[str, Any], metadata: dict[str, Any], common_sketch_id: str | None) -> tuple[str, ...]:
    """What a reader should know before trusting a row: unresolved split norms, too few documents
    (``MIN_DOCUMENTS``), a signature sketched from generations (a fallback), its file kept in the index repo (signed by the indexer), data that cannot be
    re-sketched (``verify.unverifiable_metadata``), a sketch id the other rows do not share."""
    from fisherhub.legend import generation_words
    from fisherhub.verify import unverifiable_metadata

    flags = []
    if metadata.get(CLAMPED_NORMS_KEY):
        flags.append(f"unresolved split norms ({metadata[CLAMPED_NORMS_KEY]}): its alignments are noise")
    if row["num_documents"] < MIN_DOCUMENTS:
        flags.append(f"{row['num_documents']} documents: below {MIN_DOCUMENTS} its error bars understate its noise")
    if (generated := generation_words(metadata)) is not None:
        flags.append(f"sketched {generated}, not from its training data")
    if row.get("file_repo"):
        flags.append("signed by the indexer")
    if (reason := unverifiable_metadata(metadata)) is not None:
        flags.append(f"unverifiable: {reason}")
    if common_sketch_id is not None and row["sketch_id"] != common_sketch_id:
        flags.append(f"sketch id {row['sketch_id']}: not comparable with most rows")
    return tuple(flags)


def row_view(row: dict[str, Any], common_sketch_id: str | None) -> RowView:
    from fisherhub.safe_text import printable

    try:
        metadata = json.loads(row.get("metadata") or "{}")
    except json.JSONDecodeError:
        metadata = {}
    metadata = {str(k): str(v) for k, v in metadata.items()} if isinstance(metadata, dict) else {}
    obtained = GENERATED if metadata.get("source") == GENERATED else row["obtained"]
    dataset = printable(row.get("dataset") or "")
    tags = [str(tag).lower() for tag in row.get("tags") or []]
    words = frozenset(w for text in (dataset.lower(), *tags) for w in _WORD.findall(text)) - _NOT_TASK_WORDS
    return RowView(
        repo_id=printable(row["repo_id"]),
        repo_type=row["repo_type"],
        commit=row["commit"],
        base_model=printable(row.get("base_model") or ""),
        dataset=dataset,
        tokens=int(row["num_tokens"]),
        documents=int(row["num_documents"]),
        source=SOURCES.get(obtained, obtained),
        verified=row["obtained"] == "verified",
        license=printable(row.get("license") or UNKNOWN_LICENSE),
        words=words,
        flags=row_flags(row, metadata, common_sketch_id),
    )


@dataclasses.dataclass(frozen=True)
class Neighbourhood:
    """One row's nearest neighbours: ``neighbours`` (``rank_nearest``'s, nearest first, named by ``names``:
    name -> row), the verdict on picking the first for the row's data, and the shortlisted rows whose file
    could not be read, with why."""

    row: int
    neighbours: list[Neighbour]
    rows: dict[str, int]
    verdict: Verdict | None
    unreadable: list[tuple[str, str]]


class IndexBrowser:
    """An index read at one commit: ``rows`` (the checked rows, ``read_rows``) and a ``RowView`` of each."""

    def __init__(self, loaded: LoadedIndex, rows: IndexRows, token: str | None = None):
        self.loaded, self.rows, self.token = loaded, rows, token
        counts = collections.Counter(row["sketch_id"] for row in rows.rows)
        self.common_sketch_id = counts.most_common(1)[0][0] if counts else None
        self.views = [row_view(row, self.common_sketch_id) for row in rows.rows]
        self._rows_of_repo = collections.Counter((view.repo_type, view.repo_id) for view in self.views)
        self._signatures: collections.OrderedDict[int, Signature] = collections.OrderedDict()
        self._lock = threading.Lock()  # the app's sessions share one browser

    @classmethod
    def open(cls, name: str, token: str | None = None) -> IndexBrowser:
        """The index ``name`` (``datasets/org/name[@rev]``) at the commit its revision is now (``load_index``)."""
        from fisherhub.hub.signature_index import load_index

        loaded = load_index(name, token)
        return cls(loaded, loaded.rows(), token)

    # -- what the index is ------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """``datasets/org/name``."""
        return f"datasets/{self.loaded.ref.repo_id}"

    @property
    def base_model(self) -> str:
        return self.loaded.base_model

    def summary(self) -> str:
        """The header's Markdown: the index (a link, at its commit), its base model, what it holds."""
        from fisherhub.space.text import escape, hub_url, link

        repos = len(self._rows_of_repo)
        skipped = len(self.rows.skipped)
        return (
            f"## Fisher signatures of {link(self.base_model, hub_url('model', self.base_model))}\n\n"
            f"{len(self.rows):,} signatures of {repos:,} repos in the index "
            f"{link(self.loaded.ref.repo_id, hub_url('dataset', self.loaded.ref.repo_id))} at commit "
            f"{link(self.loaded.commit[:12], hub_url('dataset', self.loaded.ref.repo_id, self.loaded.commit))}"
            + (f"; {skipped:,} rows left out (they fail the checks a signature file gets)" if skipped else "")
            + f". A = the Fisher alignment of two tasks under {escape(self.base_model)}, ± its standard error."
        )

    # -- filters ----------------------------------------------------------------------------------------
    def choices(self) -> dict[str, list[str]]:
        """What each filter offers: base models and licenses (most rows first), the ``TASK_WORDS`` commonest
        task words."""
        count = collections.Counter
        return {
            "base_model": [name for name, _ in count(v.base_model for v in self.views).most_common()],
            "license": [name for name, _ in count(v.license for v in self.views).most_common()],
            "task_words": sorted(w for w, _ in count(w for v in self.views for w in v.words).most_common(TASK_WORDS)),
        }

    def select(self, filters: Filters) -> list[int]:
        """The rows ``filters`` keep, most tokens first."""
        words, needle = set(filters.task_words), filters.search.strip().lower()
        kept = [
            i
            for i, view in enumerate(self.views)
            if (not filters.base_model or view.base_model == filters.base_model)
            and (not filters.license or view.license == filters.license)
            and words <= view.words
            and (not needle or needle in view.repo_id.lower() or needle in view.dataset.lower())
        ]
        return sorted(kept, key=lambda i: -self.views[i].tokens)

    # -- the table --------------------------------------------------------------------------------------
    COLUMNS = ("repo", "kind", "base model", "dataset", "tokens", "signature source", "verified", "license", "flags")

    def table(self, indices: Iterable[int]) -> list[list[Any]]:
        """One table row per index row: the repo as a link (Markdown), the rest as plain text."""
        from fisherhub.space.text import hub_url, link

        out = []
        for i in indices:
            view = self.views[i]
            out.append(
                [
                    link(view.repo_id, hub_url(view.repo_type, view.repo_id)),
                    view.kind,
                    view.base_model,
                    view.dataset or "—",
                    view.tokens,
                    view.source,
                    "yes" if view.verified else "no",
                    view.license,
                    "; ".join(view.flags) or "—",
                ]
            )
        return out

    # -- one row ----------------------------------------------------------------------------------------
    def signature(self, i: int) -> Signature:
        """Row ``i``'s signature, from its file at the commit the row names (downloaded once)."""
        from fisherhub.hub.read import load_signature

        with self._lock:
            signature = self._signatures.get(i)
        if signature is None:
            signature = load_signature(self.rows.file_ref(i).short(), token=self.token)
        with self._lock:
            self._signatures[i] = signature
            self._signatures.move_to_end(i)
            while len(self._signatures) > KEPT_SIGNATURES:
                self._signatures.popitem(last=False)
        return signature

    def row_name(self, i: int) -> str:
        """The row's repo id, with its file's name when the repo has several rows."""
        view = self.views[i]
        if self._rows_of_repo[(view.repo_type, view.repo_id)] > 1:
            return f"{view.repo_id}:{os.path.basename(self.rows.rows[i]['path'])}"
        return view.repo_id

    def neighbours(self, i: int, limit: int = NEIGHBOURS, shortlist: int = SHORTLIST) -> Neighbourhood:
        """Row ``i``'s nearest other rows (module docstring), with the verdict on the first."""
        from fisherhub.analysis.nearest import rank_nearest
        from fisherhub.analysis.verdict import score_selection

        target = self.signature(i)
        scores = row_scores(self.rows, target)
        scores[i] = np.nan
        order = [
            int(j) for j in np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable") if np.isfinite(scores[j])
        ]
        chosen = order[:shortlist]
        outcomes = bounded_map(self.signature, chosen, catch=(FisherHubError, OSError))
        readable = [o for o in outcomes if o.error is None]
        unreadable = [(self.row_name(o.item), str(o.error)) for o in outcomes if o.error is not None]
        if not readable:
            return Neighbourhood(i, [], {}, None, unreadable)
        names = {self.row_name(o.item): o.item for o in readable}
        signatures = {self.row_name(o.item): o.result() for o in readable}
        ranked = rank_nearest(target, signatures)
        verdict = score_selection([n.alignment for n in ranked], "fisher", [n.name for n in ranked]).verdict
        return Neighbourhood(i, ranked[:limit], names, verdict, unreadable)

    def figure(self, indices: Iterable[int]):
        """The heatmap of A ``index show --plot`` draws (``rows_figure``), among the rows ``indices``; None with
        fewer than two of one sketch id."""
        from fisherhub.hub.signature_index import rows_figure

        return rows_figure(self.rows, self.base_model, among=indices)

    # -- a target ---------------------------------------------------------------------------------------
    def rank_target(self, path: str | os.PathLike, shown_as: str) -> Selection:
        """``select_adapter(target, index=<this index as read, at its commit>)`` of the signature file at ``path``;
        ``InputError`` saying what is wrong, naming the file ``shown_as`` (never the local path), for a file that
        is not a signature, a signature of another base model, or an implausible one."""
        from fisherhub.core.signature import Signature
        from fisherhub.selection.candidates import same_base_model
        from fisherhub.selection.select import select_adapter

        try:
            target = Signature.load(path)
        except SignatureFileError as exc:
            reason = str(exc).replace(os.fspath(path), shown_as).removeprefix(f"{shown_as}: ")
            raise InputError(f"{shown_as} is not a fisherhub signature: {reason}") from exc
        named = target.metadata.get("base_model")
        if not same_base_model(named, self.base_model):
            raise InputError(
                f"{shown_as} is a signature of {named or 'an unnamed base model'!r}, not of {self.base_model!r}, the "
                f"base model of this index: sketch your data under {self.base_model} (fisherhub sketch --model "
                f"{self.base_model} ...) and upload that signature"
            )
        if (doubt := target.implausibility()) is not None:
            raise InputError(f"{shown_as} is implausible, its alignments cannot be trusted: {doubt}")
        try:
            return select_adapter(target, index=self.loaded, token=self.token)
        except InputError as exc:
            raise InputError(f"{shown_as} cannot be ranked against this index: {exc}") from exc
