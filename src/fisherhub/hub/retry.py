"""Bounded retries for the Hub requests that ``huggingface_hub`` sends only once, and a count of the requests
sent (``counting_requests``).

``huggingface_hub`` 2.x retries on its own (``http_backoff``: HTTP 429, 5xx, timeouts; at most 5 retries, after a
429 the ``Retry-After`` seconds plus 1, else 1, 2, 4, 8, 8 s) the listings (each page), ``hf_hub_download``
(its HEAD again after a failure; the GET on 429) and ``get_hf_file_metadata(retry_on_errors=True)``; fisherhub
uses those as they are. ``repo_info`` is sent once: a 429 or 5xx raises ``HfHubHTTPError``. ``with_retries``
sends such a call again, at most ``RETRIES`` times, after the ``Retry-After`` the 429 names (a wait longer than
``MAX_WAIT`` is not waited for: the error is raised) or, without one, after 1, 2, 4 s. With
``statuses=RATE_LIMITED`` it is a single attempt that still honours a 429: what an index update sends to a file
the Hub failed to serve at an earlier run, and the second stage to an adapter's weights file.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from huggingface_hub.errors import HfHubHTTPError

logger = logging.getLogger(__name__)

#: statuses sent again (the ones ``huggingface_hub``'s own backoff sends again)
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: what a single attempt sends again: a 429 only, after its ``Retry-After`` (a 5xx is raised at once)
RATE_LIMITED = frozenset({429})
#: retries after the first try, and the longest wait (seconds) a ``Retry-After`` may ask for
RETRIES, MAX_WAIT, FIRST_WAIT = 3, 60.0, 1.0

Value = TypeVar("Value")


def retry_after(exc: HfHubHTTPError) -> float | None:
    """The seconds the answer's ``Retry-After`` header asks for (its delay-seconds form), None without one."""
    value = exc.response.headers.get("Retry-After", "").strip() if exc.response is not None else ""
    return float(value) if value.isdecimal() else None


def with_retries(
    call: Callable[[], Value],
    where: str,
    sleep: Callable[[float], None] = time.sleep,
    statuses: frozenset[int] = RETRY_STATUSES,
) -> Value:
    """``call()``, sent again after an answer of ``statuses`` (default: a 429 or 5xx) at most ``RETRIES`` times:
    after the seconds the 429's ``Retry-After`` asks for, else ``FIRST_WAIT`` doubled at each retry. Any other
    error, the last one, or one asking to wait more than ``MAX_WAIT`` is raised."""
    wait = FIRST_WAIT
    for attempt in range(RETRIES + 1):
        try:
            return call()
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            asked = retry_after(exc)
            if status not in statuses or attempt == RETRIES or (asked or 0) > MAX_WAIT:
                raise
            pause = asked if asked is not None else wait
            logger.info("%s: the Hub answered %s; sending it again in %.0f s", where, status, pause)
            sleep(pause)
            wait *= 2
    raise AssertionError("unreachable: the last try returns or raises")


@dataclasses.dataclass
class HubTraffic:
    """The answers ``huggingface_hub`` received while ``counting_requests`` ran: by status, and the seconds."""

    statuses: collections.Counter[int] = dataclasses.field(default_factory=collections.Counter)
    seconds: float = 0.0

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())

    def line(self) -> str:
        refused = {"429 (rate limited, sent again)": self.statuses[429], "5xx": self.failed_5xx}
        said = ", ".join(f"{count} answered {what}" for what, count in refused.items() if count)
        return f"{self.requests} requests to the Hub in {self.seconds:.1f} s" + (f" ({said})" if said else "")

    @property
    def failed_5xx(self) -> int:
        return sum(count for status, count in self.statuses.items() if status >= 500)


@contextlib.contextmanager
def counting_requests() -> Iterator[HubTraffic]:
    """Count every answer ``huggingface_hub``'s shared client receives in the block (a response hook on
    ``get_session()``, taken off at the end), retries included, and the block's seconds."""
    from huggingface_hub.utils import get_session

    traffic, lock, started = HubTraffic(), threading.Lock(), time.perf_counter()

    def count(response) -> None:
        with lock:
            traffic.statuses[response.status_code] += 1

    hooks = get_session().event_hooks["response"]
    hooks.append(count)
    try:
        yield traffic
    finally:
        if count in hooks:
            hooks.remove(count)
        traffic.seconds = time.perf_counter() - started
