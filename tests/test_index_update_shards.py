"""An index update pushes only what it read (hub/signature_index/shards.py): one more shard beside the build's, in
one commit with the card and state file; the index it loads is the one a new build gives, ``load_dataset`` still
reads the repo, and once the rows left behind pass their share the whole index is pushed again."""

from __future__ import annotations

import json

import datasets
import pytest
from test_hub import make_signature, set_files
from test_signature_index import BASE, INDEX, add_adapter, rows_by_repo

from fisherhub.cli import main
from fisherhub.core.errors import InputError
from fisherhub.hub import push_signature
from fisherhub.hub.signature_index import STATE_PATH, build_index, load_index, shards, update_index
from fisherhub.hub.signature_index.schema import DELTA_PREFIX

REPO = INDEX.removeprefix("datasets/")


@pytest.fixture
def adapters(hub, hf_api, hf_hub_cache):
    return [add_adapter(hf_api, f"lora-{i}", i) for i in range(6)]


def data_files(hub) -> dict[str, bytes]:
    return {path: data for path, data in hub.files(REPO, "dataset").items() if path.startswith("data/")}


def rows_of(table) -> list[tuple]:
    return sorted((r["repo_id"], r["commit"], r["path"], r["joint"], r["sketch_id"]) for r in table.to_pylist())


def rebuilt(tmp_path, name: str) -> list[tuple]:
    """The rows a new build of every adapter listed now gives."""
    build_index(BASE, f"datasets/tester/{name}", work=tmp_path / name)
    return rows_of(load_index(f"datasets/tester/{name}").table)


def test_an_update_appends_its_rows_and_reads_as_a_new_build(adapters, hub, hf_api, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shards, "STALE_SHARE", 0.5)  # 6 adapters: one replaced leaves 1 of 8 rows behind
    build_index(BASE, INDEX, work=tmp_path / "work")
    built, before = data_files(hub), load_index(INDEX).commit
    push_signature(make_signature(BASE, "org/data-new", seed=42), adapters[0])  # a new commit of lora-0
    new = add_adapter(hf_api, "lora-new", 7)
    hub.repos.pop(("model", adapters[1]))  # a repo deleted since
    commits = len(hf_api.list_repo_commits(REPO, repo_type="dataset"))
    commit, summary, read = update_index(INDEX, work=tmp_path / "work")
    after = data_files(hub)
    assert read == 2 and summary.rows == 7  # lora-0 has two signatures now
    assert len(hf_api.list_repo_commits(REPO, repo_type="dataset")) == commits + 1  # rows, card and state together
    assert {p: after[p] for p in built} == built  # the build's shards as they were
    assert set(after) - set(built) == {f"{DELTA_PREFIX}{before[:12]}.parquet"}
    loaded = load_index(INDEX)
    assert loaded.commit == commit and loaded.stored_rows == 9 and loaded.table.num_rows == 7  # 2 rows behind
    assert rows_of(loaded.table) == rebuilt(tmp_path, "rebuilt")
    assert set(rows_by_repo(loaded.table)) == {new, *adapters} - {adapters[1]}
    viewed = datasets.load_dataset(REPO, split="train", download_mode="force_redownload")
    assert viewed.num_rows == 9  # every stored row, counted as the card says
    note = "The data files hold 9 rows: 2 of them replaced by an update"
    assert note in hub.files(REPO, "dataset")["README.md"].decode()
    capsys.readouterr()
    assert main(["index", "show", REPO]) == 0 and note in capsys.readouterr().out

    monkeypatch.setattr(shards, "STALE_SHARE", 0.1)  # one more replaced: 3 of 11 rows behind, over the share
    push_signature(make_signature(BASE, "org/data-newer", seed=43), adapters[2])
    update_index(INDEX, work=tmp_path / "work")
    after = data_files(hub)
    assert after.keys() == built.keys() and after != built  # the whole index pushed again, no update shard left
    loaded = load_index(INDEX)
    assert loaded.stored_rows == loaded.table.num_rows == 8 and "deltas" not in loaded.state
    assert rows_of(loaded.table) == rebuilt(tmp_path, "rebuilt-again")
    assert datasets.load_dataset(REPO, split="train", download_mode="force_redownload").num_rows == 8
    assert "replaced by an update" not in hub.files(REPO, "dataset")["README.md"].decode()


