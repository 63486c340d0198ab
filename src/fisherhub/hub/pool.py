"""A bounded pool for per-repo Hub requests: at most ``workers`` in flight, results in the order given.

Per-repo work (reading a repo's signatures to build an index, resolving and loading named candidates) is
latency-bound: each repo costs a few sequential round trips, so with ``workers`` threads the wall time is
about ``ceil(n / workers)`` repos' worth of round trips instead of ``n``. The ``huggingface_hub`` client
is thread-safe (its cache takes file locks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Generic, TypeVar, cast

#: requests in flight at once (the Hub answers this many from one client without rate limiting)
DEFAULT_WORKERS = 8

Item = TypeVar("Item")
Value = TypeVar("Value")


@dataclasses.dataclass(frozen=True)
class Outcome(Generic[Item, Value]):
    """What ``fn(item)`` gave: ``value``, or the exception it raised (``error``)."""

    item: Item
    value: Value | None = None
    error: BaseException | None = None

    def result(self) -> Value:
        """The value ``fn(item)`` returned; its exception raised again when it raised one."""
        if self.error is not None:
            raise self.error
        return cast(Value, self.value)


def check_workers(workers: int) -> int:
    from fisherhub.core.errors import InputError

    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise InputError(f"workers must be a positive integer (requests in flight at once), got {workers!r}")
    return workers


def _outcome(fn: Callable[[Item], Value], item: Item, catch: tuple) -> Outcome[Item, Value]:
    try:
        return Outcome(item, value=fn(item))
    except catch as exc:
        return Outcome(item, error=exc)


def bounded_map(
    fn: Callable[[Item], Value], items: Iterable[Item], workers: int = DEFAULT_WORKERS, catch: tuple = (Exception,)
) -> list[Outcome[Item, Value]]:
    """``fn`` over ``items`` with at most ``workers`` calls at once; one ``Outcome`` per item, in order. An
    exception of a type in ``catch`` becomes that item's ``error``; any other propagates (the rest are
    cancelled). ``workers=1`` runs in this thread, one after the other."""
    items = list(items)
    if check_workers(workers) == 1 or len(items) <= 1:
        return [_outcome(fn, item, catch) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="fisherhub-hub") as pool:
        return list(pool.map(lambda item: _outcome(fn, item, catch), items))


def bounded_completed(
    fn: Callable[[Item], Value], items: Iterable[Item], workers: int = DEFAULT_WORKERS, catch: tuple = (Exception,)
) -> Iterator[Outcome[Item, Value]]:
    """Like ``bounded_map``, but each ``Outcome`` as soon as it is ready, in the order they finish: an item that
    takes long (a request the client backs off and sends again for 20 s) holds one worker, and the others go on.
    When the caller stops early, the items not started are cancelled."""
    items = list(items)
    if check_workers(workers) == 1 or len(items) <= 1:
        yield from (_outcome(fn, item, catch) for item in items)
        return
    pool = ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="fisherhub-hub")
    try:
        for future in as_completed([pool.submit(_outcome, fn, item, catch) for item in items]):
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
