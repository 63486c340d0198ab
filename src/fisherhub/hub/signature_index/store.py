"""The index on the Hub: pushed (``push_index``: the Parquet shards through ``datasets``, then card, state file
and heatmap in one commit) and loaded at one commit (``load_index``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np


from fisherhub.core.bounded import check_size, read_file
from fisherhub.core.errors import InputError
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
from fisherhub.hub.signature_index.schema import (
    DATA_DIR,
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
) -> tuple[str, IndexSummary]:
    """Push ``table`` as the index ``repo`` (``repos``: the state file's entries of the repos read, a work folder's
    ``entries()``): the Parquet shards through ``datasets`` (``push_to_hub``), then the
    card, state file and (with matplotlib installed) the card's heatmap in one commit; returns that commit and
    the index's summary (``summarize``). ``work``: the index's work folder, where the push is recorded
    (``pushed``); ``before``: the record of the commit the rows ``checked`` come from (an update's), so that
    those rows are not checked again and the heatmap is kept when its rows are the same."""

    import datasets
    from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download

    from fisherhub.hub.cards import card_text, parse_card
    from fisherhub.hub.retry import with_retries

    api = HfApi(token=token)
    where = f"datasets/{repo.repo_id}"
    with hub_errors(where):
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
        card_file = hf_hub_download(repo.repo_id, "README.md", repo_type="dataset", token=token)
        existing = parse_card(card_text(card_file, where), where, "dataset").data.to_dict()
        summary, rows = summarize(table, base_model, repos, where, before, checked)
        state = render_state(base_model, layout, repos, sorted(summary.sketch_ids))
        plotted, kept, png = heatmap(rows, base_model, before)
        operations = [CommitOperationAdd(STATE_PATH, state)]
        if png is not None:
            operations.append(CommitOperationAdd(FIGURE_PATH, png))
        card = render_card(summary, layout, existing, repo.repo_id, kept or png is not None)
        info = api.create_commit(
            repo.repo_id,
            repo_type="dataset",
            commit_message=f"signature index of {base_model}: {table.num_rows} rows",
            operations=[CommitOperationAdd("README.md", card.encode()), *operations],
        )
    if work is not None:
        keys = table_keys(table) if rows.skipped else []
        left_out = {keys[i]: row.reason for i, row in zip(rows.skipped_positions, rows.skipped)}
        write_record(work, PushRecord(info.oid, left_out, plotted if kept or png is not None else None))
    return info.oid, summary


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
        layout = self.state.get("layout") or {}
        return Layout(layout.get("dtype", DEFAULT_DTYPE), tuple(layout.get("sketches", DEFAULT_SKETCHES)))


def load_index(name: str | SignatureRef, token: str | None = None, columns: list[str] | None = None) -> LoadedIndex:
    """The index ``name`` (``datasets/org/name[@rev]``) pinned to the commit its revision is now: one
    ``repo_info``, then the state file and the shards at that commit through the cache (a warm cache makes
    no more requests). ``InputError`` for a repo that is not an index of this format, or a truncated shard."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from huggingface_hub import HfApi, hf_hub_download

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
    commit = info.sha
    files = sorted(s.rfilename for s in info.siblings or [])
    sizes = {s.rfilename: s.size for s in info.siblings or []}
    if STATE_PATH not in files:
        raise InputError(
            f"{where}: not a fisherhub signature index (no {STATE_PATH}); build one with `fisherhub index build`"
        )
    shards = [f for f in files if f.startswith(f"{DATA_DIR}/") and f.endswith(".parquet")]
    check_size(sizes[STATE_PATH], f"{where}: {STATE_PATH}", max_bytes=MAX_STATE_BYTES)  # before any download

    def fetch(path: str) -> str:
        with hub_errors(where, path):
            return hf_hub_download(ref.repo_id, path, repo_type="dataset", revision=commit, token=token)

    outcomes = bounded_map(fetch, [STATE_PATH, *shards], catch=())
    state = parse_state(read_file(outcomes[0].result(), f"{where}: {STATE_PATH}", max_bytes=MAX_STATE_BYTES), where)
    tables = []
    for outcome in outcomes[1:]:
        try:
            tables.append(pq.read_table(outcome.result(), columns=columns))
        except (pa.ArrowException, OSError) as exc:
            raise InputError(
                f"{where}@{commit[:12]}: the shard {outcome.item} is not readable Parquet ({exc}); "
                "the index is damaged: rebuild it with `fisherhub index build`"
            ) from exc
    table = pa.concat_tables(tables) if tables else row_schema().empty_table()
    return LoadedIndex(ref, commit, state, table)
