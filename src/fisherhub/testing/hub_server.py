"""A local stand-in for the part of the Hugging Face Hub HTTP API that `huggingface_hub` 2.4 uses.

Tests point the real client at it (``HF_ENDPOINT``, set in ``conftest.py``); nothing here contacts the Hub.
Repos (model / dataset / space) live in memory (or in ``root``, below) with a git-like history: commits with 40-hex ids and one
parent, files as bytes identified by their git blob sha1, branches (``main``) and PR refs (``refs/pr/N``).
A new repo has the Hub's "initial commit" (a ``.gitattributes``). Protocol notes: /work/shared/hub-protocol.md.

{t} = models|datasets|spaces; {id} = namespace/name (a model id without a namespace, such as ``gpt2``, is
answered as the Hub answers one it lacks: 404 RepoNotFound, as no repo here is made without a namespace);
{rev} (URL-quoted) = a branch, refs/heads/<b>, refs/pr/<n> or a commit id (40 hex, or a unique prefix of 7+).

  POST /api/repos/create           {name, organization, type, visibility|private, sdk} -> {url}; 409 if it exists
  GET  /api/whoami-v2              the test user
  POST /api/validate-yaml          {content, repoType} -> {errors, warnings}; 400 for invalid front matter
  GET  /api/{t}                    ?search= &author= &filter= (tags; repeated: all must match) &limit= &full=
                                   &cardData= &expand= -> repo infos (the Hub's default fields), oldest first
  GET  /api/{t}/{id}[/revision/{rev}]   ?blobs= -> id, sha, siblings, tags, cardData, lastModified, ...
  GET  /api/{t}/{id}/tree/{rev}[/{path}]   ?recursive= -> directories and files
  GET  /api/{t}/{id}/commits/{rev}  history, newest first
  POST /api/{t}/{id}/preupload/{rev}   uploadMode "regular" ("lfs" for LFS_SUFFIXES), oid = remote blob sha1 or null
  POST /api/{t}/{id}/commit/{rev}  NDJSON header/file/deletedFile/deletedFolder; ?create_pr=1 -> refs/pr/N;
                                   412 "A commit has happened since..." when parentCommit is not the head
  HEAD|GET /[datasets/|spaces/]{id}/resolve/{rev}/{path}   X-Repo-Commit, ETag, Content-Length; Range -> 206
  GET  /[datasets/|spaces/]{id}[/tree/{rev}|/blob/{rev}/{path}]   the repo's (file's) web page: HTML (id, commit,
                                   files; the file's text)
  POST /[datasets/|spaces/]{id}.git/info/lfs/objects/batch   LFS "basic" upload actions -> PUT /lfs-upload/{sha256}
                                   (files named ``*LFS_SUFFIXES`` are "lfs" at preupload, as the Hub answers for
                                   Parquet; the commit names them by ``lfsFile`` sha256)

``root`` (a folder; default none: in memory) keeps the repos across restarts (``hub_state``: rewritten
atomically after every change; a second server on the same folder is refused).
``fisherhub hub serve`` runs one for people (a development tool: loopback only).

``latency`` (seconds, default 0) is slept before every answer, as a distant Hub would take; while it is set,
``most_in_flight`` counts the most requests answered at once (since ``reset()``). ``faults`` (``hub_faults.Faults``:
none by default) injects what the real Hub does to a client that reads thousands of repos: drawn latency, 429 with
Retry-After, paginated listings, repos that fail after being listed; ``fault_log`` counts what was answered.

Errors: 404 with X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound (the client maps them to its
exceptions); a gated repo (``Repo.gated``) lists its info and tree but answers file reads with 401 (no token)
or 403 (a token not in ``Repo.granted``) and X-Error-Code GatedRepo, as the Hub does; a private repo whose
``granted`` is not empty is hidden (404 RepoNotFound, left out of listings) from reads with any other token; 401 on writes without a Bearer token, 400 with a message for anything unsupported or failing
here: never 5xx/408/429 (but as ``faults`` injects them), which the client retries with a long backoff. Tags come from the card as on the
Hub: ``tags``, ``library_name``, ``license:``, ``language:``, ``dataset:`` and, for models, ``base_model:<id>``
and ``base_model:<relation>:<id>`` (``base_model_relation``, else ``adapter`` when the repo has
``adapter_config.json``, else ``finetune``). No Xet; uploads are inline base64 in the commit but for
``LFS_SUFFIXES`` (LFS, above).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


from fisherhub.testing.hub_faults import FaultLog, Faults, named_repo, page
from fisherhub.testing.hub_state import StateFolder
from fisherhub.testing.hub_memory import (  # noqa: F401  (GITATTRIBUTES, Commit: re-exported for tests)
    CONFLICT,
    GITATTRIBUTES,
    LFS_SUFFIXES,
    PREFIX,
    TYPES,
    Commit,
    HubError,
    Repo,
    card_metadata,
    flag,
    git_blob_sha,
    parse_range,
    tree_entries,
)


class HubServer:
    """A Hub on a loopback port (``port`` 0: a free one): ``start()``, ``stop()``, ``endpoint``, ``reset()``; for
    tests ``repo()``, ``files()``, ``commit_count()`` and ``requests`` (method, path, Range header) seen since
    reset. ``root``: the folder that keeps its state across restarts (None: in memory)."""

    def __init__(
        self, user: str = "tester", host: str = "127.0.0.1", *, root: str | os.PathLike | None = None, port: int = 0
    ):
        self.user, self.host, self.port, self.endpoint = user, host, port, ""
        self.root = Path(root) if root is not None else None
        self._state = StateFolder(self.root) if self.root is not None else None
        self.repos: dict[tuple[str, str], Repo] = {}  # (repo type, repo id) -> Repo
        self.requests: list[tuple[str, str, str | None]] = []
        self.received, self.sent = list[int](), list[int]()  # the sizes of request and answer bodies (appended)
        self.lfs: dict[str, bytes] = {}  # sha256 -> content uploaded through LFS, until a commit names it
        self.latency = 0.0  # seconds slept before each answer
        self.faults, self.fault_log = Faults(), FaultLog()
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.RLock()
        self._httpd: ThreadingHTTPServer | None = None

    def start(self) -> HubServer:
        """Serve (after loading the state ``root`` holds); ``OSError`` when the port is taken, ``StateLockedError``
        when another server keeps its state in ``root``."""
        if self._state is not None:
            self._state.lock()
            try:
                self.repos = self._state.load()
            except BaseException:
                self._state.release()
                raise
        try:
            self._httpd = ThreadingHTTPServer((self.host, self.port), type("Handler", (_Handler,), {"hub": self}))
        except OSError:
            if self._state is not None:
                self._state.release()
            raise
        self._httpd.daemon_threads = True
        self.endpoint = f"http://{self.host}:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, name="hub-server", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._state is not None:
            self._state.release()

    def reset(self) -> None:
        with self.lock:
            self.repos.clear()
            self.requests.clear()
            self.lfs.clear()
            self.latency = 0.0
            self.faults, self.fault_log = Faults(), FaultLog()
            self.most_in_flight = 0
            self.save()

    def save(self) -> None:
        """The repos into ``root`` (``hub_state``); nothing without one."""
        if self._state is not None:
            with self.lock:
                self._state.save(self.repos)

    def repo(self, repo_id: str, repo_type: str = "model") -> Repo:
        with self.lock:
            if (repo := self.repos.get((repo_type, repo_id))) is None:
                raise HubError(404, f"Repository not found: {repo_type} {repo_id}", "RepoNotFound")
            return repo

    def readable(self, h, repo_id: str, repo_type: str) -> Repo:
        """The repo, as a read with this request's token sees it (a private repo: 404 unless granted)."""
        repo = self.repo(repo_id, repo_type)
        if not self.may_read(h, repo):
            raise HubError(404, f"Repository not found: {repo_type} {repo_id}", "RepoNotFound")
        return repo

    @staticmethod
    def may_read(h, repo: Repo) -> bool:
        token = h.headers.get("Authorization", "").removeprefix("Bearer ")
        return not (repo.private and repo.granted) or token in repo.granted

    def files(self, repo_id: str, repo_type: str = "model", revision: str = "main") -> dict[str, bytes]:
        with self.lock:
            return dict(self.repo(repo_id, repo_type).resolve(revision).files)

    def commit_count(self, repo_id: str, repo_type: str = "model", revision: str = "main") -> int:
        with self.lock:
            repo = self.repo(repo_id, repo_type)
            return len(repo.history(repo.resolve(revision).oid))

    def url(self, repo: Repo) -> str:
        return f"{self.endpoint}/{PREFIX[repo.type]}{repo.id}"

    # ----- endpoints: handler, request body, URL groups -> (status, JSON-able or bytes[, headers]) -----
    def create_repo(self, h, body):
        repo_type, name = body.get("type") or "model", body.get("name") or ""
        org = body.get("organization") or self.user
        if repo_type not in PREFIX or not re.fullmatch(r"[\w.-]{1,96}", name) or not re.fullmatch(r"[\w.-]+", org):
            raise HubError(400, f"Invalid repo type or name: {repo_type!r} {org}/{name}")
        with self.lock:
            if (key := (repo_type, f"{org}/{name}")) in self.repos:
                raise HubError(409, f"You already created this {repo_type} repo", url=self.url(self.repos[key]))
            private = body.get("visibility") == "private" or bool(body.get("private"))
            self.repos[key] = repo = Repo(repo_type, key[1], private, body.get("sdk"))
            self.save()
        return 200, {"url": self.url(repo), "name": repo.id, "id": repo.id}

    def whoami(self, h, body):
        return 200, {
            "type": "user",
            "id": "0" * 24,
            "name": self.user,
            "fullname": self.user,
            "orgs": [],
            "auth": {"type": "access_token", "accessToken": {"displayName": "tests", "role": "write"}},
        }

    def validate_yaml(self, h, body):
        try:
            meta = card_metadata(body.get("content") or "")
        except Exception as err:
            return 400, {"errors": [{"message": f"Invalid YAML in repo card: {err}"}], "warnings": []}
        warnings = [] if meta else [{"message": "Empty or missing yaml metadata in repo card"}]
        return 200, {"errors": [], "warnings": warnings}

    def list_repos(self, h, body, t):
        q, out = h.query, []
        # the fields the Hub lists by default; more with full / cardData; exactly id + expand[] with expand
        keep = {"_id", "id", "modelId", "private", "tags", "downloads", "likes", "createdAt", "library_name"}
        if t != "models" or flag(q, "full"):
            keep |= {"author", "sha", "lastModified", "gated", "disabled", "sdk"}
        keep |= {"siblings", "cardData"} if flag(q, "full") else {"cardData"} if flag(q, "cardData") else set()
        if expand := q.get("expand", []) + q.get("expand[]", []):
            keep = {"_id", "id", *expand}
        with self.lock:  # the repos listed, then the infos of the page asked for only
            for (repo_type, repo_id), repo in self.repos.items():
                if repo_type != TYPES[t] or not self.may_read(h, repo):
                    continue
                head = repo.resolve("main")
                author = repo_id.split("/")[0]
                if (
                    q.get("author", [author])[0] != author
                    or q.get("search", [""])[0].lower() not in repo_id.lower()
                    or not all(f in repo.tags(head) for f in q.get("filter", []))
                ):
                    continue
                out.append((repo, head))
            listed, link = page(out[: int(q["limit"][0])] if q.get("limit") else out, q, h.url, self.faults.page_size)
            infos = [repo.info(head) for repo, head in listed]
        return 200, [{k: v for k, v in info.items() if k in keep} for info in infos], link

    def repo_info(self, h, body, t, repo_id, rev):
        with self.lock:
            repo = self.readable(h, repo_id, TYPES[t])
            return 200, repo.info(repo.resolve(rev or "main"), blobs=flag(h.query, "blobs"))

    def tree(self, h, body, t, repo_id, rev, path):
        with self.lock:
            files = self.readable(h, repo_id, TYPES[t]).resolve(rev).files
            return 200, tree_entries(files, path or "", flag(h.query, "recursive"))

    def commits(self, h, body, t, repo_id, rev):
        with self.lock:
            repo = self.readable(h, repo_id, TYPES[t])
            history = repo.history(repo.resolve(rev).oid)
        return 200, [
            {"id": c.oid, "title": c.title, "message": c.message, "date": c.date, "authors": [{"user": self.user}]}
            for c in history
        ]

    def preupload(self, h, body, t, repo_id, rev):
        with self.lock:
            files = self.repo(repo_id, TYPES[t]).resolve(rev).files
        return 200, {
            "files": [
                {
                    "path": f["path"],
                    "uploadMode": "lfs" if f["path"].endswith(LFS_SUFFIXES) else "regular",
                    "shouldIgnore": False,
                    "oid": git_blob_sha(files[f["path"]]) if f["path"] in files else None,
                }
                for f in body.get("files", [])
            ]
        }

    def commit(self, h, body, t, repo_id, rev):
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "The commit payload must start with a header line")
        header, create_pr = lines[0]["value"], flag(h.query, "create_pr")
        parent = header.get("parentCommit")
        with self.lock:
            repo = self.repo(repo_id, TYPES[t])
            if repo.read_only and not create_pr:
                raise HubError(403, f"You don't have the rights to push to {repo_id}: your token is read-only for it")
            ref = repo.ref_name(rev)
            if ref is None or (create_pr and not ref.startswith("refs/heads/")):
                raise HubError(404, f"Invalid rev id: {rev} (commit to a branch or refs/pr/N)", "RevisionNotFound")
            base = repo.commits[repo.refs[ref]]
            if create_pr and parent:  # a PR starts from parentCommit
                base = repo.resolve(parent)
            elif parent and not base.oid.startswith(parent.lower()):
                raise HubError(412, CONFLICT)
            files = dict(base.files)
            for line in lines[1:]:
                key, value = line.get("key"), line.get("value") or {}
                path = str(value.get("path", ""))
                if not path or path.startswith("/") or ".." in path.split("/"):
                    raise HubError(400, f"Invalid path in commit: {path!r}")
                if key == "file":
                    content = value.get("content", "")
                    files[path] = base64.b64decode(content) if value.get("encoding") == "base64" else content.encode()
                elif key == "lfsFile":
                    if (data := self.lfs.get(str(value.get("oid")))) is None:
                        raise HubError(400, f"LFS object {value.get('oid')} of {path} was never uploaded")
                    files[path] = data
                elif key == "deletedFile":
                    if files.pop(path, None) is None:
                        raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                elif key == "deletedFolder":
                    if not (gone := [p for p in files if p.startswith(path.rstrip("/") + "/")]):
                        raise HubError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
                    for p in gone:
                        del files[p]
                else:
                    raise HubError(400, f"Unsupported commit operation {key!r} (the test server takes no Xet)")
            try:
                card_metadata(files.get("README.md", b"").decode("utf-8"))
            except Exception as err:
                raise HubError(400, f"Invalid metadata in README.md: {err}") from err
            oid = repo.add_commit(base.oid, files, header.get("summary") or "", header.get("description") or "")
            pr_url = None
            if create_pr:
                repo.prs += 1
                ref, pr_url = f"refs/pr/{repo.prs}", f"{self.url(repo)}/discussions/{repo.prs}"
            repo.refs[ref] = oid
            self.save()
        return 200, {
            "success": True,
            "commitOid": oid,
            "commitUrl": f"{self.url(repo)}/commit/{oid}",
            "pullRequestUrl": pr_url,
            "hookOutput": "",
        }

    def resolve_file(self, h, body, prefix, repo_id, rev, path):
        repo_type = {p: t for t, p in PREFIX.items()}[prefix]
        with self.lock:
            repo = self.readable(h, repo_id, repo_type)
            token = h.headers.get("Authorization", "").removeprefix("Bearer ")
            if repo.gated and token not in repo.granted:  # as the Hub: 401 without a token, 403 with one
                raise HubError(
                    401 if not token else 403,
                    f"Access to {repo_type} {repo_id} is restricted and you are "
                    f"not in the authorized list. Visit {self.url(repo)} to ask for access.",
                    "GatedRepo",
                )
            commit = repo.resolve(rev)
        headers = {"X-Repo-Commit": commit.oid}
        if path not in commit.files:  # X-Repo-Commit lets the client cache the absence (.no_exist)
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", headers)
        data = commit.files[path]
        if path.endswith(".safetensors") and self.faults.repo_fault(repo_type, repo_id) == "truncated":
            data = data[: len(data) // 2]
        headers |= {"ETag": f'"{git_blob_sha(data)}"', "Accept-Ranges": "bytes"}
        if (span := parse_range(h.headers.get("Range"), len(data))) is None:
            return 200, data, headers
        headers["Content-Range"] = f"bytes {span[0]}-{span[1]}/{len(data)}"
        return 206, data[span[0] : span[1] + 1], headers

    def web_page(self, h, body, prefix, repo_id, view, rev, path):
        """A stand-in for the Hub's web page of a repo (``/{id}``, ``/{id}/tree/{rev}``) or of a file in it
        (``/{id}/blob/{rev}/{path}``): HTML naming the repo, the commit and its files (the file's text), so that
        links an app builds from ``HF_ENDPOINT`` can be followed."""
        repo_type = {p: t for t, p in PREFIX.items()}[prefix]
        with self.lock:
            repo = self.readable(h, repo_id, repo_type)
            commit = repo.resolve(rev or "main")
        if view == "blob" and path not in commit.files:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound")
        name = f"{PREFIX[repo_type]}{repo_id}"
        if view == "blob":
            data = commit.files[path]
            shown = data.decode("utf-8", "replace") if b"\0" not in data[:1024] else f"{len(data)} bytes (binary)"
            content = f"<h2>{html.escape(path)}</h2><pre>{html.escape(shown)}</pre>"
        else:
            items = "".join(
                f'<li><a href="/{html.escape(name)}/blob/{commit.oid}/{html.escape(file)}">{html.escape(file)}</a></li>'
                for file in sorted(commit.files)
            )
            content = f"<ul>{items}</ul>"
        page = (
            f"<!doctype html><html><head><title>{html.escape(name)}</title></head><body>"
            f"<h1>{html.escape(name)}</h1><p>commit {commit.oid}</p>{content}</body></html>"
        )
        return 200, page.encode(), {"Content-Type": "text/html; charset=utf-8"}

    def lfs_batch(self, h, body, prefix, repo_id):
        self.repo(repo_id, {p: t for t, p in PREFIX.items()}[prefix])
        objects = []
        for obj in body.get("objects", []):
            oid, size = str(obj.get("oid")), int(obj.get("size", 0))
            upload = {"upload": {"href": f"{self.endpoint}/lfs-upload/{oid}"}}
            objects.append({"oid": oid, "size": size, **({} if oid in self.lfs else {"actions": upload})})
        return 200, {"transfer": "basic", "objects": objects}

    def lfs_upload(self, h, body, oid):
        if hashlib.sha256(body).hexdigest() != oid:
            raise HubError(400, f"LFS upload: content does not hash to {oid}")
        with self.lock:
            self.lfs[oid] = body
        return 200, {}


SEG, API = r"([^/]+)", r"/api/(models|datasets|spaces)/([^/]+/[^/]+)"
ROUTES = [  # (method, path pattern on the raw path, HubServer method); groups are URL-unquoted
    ("POST", r"/api/repos/create", "create_repo"),
    ("GET", r"/api/whoami-v2", "whoami"),
    ("POST", r"/api/validate-yaml", "validate_yaml"),
    ("GET", r"/api/(models|datasets|spaces)", "list_repos"),
    ("GET", API + r"(?:/revision/([^/]+))?", "repo_info"),
    ("GET", r"/api/(models|datasets|spaces)/([^/]+)(?:/revision/([^/]+))?", "repo_info"),  # gpt2: never one here
    ("GET", API + r"/tree/([^/]+)(?:/(.+))?", "tree"),
    ("GET", API + r"/commits/" + SEG, "commits"),
    ("POST", API + r"/preupload/" + SEG, "preupload"),
    ("POST", API + r"/commit/" + SEG, "commit"),
    ("GET", r"/(datasets/|spaces/|)([^/]+/[^/]+)/resolve/" + SEG + r"/(.+)", "resolve_file"),
    ("GET", r"/()([^/]+)/resolve/" + SEG + r"/(.+)", "resolve_file"),  # a model id without a namespace
    ("POST", r"/(datasets/|spaces/|)([^/]+/[^/]+)\.git/info/lfs/objects/batch", "lfs_batch"),
    ("PUT", r"/lfs-upload/([0-9a-f]{64})", "lfs_upload"),
    ("GET", r"/(datasets/|spaces/|)([^/]+/[^/]+)(?:/(tree|blob)/([^/]+)(?:/(.+))?)?", "web_page"),  # the last
]
NEEDS_TOKEN = {"create_repo", "whoami", "preupload", "commit", "lfs_batch"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: so every answer has a Content-Length and every body is read
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid 40 ms delayed-ACK stalls
    hub: HubServer

    def log_message(self, *args):
        pass

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True  # cannot find the next request on this connection: answer 400 and close
            raise HubError(400, "The test Hub server needs a Content-Length (no chunked bodies)")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.hub.received.append(len(body))
        return body

    def _send(self, status: int, payload, headers: dict | None = None) -> None:
        binary = isinstance(payload, bytes)
        data = payload if binary else json.dumps(payload, default=str).encode()
        self.send_response(status)
        self.hub.fault_log.answered(self.command, urlsplit(self.path).path, status)
        headers = {"Content-Type": "application/octet-stream" if binary else "application/json", **(headers or {})}
        for key, value in {**headers, "Content-Length": str(len(data))}.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
            self.hub.sent.append(len(data))

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        self.query = parse_qs(url.query, keep_blank_values=True)
        self.hub.requests.append((self.command, url.path, self.headers.get("Range")))
        try:
            raw = self._read_body()
            method = "GET" if self.command == "HEAD" else self.command
            route = next(((n, m) for v, p, n in ROUTES if v == method and (m := re.fullmatch(p, url.path))), None)
            if route is None:
                raise HubError(400, f"The test Hub server does not support {self.command} {url.path}")
            name, match = route
            if name in NEEDS_TOKEN and not self.headers.get("Authorization", "").startswith("Bearer "):
                raise HubError(401, "Invalid credentials in Authorization header")
            ctype, groups = self.headers.get("Content-Type", ""), [g and unquote(g) for g in match.groups()]
            self.url = f"{self.hub.endpoint}{url.path}"
            delay, fault = self.hub.fault_log.before(self.hub.faults, self.command, url.path, named_repo(name, groups))
            if self.hub.latency + delay:
                with self.hub.lock:
                    self.hub.in_flight += 1
                    self.hub.most_in_flight = max(self.hub.most_in_flight, self.hub.in_flight)
                try:
                    time.sleep(self.hub.latency + delay)
                finally:
                    with self.hub.lock:
                        self.hub.in_flight -= 1
            if fault is not None:
                raise fault
            body: Any
            if name == "commit":
                body = raw.decode("utf-8")
            elif name == "lfs_upload":
                body = raw
            elif "x-www-form-urlencoded" in ctype:
                body = parse_qs(raw.decode("utf-8"))
            else:
                body = json.loads(raw) if raw.strip() and "json" in ctype else {}
            self._send(*getattr(self.hub, name)(self, body, *groups))
        except HubError as err:
            message = " ".join(str(err).split()).encode("latin-1", "replace").decode("latin-1")
            headers = {**err.headers, "X-Error-Message": message, **({"X-Error-Code": err.code} if err.code else {})}
            self._send(err.status, err.body, headers)
        except Exception as err:  # the server's own failure: a 400 the client does not retry, never a 5xx
            traceback.print_exc(file=sys.stderr)
            self._send(400, {"error": f"test Hub server failed on {self.command} {url.path}: {err!r}"})

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _dispatch
