"""An index update checks only the rows it adds when this client pushed the commit it updates (``pushed``), and
draws the card's heatmap again only when its rows change; the summary is the one a full check gives."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from test_hub import make_signature
from test_signature_index import BASE, INDEX, add_adapter, adapters  # noqa: F401  (the fixture)

import fisherhub.hub.signature_index.rows as rows_module
import fisherhub.hub.signature_index.store as store_module
from fisherhub.hub.refs import SIGNATURE_FOLDER, SignatureRef
from fisherhub.hub.signature_index import (
    FIGURE_PATH,
    Layout,
    build_index,
    load_index,
    read_rows,
    row_schema,
    signature_row,
    update_index,
)
from fisherhub.hub.signature_index.card import NEIGHBOUR_ROWS, PLOTTED_ROWS, IndexSummary
from fisherhub.hub.signature_index.pushed import read_record
from fisherhub.hub.signature_index.rows import largest_rows, summary_rows, table_keys


def index_table(count: int) -> pa.Table:
    """``count`` rows of signatures of different sizes (ties among them too), every fifth one damaged."""
    rows = []
    for i in range(count):
        ref = SignatureRef(f"org/a{i:02d}", "model", f"{i:040x}", f"{SIGNATURE_FOLDER}/s.safetensors")
        row = signature_row(make_signature(BASE, f"org/d{i}", n=40 + 7 * (i % 6), seed=i), ref, "published", Layout())
        rows.append({**row, "num_documents": 1} if i % 5 == 3 else row)
    return pa.Table.from_pylist(rows, schema=row_schema())


class CountedChecks:
    """Counts the rows ``read_rows`` checks."""

    def __init__(self, monkeypatch):
        self.count, check = 0, rows_module._check_row

        def counted(*args):
            self.count += 1
            return check(*args)

        monkeypatch.setattr(rows_module, "_check_row", counted)


@pytest.mark.parametrize("limit", [3, NEIGHBOUR_ROWS, PLOTTED_ROWS, 40])
def test_summary_rows_give_the_summary_of_a_full_check(limit):
    table = index_table(30)
    full = read_rows(table, BASE, "test")
    assert len(full.skipped) == 6 and len(full) == 24
    partial = summary_rows(table, BASE, "test", limit)
    assert list(partial.positions) == sorted(full.positions[largest_rows(full, limit)])  # the rows largest_rows picks
    assert [r.reason for r in partial.skipped] == [r.reason for r in full.skipped]
    if limit >= NEIGHBOUR_ROWS:  # the card's limit
        assert IndexSummary.of(table, BASE, [], partial) == IndexSummary.of(table, BASE, [], full)
    head = read_rows(table.slice(0, 20), BASE, "test")  # what a push of the first 20 rows recorded
    keys = table_keys(table)
    left_out = {keys[i]: row.reason for i, row in zip(head.skipped_positions, head.skipped)}
    trusted = summary_rows(table, BASE, "test", limit, np.arange(30) < 20, left_out)
    assert list(trusted.positions) == list(partial.positions)
    assert [r.reason for r in trusted.skipped] == [r.reason for r in full.skipped]


def test_checked_rows_are_not_checked_again(monkeypatch):
    table = index_table(30)
    checks = CountedChecks(monkeypatch)
    summary_rows(table, BASE, "test", 4, np.arange(30) < 20, {})
    assert checks.count == 10 + 4  # the 10 rows not checked before, then the 4 rows shown
    checks.count = 0
    summary_rows(table, BASE, "test", 4)
    assert checks.count == 30 + 4


def test_update_of_a_commit_this_client_pushed(adapters, hub, hf_api, tmp_path, monkeypatch):
    work = tmp_path / "work"
    build_index(BASE, INDEX, work=work)
    built = load_index(INDEX)
    record = read_record(work, built.commit)
    assert record is not None and record.left_out == {} and record.figure is not None and len(record.figure) == 6
    figures = []
    monkeypatch.setattr(store_module, "rows_figure", lambda *a: figures.append(a) or None)
    checks = CountedChecks(monkeypatch)
    hf_api.upload_file(path_or_fileobj=b"notes", path_in_repo="notes.txt", repo_id="org/unsigned")  # no new rows
    commit, summary, read = update_index(INDEX, work=work)
    assert read == 1 and commit is not None
    assert checks.count == 6 and figures == []  # only the 6 rows shown read again; the heatmap kept
    card = hub.files("tester/base-index", "dataset")["README.md"].decode()
    assert FIGURE_PATH in card and FIGURE_PATH in hub.files("tester/base-index", "dataset")
    updated = load_index(INDEX)
    assert summary == IndexSummary.of(updated.table, BASE, updated.state["repos"])
    new = add_adapter(hf_api, "lora-new", 11)  # a new row: checked, and the heatmap drawn again with it
    checks.count = 0
    commit, summary, read = update_index(INDEX, work=work)
    assert read == 1 and checks.count == 1 + 7 and len(figures) == 1
    assert new in [row["repo_id"] for row in load_index(INDEX).rows().rows]
    checks.count = 0
    push = add_adapter(hf_api, "lora-other", 12)
    update_index(INDEX, work=tmp_path / "elsewhere")  # no record of the commit there: every row checked
    assert checks.count == 8 + 8 and push in {row["repo_id"] for row in load_index(INDEX).rows().rows}
