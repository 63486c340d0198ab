"""Updating an index: one listing of commits says which adapters changed, appeared or went; only those are read
again (as the build reads them, ``build.read_repos``) and their rows replace the ones the index held
(``shards``: pushed as one more shard)."""

from __future__ import annotations

import os
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fisherhub.hub.discovery import COMMIT_FIELDS
from fisherhub.hub.pool import DEFAULT_WORKERS, bounded_map
from fisherhub.hub.refs import SignatureRef
from fisherhub.hub.signature_index.build import WorkFolder, default_work, listed_infos, read_repos, work_folder
from fisherhub.hub.signature_index.card import IndexSummary
from fisherhub.hub.signature_index.pushed import read_record
from fisherhub.hub.signature_index.schema import STATE_PATH, conform
from fisherhub.hub.signature_index.shards import Replacement
from fisherhub.hub.signature_index.store import LoadedIndex, index_commit, push_index, state_layout, summarize
from fisherhub.hub.snapshot import RepoSnapshot


def changed_repos(
    state: dict[str, Any], token: str | None = None
) -> tuple[dict[str, RepoSnapshot], set[str], set[str]]:
    """(the adapters listed now whose commit differs from the one the index (its ``state`` file) read, or new, or
    that the Hub could not serve then (``retry``): id -> a snapshot naming only the commit listed, ``described``
    when read; of those, the ones the Hub could not serve at the commit listed now (read again with a single
    attempt, ``read_repos``); the adapters the index read that the Hub no longer lists), from one listing of
    commits only (``COMMIT_FIELDS``: at 10,000 adapters, a hundredth of what the build's listing, with each card
    and file list, weighs)."""
    models = [entry for entry in state["repos"] if entry["repo_type"] == "model"]
    seen = {entry["repo_id"]: entry["commit"] for entry in models}
    unavailable = {entry["repo_id"] for entry in models if entry.get("retry")}
    listed = {info.id: info.sha for info in listed_infos(state["base_model"], token, seen.keys(), COMMIT_FIELDS)}
    changed = {
        r: RepoSnapshot(SignatureRef(r, "model", sha), {}, None)
        for r, sha in listed.items()
        if seen.get(r) != sha or r in unavailable
    }
    once = {r for r in changed if r in unavailable and seen[r] == changed[r].ref.revision}
    return changed, once, set(seen) - set(listed)


def replace_repos(loaded: LoadedIndex, folder: WorkFolder, replaced: set[tuple[str, str]]):
    """(the rows of ``loaded`` but those of the ``replaced`` (repo type, repo id), then the rows ``folder``
    journaled; the ``Replacement`` that says so, which ``push_index`` takes); ``folder`` takes the state entries
    of the repos kept, so its state file describes the result."""
    import pyarrow as pa

    for entry in loaded.state["repos"]:
        key = (entry["repo_type"], entry["repo_id"])
        if key not in replaced and key not in folder.done:
            folder.done[key] = {**entry, "chunk": None}
    keys = zip(loaded.table.column("repo_type").to_pylist(), loaded.table.column("repo_id").to_pylist())
    keep = pa.array([key not in replaced for key in keys], type=pa.bool_())
    kept = conform(loaded.table.filter(keep))
    stored = loaded.table.num_rows if loaded.stored_rows is None else loaded.stored_rows
    replacement = Replacement(loaded.commit, loaded.state, stored, frozenset(replaced), kept.num_rows)
    return pa.concat_tables([kept, folder.table()]), replacement


def still_unavailable(state: dict[str, Any], folder: WorkFolder, once: Collection[str]) -> set[str]:
    """The adapters of ``once`` read again into ``folder`` that gave nothing new of what the index (its ``state``
    file) holds of them: the Hub still unable to serve the same files (the same rows), or the repo itself (not
    even its file list)."""
    before = {entry["repo_id"]: entry for entry in state["repos"] if entry["repo_type"] == "model"}

    def outcome(entry: dict[str, Any]) -> tuple[int, list[str]]:
        return entry["rows"], [path for path, _ in entry["problems"]]

    return {
        r
        for r in once
        if folder.done[("model", r)].get("retry")
        and outcome(folder.done[("model", r)]) in (outcome(before[r]), (0, [""]))
    }


def update_index(
    name: str,
    *,
    work: str | os.PathLike | None = None,
    token: str | None = None,
    workers: int = DEFAULT_WORKERS,
    progress: bool = False,
    whole: bool = False,
) -> tuple[str | None, IndexSummary, int]:
    """Bring the index ``name`` up to date: one listing (the build's) says which adapters changed commit,
    appeared or went; only those are read again, as the build reads them (their signature files), and those the
    Hub could not serve at the same commit before, each with a single attempt (``read_repos``); of these, the
    ones still unavailable keep what the index holds of them. Pushes when anything changed (not when the only
    repos read are still unavailable: the index already names them, with their reason), only the rows read as
    one more shard while ``shards.Replacement.appends`` holds; returns (the new commit, None when nothing changed;
    the summary; repos read). ``whole``: push the whole index instead (every row once: what ``load_dataset``
    and the viewer show), also when nothing changed if updates left it in several shards. The index's shards
    download while the adapters are listed and read. ``work``: the index's work folder (the build's, default
    ``default_work``): the repos read are journaled in its ``update-<commit>`` folder. When this client pushed the index's commit from there (``pushed``), the rows it
    keeps are not checked again: only the rows read now are."""
    import numpy as np

    at = index_commit(name, token)
    state = at.state(at.fetch(STATE_PATH, token))
    layout, base_model = state_layout(state), state["base_model"]
    root = work_folder(work or default_work(at.ref))
    folder = WorkFolder(root / f"update-{at.commit[:12]}", base_model, layout)
    before = read_record(root, at.commit)
    with ThreadPoolExecutor(max_workers=1) as pool:  # the shards download while the adapters are listed and read
        loading = pool.submit(
            lambda: at.rows(bounded_map(lambda path: at.fetch(path, token), at.shards, catch=()), state)
        )
        changed, once, gone = changed_repos(state, token)
        read = 0
        if changed:
            read = read_repos(
                list(changed.values()),
                base_model,
                layout,
                folder,
                token=token,
                workers=workers,
                progress=progress,
                once={("model", repo_id) for repo_id in once},
            )
        for repo_id in still_unavailable(state, folder, once):  # the index keeps what it holds of them
            del folder.done[("model", repo_id)]
            del changed[repo_id]
        loaded = loading.result()
    if not changed and not gone and not (whole and "deltas" in state):
        everything = np.ones(loaded.table.num_rows, dtype=bool)
        return None, summarize(loaded.table, base_model, state["repos"], at.where, before, everything)[0], read
    table, replacement = replace_repos(loaded, folder, {("model", repo_id) for repo_id in (*changed, *gone)})
    commit, summary = push_index(
        table,
        at.ref,
        base_model,
        layout,
        folder.entries(),
        token=token,
        work=root,
        before=before,
        checked=np.arange(table.num_rows) < replacement.kept,
        replacement=None if whole else replacement,
    )
    return commit, summary, read