def test_the_update_shards_a_state_file_names_are_checked(adapters, hub, tmp_path, monkeypatch):
    monkeypatch.setattr(shards, "STALE_SHARE", 0.5)
    build_index(BASE, INDEX, work=tmp_path / "work")
    built_state = hub.files(REPO, "dataset")[STATE_PATH]
    push_signature(make_signature(BASE, "org/data-new", seed=42), adapters[0])
    update_index(INDEX, work=tmp_path / "work")
    files = hub.files(REPO, "dataset")
    state = json.loads(files[STATE_PATH])
    (delta,) = state["deltas"]
    rows = rows_of(load_index(INDEX).table)

    def with_state(**changes) -> None:
        set_files(hub, REPO, "dataset", {STATE_PATH: json.dumps({**state, **changes}).encode()})

    assert state["format"] == 2 and json.loads(built_state)["format"] == 1  # read only by a fisherhub that knows
    with_state(format=1)
    with pytest.raises(InputError, match="if and only if its format is 2"):
        load_index(INDEX)
    with_state(deltas=["../../etc/passwd"])
    with pytest.raises(InputError, match="update shards that are not"):
        load_index(INDEX)
    with_state(repos=[{**entry, "shard": f"{DELTA_PREFIX}{'0' * 12}.parquet"} for entry in state["repos"]])
    with pytest.raises(InputError, match="names a repo's shard"):
        load_index(INDEX)
    missing = f"{DELTA_PREFIX}{'1' * 12}.parquet"
    with_state(deltas=[delta, missing])
    with pytest.raises(InputError, match="does not hold"):
        load_index(INDEX)
    with_state()
    set_files(hub, REPO, "dataset", {missing: files[delta]})  # an update's shard the state file does not list
    assert rows_of(load_index(INDEX).table) == rows


def test_whole_pushes_every_row_once(adapters, hub, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shards, "STALE_SHARE", 0.5)
    build_index(BASE, INDEX, work=tmp_path / "work")
    push_signature(make_signature(BASE, "org/data-new", seed=42), adapters[0])
    update_index(INDEX, work=tmp_path / "work")
    rows = rows_of(load_index(INDEX).table)
    assert "deltas" in load_index(INDEX).state
    assert main(["index", "update", REPO, "--whole", "--work", str(tmp_path / "work")]) == 0  # nothing changed
    assert "pushed" in capsys.readouterr().out
    loaded = load_index(INDEX)
    assert "deltas" not in loaded.state and loaded.stored_rows == loaded.table.num_rows == 7
    assert rows_of(loaded.table) == rows and not [p for p in data_files(hub) if p.startswith(DELTA_PREFIX)]
    assert datasets.load_dataset(REPO, split="train", download_mode="force_redownload").num_rows == 7
    assert update_index(INDEX, work=tmp_path / "work", whole=True)[0] is None  # one set of shards: nothing to do


def test_an_update_appends_only_below_the_share_under_a_new_name():
    commit = "ab" * 20
    state = {"repos": [], "deltas": []}
    assert shards.Replacement(commit, state, 100, frozenset(), 95).appends(5)  # 5 of 105 behind
    assert not shards.Replacement(commit, state, 100, frozenset(), 85).appends(5)  # 15 of 105: over a tenth
    assert not shards.Replacement("not-hex-" * 5, state, 100, frozenset(), 95).appends(5)
    taken = {"repos": [], "deltas": [shards.delta_path(commit)]}  # an update of this commit already appended
    assert not shards.Replacement(commit, taken, 100, frozenset(), 95).appends(5)
    many = {"repos": [], "deltas": [shards.delta_path(f"{i:012x}") for i in range(shards.MAX_DELTAS)]}
    assert not shards.Replacement(commit, many, 100, frozenset(), 95).appends(5)
