"""The index on the Hub: pushed (``push_index``: the Parquet shards through ``datasets``, then card, state file
and heatmap in one commit) and loaded at one commit (``load_index``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np


from fisherhub.core.bounded import check_size, read_file
from fisherhub.core.errors import InputError
from fisherhub.safe_text import printable
from fisherhub.hub.errors import hub_errors
from fisherhub.hub.pool import bounded_map
from fisherhub.hub.refs import SignatureRef, index_ref
from fisherhub.hub.signature_index.layout import DEFAULT_DTYPE, DEFAULT_SKETCHES, Layout
from fisherhub.hub.signature_index.card import (
    FIGURE_PATH,
    NEIGHBOUR_ROWS,
    PLOTTED_ROWS,
    IndexSummary,
    render_card,
    rows_figure,
)
from fisherhub.hub.signature_index.pushed import PushRecord, write_record
from fisherhub.hub.signature_index.rows import (
    KEY_COLUMNS,
    IndexRows,
    largest_rows,
    read_rows,
    row_key,
    summary_rows,
    table_keys,
)
from fisherhub.hub.signature_index.shards import Replacement, counted_card, live_rows, repo_shards
from fisherhub.hub.signature_index.schema import (
    DATA_DIR,
    DELTA_NAME,
    MAX_STATE_BYTES,
    SPLIT,
    STATE_PATH,
    conform,
    parse_state,
    render_state,
    row_schema,
)

if TYPE_CHECKING:
    from huggingface_hub.hf_api import DatasetInfo


def push_index(
    table,
    repo: SignatureRef,
    base_model: str,
    layout: Layout,
    repos: list[dict[str, Any]],
    *,
    token: str | None = None,
    private: bool = False,
    work: Path | None = None,
    before: PushRecord | None = None,
    checked: np.ndarray | None = None,
    replacement: Replacement | None = None,
) -> tuple[str, IndexSummary]:
    """Push ``table`` as the index ``repo`` (``repos``: the state file's entries of the repos read, a work folder's
    ``entries()``); returns the commit and the index's summary (``summarize``). The rows go as Parquet shards
    through ``datasets`` (``push_to_hub``), then the card, state file and (with matplotlib installed) the card's
    heatmap in one commit; an update (``replacement``: the index it changes) whose ``appends`` holds sends instead
    only its own rows, as one more shard in that commit (``shards``). ``work``: the index's work folder, where the
    push is recorded (``pushed``); ``before``: the record of the commit the rows ``checked`` come from (an
    update's), so that those rows are not checked again and the heatmap is kept when its rows are the same."""
    from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download

    from fisherhub.hub.cards import card_text, parse_card
    from fisherhub.hub.retry import with_retries

    where = f"datasets/{repo.repo_id}"
    appended = replacement is not None and replacement.appends(table.num_rows - replacement.kept)
    with hub_errors(where):
        if not appended:
            push_rows(table, repo, where, token, private)
        card_file = hf_hub_download(repo.repo_id, "README.md", repo_type="dataset", token=token)
        existing = parse_card(card_text(card_file, where), where, "dataset").data.to_dict()
        summary, rows = summarize(table, base_model, repos, where, before, checked)
        operations, deltas, stored = [], None, None
        if replacement is not None and appended:
            shard = parquet_bytes(table.slice(replacement.kept))
            stored = replacement.stored_rows + table.num_rows - replacement.kept
            operations.append(CommitOperationAdd(replacement.path, shard))
            existing = counted_card(existing, stored, len(shard))
            repos, deltas = replacement.entries(repos), replacement.deltas()
        operations.append(
            CommitOperationAdd(STATE_PATH, render_state(base_model, layout, repos, sorted(summary.sketch_ids), deltas))
        )
        plotted, kept, png = heatmap(rows, base_model, before)
        if png is not None:
            operations.append(CommitOperationAdd(FIGURE_PATH, png))
        card = render_card(summary, layout, existing, repo.repo_id, kept or png is not None, stored)
        info = with_retries(  # sent again after a 429 or 5xx (committed twice, it holds the same files)
            lambda: HfApi(token=token).create_commit(
                repo.repo_id,
                repo_type="dataset",
                commit_message=f"signature index of {base_model}: {table.num_rows} rows",
                operations=[CommitOperationAdd("README.md", card.encode()), *operations],
            ),
            where,
        )
    if work is not None:
        keys = table_keys(table) if rows.skipped else []
        left_out = {keys[i]: row.reason for i, row in zip(rows.skipped_positions, rows.skipped)}
        write_record(work, PushRecord(info.oid, left_out, plotted if kept or png is not None else None))
    return info.oid, summary


def push_rows(table, repo: SignatureRef, where: str, token: str | None, private: bool) -> None:
    """Every row of ``table`` pushed as the index's Parquet shards through ``datasets``, which deletes the
    shards there before (the build's and the updates')."""
    import datasets

    from fisherhub.hub.retry import with_retries

    dataset = datasets.Dataset(conform(table))
    with_retries(  # ``datasets`` sends its repo_info once: pushed again after a 429 (the shards uploaded are kept)
        lambda: dataset.push_to_hub(
            repo.repo_id,
            split=SPLIT,
            data_dir=DATA_DIR,
            token=token,
            private=private,
            max_shard_size="100MB",
            commit_message="signature index: rows",
        ),
        where,
    )


def parquet_bytes(table) -> bytes:
    """``table`` (conformed to the row schema) as the bytes of one Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(conform(table), sink)
    return sink.getvalue().to_pybytes()


def heatmap(rows: IndexRows, base_model: str, before: PushRecord | None) -> tuple[tuple, bool, bytes | None]:
    """(the keys of the card heatmap's rows; whether the heatmap ``before`` records shows the same rows, so it is
    kept; else the PNG of the new one, None without matplotlib or with fewer than two rows)."""
    import io

    plotted = tuple(row_key(*(rows.rows[i][k] for k in KEY_COLUMNS)) for i in largest_rows(rows, PLOTTED_ROWS))
    if before is not None and len(plotted) >= 2 and before.figure == plotted:  # the same rows: the same figure
        return plotted, True, None
    try:
        figure = rows_figure(rows, base_model)
    except InputError:  # matplotlib is not installed: the card goes without its figure
        return plotted, False, None
    if figure is None:
        return plotted, False, None
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=120)
    return plotted, False, png.getvalue()


def summarize(
    table,
    base_model: str,
    repos: list[dict[str, Any]],
    where: str,
    before: PushRecord | None = None,
    checked: np.ndarray | None = None,
) -> tuple[IndexSummary, IndexRows]:
    """The summary of an index of rows ``table`` and the rows its card shows (``rows.summary_rows``: every row
    checked but the rows ``checked`` at the push ``before`` records)."""
    rows = summary_rows(
        table,
        base_model,
        where,
        max(PLOTTED_ROWS, NEIGHBOUR_ROWS),
        checked if before is not None else None,
        before.left_out if before is not None else None,
    )
    return IndexSummary.of(table, base_model, repos, rows), rows


@dataclasses.dataclass(frozen=True)
class LoadedIndex:
    """An index read at one commit: its state file, the Arrow table of its rows, the commit; ``rows()`` its checked
    rows (read once: ranking several targets from one loaded index reads them once)."""

    ref: SignatureRef
    commit: str
    state: dict[str, Any]
    table: Any
    #: the rows its shards store, its own and those an update replaced (None: the table's)
    stored_rows: int | None = None
    _rows: dict[str | None, IndexRows] = dataclasses.field(default_factory=dict, init=False, compare=False, repr=False)

    @property
    def base_model(self) -> str:
        return self.state["base_model"]

    def rows(self, base_model: str | None = None) -> IndexRows:
        """The checked rows for ``base_model`` (default: the index's own), ``read_rows`` of the table, read once."""
        base_model = base_model or self.base_model
        if base_model not in self._rows:
            self._rows[base_model] = read_rows(self.table, base_model, f"datasets/{self.ref.repo_id}", self.commit)
        return self._rows[base_model]

    @property
    def layout(self) -> Layout:
        return state_layout(self.state)


def state_layout(state: dict[str, Any]) -> Layout:
    """The layout a state file records (an index built before it was recorded: the default)."""
    layout = state.get("layout") or {}
    return Layout(layout.get("dtype", DEFAULT_DTYPE), tuple(layout.get("sketches", DEFAULT_SKETCHES)))


@dataclasses.dataclass(frozen=True)
class IndexCommit:
    """An index's files at one commit: the state file's and the Parquet shards' paths (not downloaded yet)."""

    ref: SignatureRef
    commit: str
    shards: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"datasets/{self.ref.repo_id}"

    def fetch(self, path: str, token: str | None = None) -> str:
        """The local copy of the file ``path`` at this commit, through the cache."""
        from huggingface_hub import hf_hub_download

        with hub_errors(self.where, path):
            return hf_hub_download(self.ref.repo_id, path, repo_type="dataset", revision=self.commit, token=token)

    def state(self, fetched: str) -> dict[str, Any]:
        """The state file ``fetched`` (its local copy), parsed (``parse_state``)."""
        return parse_state(read_file(fetched, f"{self.where}: {STATE_PATH}", max_bytes=MAX_STATE_BYTES), self.where)

    def rows(self, fetched: list, state: dict[str, Any]) -> LoadedIndex:
        """The index loaded from its ``state`` and its shards ``fetched`` (``bounded_map`` outcomes of ``fetch``)."""
        table, stored = index_rows(fetched, state, f"{self.where}@{self.commit[:12]}")
        return LoadedIndex(self.ref, self.commit, state, table, stored)


def index_commit(name: str | SignatureRef, token: str | None = None) -> IndexCommit:
    """The files of the index ``name`` (``datasets/org/name[@rev]``) at the commit its revision is now (one
    ``repo_info``); ``InputError`` for a repo without a state file, or one larger than ``MAX_STATE_BYTES``."""
    from huggingface_hub import HfApi

    from fisherhub.hub.retry import with_retries

    ref = name if isinstance(name, SignatureRef) else index_ref(name)
    where = f"datasets/{ref.repo_id}"
    with hub_errors(where):
        info = cast(
            "DatasetInfo",
            with_retries(
                lambda: HfApi(token=token).repo_info(
                    ref.repo_id, repo_type="dataset", revision=ref.revision, files_metadata=True
                ),
                where,
            ),
        )
    if info.sha is None:
        raise InputError(f"{where}: the Hub names no commit of it")
    files = sorted(s.rfilename for s in info.siblings or [])
    sizes = {s.rfilename: s.size for s in info.siblings or []}
    if STATE_PATH not in files:
        raise InputError(
            f"{where}: not a fisherhub signature index (no {STATE_PATH}); build one with `fisherhub index build`"
        )
    check_size(sizes[STATE_PATH], f"{where}: {STATE_PATH}", max_bytes=MAX_STATE_BYTES)  # before any download
    shards = tuple(f for f in files if f.startswith(f"{DATA_DIR}/") and f.endswith(".parquet"))
    return IndexCommit(ref, info.sha, shards)


def load_index(name: str | SignatureRef, token: str | None = None) -> LoadedIndex:
    """The index ``name`` (``datasets/org/name[@rev]``) pinned to the commit its revision is now: one
    ``repo_info``, then the state file and the shards at that commit through the cache (a warm cache makes
    no more requests), each shard's rows those the state file says it holds (``shards.live_rows``).
    ``InputError`` for a repo that is not an index of this format, a truncated shard, or a missing one."""
    at = index_commit(name, token)
    outcomes = bounded_map(lambda path: at.fetch(path, token), [STATE_PATH, *at.shards], catch=())
    return at.rows(outcomes[1:], at.state(outcomes[0].result()))


def index_rows(shards: list, state: dict[str, Any], where: str):
    """(the index's rows in the downloaded ``shards`` (``bounded_map`` outcomes: shard path, local file): the
    build's shards, then the updates' oldest first, each shard's rows those ``state`` says it holds; the rows
    stored); ``InputError`` for a shard that is not Parquet, or one the state file names that is missing. An
    update's shard the state file does not list is not the index's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    deltas = state.get("deltas", [])
    missing = sorted(set(deltas) - {outcome.item for outcome in shards})
    if missing:
        raise InputError(
            f"{where}: {STATE_PATH} names the shard {printable(missing[0])}, which the repo does not hold; the "
            "index is damaged: rebuild it with `fisherhub index build`"
        )
    read = sorted(
        (o for o in shards if o.item in deltas or not DELTA_NAME.fullmatch(o.item)),
        key=lambda o: (o.item in deltas, deltas.index(o.item) if o.item in deltas else 0, o.item),
    )
    owners, tables, stored = repo_shards(state), [], 0
    for outcome in read:
        try:
            shard = conform(pq.read_table(outcome.result()))
        except (pa.ArrowException, OSError) as exc:
            raise InputError(
                f"{where}: the shard {outcome.item} is not readable Parquet ({exc}); "
                "the index is damaged: rebuild it with `fisherhub index build`"
            ) from exc
        stored += shard.num_rows
        tables.append(live_rows(shard, outcome.item, state, owners))
    return (pa.concat_tables(tables) if tables else row_schema().empty_table()), stored
