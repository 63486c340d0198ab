"""The faults the local Hub server (``hub_server``) injects, as the real Hub shows them; all off by default.

``Faults`` (``HubServer.faults``) says what to inject: ``latency`` (a range of seconds, one draw per request),
a share ``rate_limited`` of reads (GET/HEAD) answered HTTP 429 with ``Retry-After: retry_after``, listings
paginated ``page_size`` repos a page with ``Link: <...>; rel="next"`` (as the Hub answers ``/api/models``), and
a share ``broken`` of model repos that fail after being listed, each in one of ``kinds`` (``REPO_FAULTS``): ``gone`` (every
read naming it answers 404 RepoNotFound), ``error`` (every read naming it answers 500) or ``truncated`` (its
``.safetensors`` files are served cut to half their length, with headers that agree). Listings still list them.

Every draw hashes ``seed`` with what it is for (a request, its commit ids left out, and how many times the same
request came before it; a repo id), so the faults of a run do not depend on the order in which concurrent
requests arrive, nor on the commit ids (which hash the time they were made). ``FaultLog``
(``HubServer.fault_log``) counts what was answered: statuses, ``retried``: requests sent again after a 429 or
5xx answer to them, and ``early``: those that came before the 429's ``Retry-After`` had passed (a client that
hammers).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
import threading
import time
from urllib.parse import urlencode

from fisherhub.testing.hub_memory import PREFIX, TYPES, HubError

REPO_FAULTS = ("gone", "error", "truncated")
COMMIT_IN_PATH = re.compile(r"/[0-9a-f]{40}(?=/|$)")
RATE_LIMITED = "You have exceeded the rate limit of requests. Retry after the time Retry-After says."


@dataclasses.dataclass(frozen=True)
class Faults:
    """What the server injects (the defaults inject nothing)."""

    seed: int = 0
    latency: tuple[float, float] = (0.0, 0.0)  # seconds before each answer: uniform in [low, high]
    rate_limited: float = 0.0  # share of GET/HEAD requests answered 429
    retry_after: int = 1  # seconds, in the 429's Retry-After header
    page_size: int | None = None  # repos per listing page (None: one page)
    broken: float = 0.0  # share of model repos failing after being listed
    kinds: tuple[str, ...] = REPO_FAULTS  # the ways they fail, drawn evenly

    def draw(self, *key: object) -> float:
        """A number in [0, 1) fixed by the seed and ``key``."""
        digest = hashlib.sha256(json.dumps([self.seed, *key]).encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def repo_fault(self, repo_type: str, repo_id: str) -> str | None:
        """The way the model repo ``repo_id`` fails (one of ``kinds``), or None."""
        if repo_type != "model" or not self.broken or self.draw("broken", repo_id) >= self.broken:
            return None
        return self.kinds[int(self.draw("kind", repo_id) * len(self.kinds))]

    def broken_repos(self, repo_ids) -> dict[str, str]:
        """Repo id -> fault, for the model repos among ``repo_ids`` that fail."""
        return {r: fault for r in repo_ids if (fault := self.repo_fault("model", r)) is not None}


#: a Hub as busy as the real one is for a client reading thousands of repos (``fisherhub hub serve --busy``)
BUSY_HUB = Faults(latency=(0.05, 0.15), rate_limited=0.02, retry_after=1, page_size=1000, broken=0.01)


class FaultLog:
    """What the server answered since ``reset``: ``statuses`` (status -> count), ``retried`` (requests again
    after a 429 or 5xx), ``early`` (of those, before the 429's Retry-After passed; ``early_requests``: which),
    ``repeats`` ((method, path) -> requests)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: collections.Counter[int] = collections.Counter()
        self.repeats: collections.Counter[tuple[str, str]] = collections.Counter()
        self.retried = self.early = 0
        self.early_requests: list[tuple[str, str]] = []
        self._limited_until: dict[tuple[str, str], float] = {}
        self._failed: set[tuple[str, str]] = set()

    def answered(self, method: str, path: str, status: int) -> None:
        with self.lock:
            self.statuses[status] += 1
            if status == 429 or status >= 500:
                self._failed.add((method, path))

    def before(
        self, faults: Faults, method: str, path: str, repo: tuple[str, str] | None
    ) -> tuple[float, HubError | None]:
        """(seconds to sleep, the error to answer or None) for this request; ``repo``: (type, id) it names."""
        key = (method, path)
        with self.lock:
            count = self.repeats[key]
            self.repeats[key] += 1
            if key in self._failed:
                self._failed.discard(key)
                self.retried += 1
            if time.monotonic() < self._limited_until.pop(key, 0.0):
                self.early += 1
                self.early_requests.append(key)
        low, high, drawn = *faults.latency, COMMIT_IN_PATH.sub("/<commit>", path)
        delay = low + (high - low) * faults.draw("latency", method, drawn, count) if high else 0.0
        if method not in ("GET", "HEAD"):
            return delay, None
        fault = faults.repo_fault(*repo) if repo is not None else None
        if fault == "gone":
            return delay, HubError(404, f"Repository not found: {repo[1]}", "RepoNotFound")  # type: ignore[index]
        if fault == "error":
            return delay, HubError(500, "Internal Server Error")
        if faults.rate_limited and faults.draw("429", method, drawn, count) < faults.rate_limited:
            with self.lock:
                self._limited_until[key] = time.monotonic() + delay + faults.retry_after
            return delay, HubError(429, RATE_LIMITED, headers={"Retry-After": str(faults.retry_after)})
        return delay, None


def page(items: list, query: dict[str, list[str]], url: str, page_size: int | None) -> tuple[list, dict[str, str]]:
    """The page of ``items`` the ``cursor`` in ``query`` asks for (the first without one), and the ``Link`` header
    to the next page when there is one (``url``: the listing's URL without its query)."""
    if not page_size:
        return items, {}
    start = int(query.get("cursor", ["0"])[0] or 0)
    if start + page_size >= len(items):
        return items[start:], {}
    following = {**query, "cursor": [str(start + page_size)]}
    return items[start : start + page_size], {"Link": f'<{url}?{urlencode(following, doseq=True)}>; rel="next"'}


def named_repo(route: str, groups: list) -> tuple[str, str] | None:
    """(repo type, repo id) a request names (its route's first two groups), None for one that names none."""
    if route in ("list_repos", "lfs_upload") or len(groups) < 2:
        return None
    return TYPES.get(groups[0]) or {p: t for t, p in PREFIX.items()}[groups[0] or ""], groups[1]
