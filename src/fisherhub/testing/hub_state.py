"""The folder that keeps the local Hub server's repos across restarts (``HubServer(root=...)``, ``fisherhub hub
serve --root DIR``): each file once under ``objects/`` by its git blob sha1, and the repos, refs and commits in
``state.json``, rewritten atomically after every change (a crash leaves the previous state whole); ``.lock`` is
held while a server serves from it, so a second one is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fisherhub.testing.hub_memory import Repo, git_blob_sha

STATE_FILE, OBJECTS, LOCK_FILE = "state.json", "objects", ".lock"
STATE_KIND, STATE_VERSION = "fisherhub-local-hub", 1


class StateLockedError(RuntimeError):
    """Another server keeps its state in the folder asked for."""


class StateFolder:
    """``root``: ``lock()`` it while serving, ``load()`` its repos, ``save(repos)`` after every change."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._lock: Any = None  # a filelock.FileLock while held

    def lock(self) -> None:
        """Hold ``.lock`` (the folder is made when missing); ``StateLockedError`` when another server holds it."""
        from filelock import FileLock, Timeout

        self.root.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.root / LOCK_FILE))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise StateLockedError(f"another local Hub keeps its state in {self.root} (it holds {LOCK_FILE})") from None
        self._lock = lock

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _blob(self, sha: str) -> Path:
        return self.root / OBJECTS / sha[:2] / sha[2:]

    def load(self) -> dict[tuple[str, str], Repo]:
        """The repos ``state.json`` describes, by (repo type, repo id); none when there is no state yet.
        ``ValueError`` for a state of another kind or version, or a file that does not hash to its name."""
        state_file = self.root / STATE_FILE
        if not state_file.is_file():
            return {}
        state = json.loads(state_file.read_text(encoding="utf-8"))
        if state.get("kind") != STATE_KIND or state.get("version") != STATE_VERSION:
            raise ValueError(
                f"{state_file} is not the state of a local Hub this version reads ({STATE_KIND} v{STATE_VERSION})"
            )
        blobs: dict[str, bytes] = {}

        def blob(sha: str) -> bytes:
            if sha not in blobs:
                data = self._blob(sha).read_bytes()
                if git_blob_sha(data) != sha:
                    raise ValueError(f"{self._blob(sha)} does not hash to its name: the folder was edited")
                blobs[sha] = data
            return blobs[sha]

        return {(r["type"], r["id"]): Repo.from_state(r, blob) for r in state["repos"]}

    def save(self, repos: dict[tuple[str, str], Repo]) -> None:
        """Every file not yet under ``objects/``, then ``state.json`` (each written atomically)."""
        from fisherhub.core.atomic import atomic_path

        def write(path: Path, data: bytes) -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as temporary:
                Path(temporary).write_bytes(data)

        for repo in repos.values():
            for commit in repo.commits.values():
                for data in commit.files.values():
                    if not (path := self._blob(git_blob_sha(data))).is_file():
                        write(path, data)
        document = {"kind": STATE_KIND, "version": STATE_VERSION, "repos": [r.to_state() for r in repos.values()]}
        write(self.root / STATE_FILE, json.dumps(document, indent=1).encode("utf-8"))
