"""The in-memory repos of the local Hub server (``hub_server``): commits with 40-hex ids and one parent, files as
bytes identified by their git blob sha1, branches and PR refs, the tags the Hub derives from a card, and what
the HTTP answers are built from (repo infos, tree listings, byte ranges, errors)."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
YAML_BLOCK = re.compile(r"^(\s*---(?:\r\n|\r|\n))([\S\s]*?)((?:\r\n|\r|\n)---[ \t]*(\r\n|\n|$))")  # the client's
CONFLICT = "A commit has happened since. Please refresh and try again."  # the Hub's 412 message
LFS_SUFFIXES = (".parquet",)  # uploaded through LFS (the Hub's preupload answer for these); the rest inline
#: what a repo keeps across restarts (``Repo.to_state``), besides its commits
REPO_FIELDS = ("type", "id", "private", "sdk", "created", "prs", "gated", "read_only", "refs")


def git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


def card_metadata(text: str) -> dict | None:
    """YAML front matter of a repo card (None without one); raises when it is not valid YAML or not a mapping."""
    match = YAML_BLOCK.search(text)
    if match is None:
        return None
    data = yaml.load(match.group(2), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # C parser when built
    if data is not None and not isinstance(data, dict):
        raise ValueError("repo card metadata must be a YAML mapping")
    return data or {}


def as_list(value) -> list[str]:
    return [str(v) for v in (value if isinstance(value, list) else [value])] if value else []


def flag(query: dict, name: str) -> bool:
    return query.get(name, [""])[0].lower() in ("1", "true")


class HubError(Exception):
    """An HTTP error answer: status, message (JSON ``error`` and X-Error-Message), optional X-Error-Code."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None, **body):
        super().__init__(message)
        self.status, self.code, self.headers, self.body = status, code, headers or {}, {"error": message, **body}


@dataclass
class Commit:
    oid: str
    parent: str | None
    files: dict[str, bytes]
    title: str
    message: str = ""
    date: str = field(default_factory=now)


