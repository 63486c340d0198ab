"""Row-parallel work on the CPU: a batch's rows split into contiguous ranges, one per intra-op thread.

Each row of a projection is computed alone (no reduction across rows), so running ranges in Python
threads, each with one intra-op thread, gives the bits of one single-threaded call over all rows, whatever
the thread count; the many small kernels of a projection (cache-sized row blocks, small GEMMs) then use
every thread, which intra-op parallelism inside each kernel does not.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import os
from collections.abc import Callable
from typing import TypeVar

import torch

#: below this many rows per thread, splitting costs more than it gains.
MIN_ROWS_PER_THREAD = 16
Result = TypeVar("Result")


@functools.lru_cache(maxsize=4)
def _pool(threads: int, process: int) -> concurrent.futures.ThreadPoolExecutor:
    """One pool per thread count and process (a forked child has none of its parent's threads)."""
    return concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="fisherhub-rows")


def map_row_ranges(
    count: int, work: Callable[[slice], Result], device: torch.device, then: Callable[[Result], None]
) -> None:
    """``then(work(rows))`` for contiguous row ranges covering ``range(count)``, ``then`` in row order in the
    calling thread: one range per intra-op thread on the CPU, each ``work`` run with one intra-op thread and
    each ``then`` too, as soon as its range and those before it are done (so it overlaps the later ranges'
    work); one range (the caller's threads) elsewhere or for fewer than ``MIN_ROWS_PER_THREAD`` rows per
    thread. If ``work`` or ``then`` raises, the other ranges' work is waited for, then the error is raised."""
    threads = min(torch.get_num_threads(), count // MIN_ROWS_PER_THREAD) if device.type == "cpu" else 1
    if threads <= 1:
        then(work(slice(0, count)))
        return
    bounds = [count * i // threads for i in range(threads + 1)]
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # read by each pool thread at its first op; it keeps 1 thereafter
    futures = [_pool(threads, os.getpid()).submit(work, slice(lo, hi)) for lo, hi in itertools.pairwise(bounds)]
    try:
        for future in futures:
            then(future.result())
    finally:
        concurrent.futures.wait(futures)  # no range still at work (on its thread's scratch) after a failure
        torch.set_num_threads(previous)
