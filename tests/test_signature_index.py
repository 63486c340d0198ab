"""The signature index (hub/signature_index/): built from the adapters on the local Hub server, pushed as
Parquet through ``datasets``, loaded with ``load_dataset``, resumed after an interruption, updated by
commit, and ranked (selection/index_ranking.py) to exactly what ranking the shortlisted candidates gives."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest
from huggingface_hub import HfApi
from test_hub import make_signature, set_files

from fisherhub.cli import main
from fisherhub.core.errors import InputError
from fisherhub.hub import push_signature
from fisherhub.hub.pool import bounded_map
from fisherhub.hub.refs import SIGNATURE_FOLDER, SignatureRef
from fisherhub.hub.signature_index import (
    FIGURE_PATH,
    STATE_PATH,
    InterruptedBuild,
    Layout,
    build_index,
    load_index,
    read_rows,
    signature_row,
    update_index,
)
from fisherhub.selection import select_adapter
from fisherhub.selection.index_ranking import rank_index
from fisherhub.selection.target import Target
from fisherhub.testing.hub_repos import create_adapter

BASE = "org/base"
INDEX = "datasets/tester/base-index"


def add_adapter(api: HfApi, name: str, seed: int, signed: bool = True) -> str:
    repo_id = create_adapter(api, f"org/{name}", BASE)
    if signed:
        push_signature(make_signature(BASE, f"org/data-{seed}", seed=seed), repo_id)
    return repo_id


@pytest.fixture
def adapters(hub, hf_api, hf_hub_cache):
    signed = [add_adapter(hf_api, f"lora-{i}", i) for i in range(6)]
    add_adapter(hf_api, "unsigned", 99, signed=False)
    return signed


def signature_files(hub) -> list[str]:
    return [
        path
        for method, path, _ in hub.requests
        if method == "GET" and f"/{SIGNATURE_FOLDER}/" in path and path.endswith(".safetensors")
    ]


def rows_by_repo(table) -> dict[str, tuple]:
    rows = table.to_pylist()
    return {row["repo_id"]: (row["commit"], row["path"], row["joint"], row["sketch_id"]) for row in rows}


def test_build_push_load_dataset_and_rank(adapters, hub, tmp_path):
    commit, summary = build_index(BASE, INDEX, work=tmp_path / "work")
    assert summary.rows == 6 and summary.repos == 7 and summary.by_obtained == {"published": 6}
    assert len(summary.neighbours) == 6 and all(repo != nearest for repo, _, _, nearest, _ in summary.neighbours)
    files = hub.files("tester/base-index", "dataset")
    card = files["README.md"].decode()
    assert "| adapter | dataset | tokens | nearest | A |" in card and "6 signatures from 7 repos" in card
    assert STATE_PATH in files and any(p.startswith("data/") and p.endswith(".parquet") for p in files)
    assert all(hub.commit_count(repo) == 3 for repo in adapters)  # nothing written to the repos read
    # the card's heatmap, committed with the card, linked relatively, a PNG of the 6 rows' alignments
    assert f"![A among the signatures with the most tokens]({FIGURE_PATH})" in card
    commits = hub.repo("tester/base-index", "dataset").commits
    before = commits[commits[commit].parent].files  # the rows' commit: neither the card nor the figure yet
    assert FIGURE_PATH in commits[commit].files and FIGURE_PATH not in before and before["README.md"] != card.encode()
    from PIL import Image

    with Image.open(io.BytesIO(files[FIGURE_PATH])) as image:
        assert image.format == "PNG" and min(image.size) > 100

    import datasets

    loaded = datasets.load_dataset("tester/base-index", split="train")
    assert len(loaded) == 6 and sorted(loaded["repo_id"]) == sorted(adapters)
    assert set(loaded["obtained"]) == {"published"} and all(len(c) == 40 for c in loaded["commit"])

    target = make_signature(BASE, "org/target", seed=30)
    hub.requests.clear()
    selection = select_adapter(target, index="tester/base-index", shortlist=3)
    index_requests = [p for _, p, _ in hub.requests if "base-index" in p]
    assert all(f"/{commit}/" in p or p.endswith("base-index") for p in index_requests)  # pinned to the index commit
    shortlisted = rank_index(load_index(INDEX), Target([target]), BASE).candidates(3)
    assert sorted(shortlisted) == sorted(row.candidate for row in selection.ranking)
    direct = select_adapter(target, shortlisted)  # the same candidates, in the same order, ranked directly
    assert selection.table() == direct.table()
    everything = select_adapter(target, adapters)
    assert [r.candidate.split("@")[0] for r in selection.ranking] == [r.candidate for r in everything.ranking[:3]]


def test_interrupted_build_resumes_to_the_same_index(adapters, hub, tmp_path):
    with pytest.raises(InterruptedBuild):
        build_index(BASE, INDEX, work=tmp_path / "work", stop_after=3, workers=2)
    journal = (tmp_path / "work" / "journal.jsonl").read_text().splitlines()
    assert len(journal) == 3
    (tmp_path / "work" / "journal.jsonl").write_text("\n".join(journal) + '\n{"repo_id": "org/lo')  # a torn last line
    hub.requests.clear()
    commit, summary = build_index(BASE, INDEX, work=tmp_path / "work")
    assert len(signature_files(hub)) == 6 - sum(json.loads(line)["rows"] for line in journal)
    resumed = load_index(INDEX)
    build_index(BASE, "datasets/tester/fresh-index", work=tmp_path / "fresh")
    assert rows_by_repo(resumed.table) == rows_by_repo(load_index("datasets/tester/fresh-index").table)
    assert resumed.commit == commit and summary.rows == 6


KILLED_BUILD = """
import sys
from fisherhub.hub.signature_index import build_index
build_index("org/base", "datasets/tester/base-index", work=sys.argv[1], workers=1)
"""


def test_build_killed_midway_resumes(hub, hf_api, hf_hub_cache, tmp_path):
    adapters = [add_adapter(hf_api, f"lora-{i}", i) for i in range(12)]
    hub.latency = 0.05
    work = tmp_path / "work"
    process = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(work)], env=os.environ.copy())
    journal = work / "journal.jsonl"
    deadline = time.monotonic() + 120
    while (
        not (journal.is_file() and journal.read_text().strip())
        and process.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    process.kill()
    process.wait()
    read_before = len(journal.read_text().splitlines())
    assert 0 < read_before < 12 and ("dataset", "tester/base-index") not in hub.repos  # killed before pushing
    hub.latency, hub.requests[:] = 0.0, []
    build_index(BASE, INDEX, work=work)
    assert len(signature_files(hub)) == 12 - read_before  # the repos journaled before the kill are not read again
    assert sorted(rows_by_repo(load_index(INDEX).table)) == sorted(adapters)


def test_update_reads_only_changed_repos(adapters, hub, hf_api, tmp_path):
    build_index(BASE, INDEX, work=tmp_path / "work")
    push_signature(make_signature(BASE, "org/data-new", seed=42), adapters[0])  # a new commit of lora-0
    new = add_adapter(hf_api, "lora-new", 7)
    hub.repos.pop(("model", adapters[1]))  # a repo deleted since
    hub.requests.clear()
    commit, summary, read = update_index(INDEX, work=tmp_path / "update")
    listings = [p for _, p, _ in hub.requests if p == "/api/models"]
    assert len(listings) == 1 and read == 2
    assert len(signature_files(hub)) == 2  # lora-0's new file, lora-new's (lora-0's first: same blob, cached)
    rows = rows_by_repo(load_index(INDEX).table)
    assert set(rows) == {new, *adapters} - {adapters[1]}
    assert rows[adapters[0]][0] == hf_api.model_info(adapters[0]).sha
    assert commit == load_index(INDEX).commit and summary.rows == 7
    hub.requests.clear()
    assert update_index(INDEX, work=tmp_path / "update2")[0] is None  # nothing changed: nothing pushed
    assert not [m for m, p, _ in hub.requests if m == "POST"]


def _table(rows):
    return pa.Table.from_pylist(rows, schema=signature_index_schema())


def signature_index_schema():
    from fisherhub.hub.signature_index import row_schema

    return row_schema()


def test_bad_rows_are_skipped_with_their_reason():
    good = make_signature(BASE, "org/a", seed=1)
    ref = SignatureRef("org/a", "model", "a" * 40, f"{SIGNATURE_FOLDER}/a.safetensors")
    row = signature_row(good, ref, "published", Layout())
    other_base = signature_row(make_signature("org/other", "org/b", seed=2), ref, "published", Layout())
    truncated = {**row, "joint": row["joint"][:-2]}
    wrong_id = {**row, "sketch_id": "0" * 16}
    bad_counts = {**row, "num_documents": 1}
    bad_norms = {**row, "split_norms": [1.0, -1.0, 1.0]}
    not_unit = {**row, "joint": (np.frombuffer(row["joint"], "<f2") * 3).astype("<f2").tobytes()}
    escaping = {**row, "path": "../secret.safetensors"}
    forged = {**row, "split_norms": [n / 1e6 for n in row["split_norms"]]}  # R̂ far above what any sketch allows
    older = {**row, "format": 0}
    rows = read_rows(
        _table([row, other_base, truncated, wrong_id, bad_counts, bad_norms, not_unit, escaping, older, forged]),
        BASE,
        "test",
    )
    assert len(rows) == 1
    reasons = [s.reason for s in rows.skipped]
    for expected in (
        "other base model",
        "bytes, expected",
        "does not match its spec",
        "num_documents = 1",
        "split_norms",
        "not a unit vector",
        "does not name a repo",
        "row format 0",
        "implausible split norms",
    ):
        assert sum(expected in reason for reason in reasons) == 1, (expected, reasons)
    with pytest.raises(InputError, match="columns"):
        read_rows(pa.table({"repo_id": ["x"]}), BASE, "test")


def test_no_adapters_no_index_and_a_repo_that_is_not_one(hub, hf_api, hf_hub_cache, tmp_path):
    with pytest.raises(InputError, match="lists no adapters"):
        build_index("org/nobody", INDEX, work=tmp_path / "work")
    hf_api.create_repo("tester/plain", repo_type="dataset")
    with pytest.raises(InputError, match="not a fisherhub signature index"):
        load_index("tester/plain")


def test_damaged_or_older_index_is_a_clear_error(adapters, hub, tmp_path, capsys):
    build_index(BASE, INDEX, work=tmp_path / "work")
    files = hub.files("tester/base-index", "dataset")
    shard = next(p for p in files if p.endswith(".parquet"))
    set_files(hub, "tester/base-index", "dataset", {shard: files[shard][: len(files[shard]) // 2]})
    with pytest.raises(InputError, match="not readable Parquet"):
        load_index(INDEX)
    state = json.loads(files[STATE_PATH])
    set_files(
        hub,
        "tester/base-index",
        "dataset",
        {shard: files[shard], STATE_PATH: json.dumps({**state, "format": 0}).encode()},
    )
    with pytest.raises(InputError, match="index format 0"):
        load_index(INDEX)
    assert main(["select", str(tmp_path / "t.safetensors"), "--index", "tester/base-index"]) == 1
    assert "error:" in capsys.readouterr().err


def test_cli_build_select_show(adapters, hub, tmp_path, capsys):
    target = tmp_path / "target.safetensors"
    make_signature(BASE, "org/target", seed=4).save(target)
    assert main(["index", "build", BASE, "--push", INDEX, "--work", str(tmp_path / "work"), "--workers", "3"]) == 0
    out = capsys.readouterr().out
    assert "6 signatures from 7 repos" in out
    assert hub.files("tester/base-index", "dataset")[FIGURE_PATH].startswith(b"\x89PNG\r\n\x1a\n")
    assert main(["select", str(target), "--index", "tester/base-index", "--shortlist", "2"]) == 0
    out = capsys.readouterr().out
    assert f"best: {select_adapter(str(target), adapters).best.candidate}@" in out
    assert main(["index", "show", "tester/base-index", "--plot", str(tmp_path / "rows.png")]) == 0
    assert "6 signatures from 7 repos" in capsys.readouterr().out and (tmp_path / "rows.png").stat().st_size > 0


def test_row_alignments_equal_the_alignment_matrix():
    from fisherhub import alignment_matrix
    from fisherhub.hub.signature_index import row_alignments

    signatures = [make_signature(BASE, f"org/d{i}", seed=i) for i in range(4)]
    ref = SignatureRef("org/a", "model", "a" * 40, f"{SIGNATURE_FOLDER}/a.safetensors")
    rows = read_rows(_table([signature_row(s, ref, "published", Layout("float32")) for s in signatures]), BASE, "test")
    exact = alignment_matrix(signatures).fisher.numpy()
    assert np.allclose(row_alignments(rows, [0, 1, 2, 3]), exact, atol=1e-5)


def test_bounded_map_keeps_order_and_errors():
    def work(x):
        if x == 3:
            raise KeyError(x)
        return x * x

    outcomes = bounded_map(work, range(6), workers=4, catch=(KeyError,))
    assert [o.value for o in outcomes] == [0, 1, 4, None, 16, 25]
    assert isinstance(outcomes[3].error, KeyError)
    with pytest.raises(KeyError):
        bounded_map(work, range(6), workers=4, catch=(ValueError,))
    with pytest.raises(InputError):
        bounded_map(work, range(2), workers=0)


def test_named_candidates_are_read_concurrently_in_a_bounded_pool(adapters, hub):
    target = make_signature(BASE, "org/target", seed=30)
    hub.latency = 0.02
    sequential = select_adapter(target, adapters, workers=1)
    assert hub.most_in_flight == 1
    hub.most_in_flight = 0
    pooled = select_adapter(target, adapters, workers=4)
    assert 2 <= hub.most_in_flight <= 4 and pooled.table() == sequential.table()


def test_without_matplotlib_the_card_goes_without_its_figure(adapters, hub, tmp_path, monkeypatch):
    import fisherhub.extras

    def missing(module):
        raise InputError(f"figures need the optional package `{module}`")

    monkeypatch.setattr(fisherhub.extras, "require", missing)
    build_index(BASE, INDEX, work=tmp_path / "work")
    files = hub.files("tester/base-index", "dataset")
    assert FIGURE_PATH not in files and FIGURE_PATH not in files["README.md"].decode()
    assert "6 signatures from 7 repos" in files["README.md"].decode()


def test_a_private_adapter_stays_out_of_a_public_index(adapters, hub, hf_api, tmp_path, caplog):
    hidden = add_adapter(hf_api, "lora-private", 11)
    hub.repos[("model", hidden)].private = True  # one the token may read: listed, but not for a public index
    with caplog.at_level("WARNING", logger="fisherhub.hub.signature_index.build"):
        build_index(BASE, INDEX, work=tmp_path / "work")
    assert hidden not in rows_by_repo(load_index(INDEX).table) and set(rows_by_repo(load_index(INDEX).table))
    assert "left out 1 private adapter(s)" in caplog.text
    assert hidden not in {entry["repo_id"] for entry in load_index(INDEX).state["repos"]}
    push_signature(make_signature(BASE, "org/data-private-2", seed=12), hidden)  # a new commit: update skips it too
    update_index(INDEX, work=tmp_path / "update")
    assert hidden not in rows_by_repo(load_index(INDEX).table)
    build_index(BASE, "datasets/tester/private-index", work=tmp_path / "own", private=True)
    assert hidden in rows_by_repo(load_index("datasets/tester/private-index").table)