class Repo:
    """One repo: ``commits`` by id and ``refs`` (``refs/heads/<b>``, ``refs/pr/<n>``) -> commit id."""

    def __init__(self, repo_type: str, repo_id: str, private: bool = False, sdk: str | None = None):
        self.type, self.id, self.private, self.sdk, self.created, self.prs = repo_type, repo_id, private, sdk, now(), 0
        self.gated: str | bool = False  # "auto" / "manual": file contents need a granted token (``granted``)
        self.granted: set[str] = set()
        self.read_only = False  # commits answer 403, as the Hub does for a token without write access
        self.commits: dict[str, Commit] = {}
        self.cards: dict[str, dict | None] = {}  # commit id -> parsed card metadata
        self.tag_lists: dict[str, list[str]] = {}  # commit id -> its tags
        self.refs = {"refs/heads/main": self.add_commit(None, {".gitattributes": GITATTRIBUTES}, "initial commit")}

    def add_commit(self, parent: str | None, files: dict[str, bytes], title: str, message: str = "") -> str:
        seed = json.dumps([parent, sorted((p, git_blob_sha(b)) for p, b in files.items()), title, time.time_ns()])
        oid = hashlib.sha1(seed.encode()).hexdigest()
        self.commits[oid] = Commit(oid, parent, dict(files), title, message)
        return oid

    def to_state(self) -> dict:
        """The repo as a server's state file holds it: its fields, and each commit with its files by blob sha1."""
        commits = [
            {**asdict(c), "files": {p: git_blob_sha(b) for p, b in c.files.items()}} for c in self.commits.values()
        ]
        return {
            **{name: getattr(self, name) for name in REPO_FIELDS},
            "granted": sorted(self.granted),
            "commits": commits,
        }

    @classmethod
    def from_state(cls, state: dict, blob) -> Repo:
        """The repo ``to_state`` described; ``blob(sha1)`` gives a file's bytes."""
        repo = cls.__new__(cls)
        for name in REPO_FIELDS:
            setattr(repo, name, state[name])
        repo.granted, repo.cards, repo.tag_lists = set(state["granted"]), {}, {}
        repo.commits = {
            c["oid"]: Commit(**{**c, "files": {p: blob(sha) for p, sha in c["files"].items()}})
            for c in state["commits"]
        }
        return repo

    def ref_name(self, rev: str) -> str | None:
        return next((name for name in (rev, f"refs/heads/{rev}") if name in self.refs), None)

    def resolve(self, rev: str) -> Commit:
        if (ref := self.ref_name(rev)) is not None:
            return self.commits[self.refs[ref]]
        found = [c for oid, c in self.commits.items() if oid.startswith(rev.lower())] if len(rev) >= 7 else []
        if len(found) != 1:
            raise HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return found[0]

    def history(self, oid: str | None) -> list[Commit]:
        out = []
        while oid is not None:
            out.append(self.commits[oid])
            oid = self.commits[oid].parent
        return out

    def card(self, commit: Commit) -> dict | None:
        return copy.deepcopy(self._card(commit))

    def _card(self, commit: Commit) -> dict | None:
        """The card's metadata, parsed once per commit (commits never change); not to be changed by the caller."""
        if commit.oid not in self.cards:
            try:
                self.cards[commit.oid] = (
                    card_metadata(commit.files["README.md"].decode("utf-8")) if "README.md" in commit.files else None
                )
            except Exception:  # on the Hub a repo with a broken card just has no cardData
                self.cards[commit.oid] = None
        return self.cards[commit.oid]

    def tags(self, commit: Commit) -> list[str]:
        if commit.oid not in self.tag_lists:  # computed once per commit, as its card is parsed
            self.tag_lists[commit.oid] = self._tags(commit)
        return list(self.tag_lists[commit.oid])

    def _tags(self, commit: Commit) -> list[str]:
        card = self._card(commit) or {}
        tags = as_list(card.get("tags")) + as_list(card.get("library_name"))
        tags += [f"license:{v}" for v in as_list(card.get("license"))]
        tags += [f"language:{v}" for v in as_list(card.get("language"))]
        if self.type == "model":
            tags += [f"dataset:{v}" for v in as_list(card.get("datasets"))]
            adapter = "adapter_config.json" in commit.files
            relation = card.get("base_model_relation") or ("adapter" if adapter else "finetune")
            for base in as_list(card.get("base_model")):
                tags += [f"base_model:{base}", f"base_model:{relation}:{base}"]
        return list(dict.fromkeys(tags))

    def info(self, commit: Commit, blobs: bool = False) -> dict:
        siblings = [
            {"rfilename": p, **({"size": len(b), "blobId": git_blob_sha(b)} if blobs else {})}
            for p, b in sorted(commit.files.items())
        ]
        out: dict[str, Any] = {
            "_id": hashlib.md5(self.id.encode()).hexdigest()[:24],
            "id": self.id,
            "author": self.id.split("/")[0],
            "sha": commit.oid,
            "lastModified": commit.date,
            "createdAt": self.created,
            "private": self.private,
            "gated": self.gated,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": self.tags(commit),
            "siblings": siblings,
            **({"modelId": self.id} if self.type == "model" else {}),
            **({"sdk": self.sdk} if self.type == "space" else {}),
        }
        if (card := self.card(commit)) is not None:
            out["cardData"] = card
            if card.get("library_name"):
                out["library_name"] = card["library_name"]
        return out


def tree_entries(files: dict[str, bytes], base: str, recursive: bool) -> list[dict]:
    """Directories then files under ``base`` ('' = root), as /tree lists them; 404 when base is no directory."""
    prefix = base.strip("/") + "/" if base.strip("/") else ""
    under = {p: b for p, b in sorted(files.items()) if p.startswith(prefix)}
    if prefix and not under:
        raise HubError(404, f"{base} does not exist or is not a directory", "EntryNotFound")
    dirs: set[str] = set()
    out: list[dict] = []
    for path, data in under.items():
        parts = path[len(prefix) :].split("/")
        dirs.update(prefix + "/".join(parts[:i]) for i in range(1, len(parts) if recursive else min(2, len(parts))))
        if recursive or len(parts) == 1:
            out.append({"type": "file", "oid": git_blob_sha(data), "size": len(data), "path": path})
    for d in sorted(dirs, reverse=True):
        content = json.dumps([(p, git_blob_sha(b)) for p, b in under.items() if p.startswith(d + "/")])
        out.insert(0, {"type": "directory", "oid": hashlib.sha1(content.encode()).hexdigest(), "size": 0, "path": d})
    return out


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, end inclusive) of a single ``bytes=`` range; None (whole file) without one or for several."""
    match = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", header or "")
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    start, end = (max(size - int(last), 0), size - 1) if first == "" else (int(first), int(last or size - 1))
    if start >= size or start > end:
        raise HubError(416, f"Range not satisfiable: {header}", headers={"Content-Range": f"bytes */{size}"})
    return start, min(end, size - 1)
