"""Bounded retries for the Hub requests that ``huggingface_hub`` sends only once.

``huggingface_hub`` 2.x retries on its own (``http_backoff``: HTTP 429, 5xx, timeouts; at most 5 retries, after a
429 the ``Retry-After`` seconds plus 1, else 1, 2, 4, 8, 8 s) the listings (each page), ``hf_hub_download``
(its HEAD again after a failure; the GET on 429) and ``get_hf_file_metadata(retry_on_errors=True)``; fisherhub
uses those as they are. ``repo_info`` is sent once: a 429 or 5xx raises ``HfHubHTTPError``. ``with_retries``
sends such a call again, at most ``RETRIES`` times, after the ``Retry-After`` the 429 names (a wait longer than
``MAX_WAIT`` is not waited for: the error is raised) or, without one, after 1, 2, 4 s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from huggingface_hub.errors import HfHubHTTPError

logger = logging.getLogger(__name__)

#: statuses sent again (the ones ``huggingface_hub``'s own backoff sends again)
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: retries after the first try, and the longest wait (seconds) a ``Retry-After`` may ask for
RETRIES, MAX_WAIT, FIRST_WAIT = 3, 60.0, 1.0

Value = TypeVar("Value")


def retry_after(exc: HfHubHTTPError) -> float | None:
    """The seconds the answer's ``Retry-After`` header asks for (its delay-seconds form), None without one."""
    value = exc.response.headers.get("Retry-After", "").strip() if exc.response is not None else ""
    return float(value) if value.isdecimal() else None


def with_retries(call: Callable[[], Value], where: str, sleep: Callable[[float], None] = time.sleep) -> Value:
    """``call()``, sent again after a 429 or 5xx (``RETRY_STATUSES``) at most ``RETRIES`` times: after the
    seconds the 429's ``Retry-After`` asks for, else ``FIRST_WAIT`` doubled at each retry. Any other error, the
    last one, or one asking to wait more than ``MAX_WAIT`` is raised."""
    wait = FIRST_WAIT
    for attempt in range(RETRIES + 1):
        try:
            return call()
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            asked = retry_after(exc)
            if status not in RETRY_STATUSES or attempt == RETRIES or (asked or 0) > MAX_WAIT:
                raise
            pause = asked if asked is not None else wait
            logger.info("%s: the Hub answered %s; sending it again in %.0f s", where, status, pause)
            sleep(pause)
            wait *= 2
    raise AssertionError("unreachable: the last try returns or raises")
