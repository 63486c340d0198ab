"""The one in-process Hub server (fisherhub.testing.hub_server) of the suites that need a Hub: discovery,
index, index_sign.

Importing this module starts the server and points ``huggingface_hub`` and ``datasets`` at it through the
environment (``HF_ENDPOINT``, ``HF_HOME``, a token, no progress bars, no Xet), which they read once, when they
are imported: each such suite imports this module before anything that imports them, and ``benchmarks.run
--all`` runs one of them first, so that every suite of the process talks to this one server. A suite starts
with ``fresh_hub()``. The server stops and ``HF_HOME`` (a temp folder) is removed when the process exits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

if "huggingface_hub" in sys.modules:
    raise RuntimeError(
        "huggingface_hub was imported before benchmarks.local_hub could point it at the local Hub server"
    )
from fisherhub.testing.hub_server import HubServer  # noqa: E402  (standard library + yaml only)

HF_HOME = Path(tempfile.mkdtemp(prefix="fisherhub-bench-hub-"))
SERVER = HubServer().start()
os.environ.update(
    HF_ENDPOINT=SERVER.endpoint,
    HF_HOME=str(HF_HOME),
    HF_HUB_DISABLE_TELEMETRY="1",
    HF_HUB_DISABLE_PROGRESS_BARS="1",
    HF_HUB_DISABLE_XET="1",
    HF_TOKEN="hf_fisherhub_benchmark_token",
    HF_DATASETS_DISABLE_PROGRESS_BARS="1",
)
atexit.register(shutil.rmtree, HF_HOME, ignore_errors=True)
atexit.register(SERVER.stop)


def fresh_cache(root: Path) -> Path:
    """A new, empty Hub cache folder under ``root``, where the client downloads from now on."""
    from huggingface_hub import constants

    cache = root / f"hub-{time.perf_counter_ns()}"
    cache.mkdir(parents=True)
    constants.HF_HUB_CACHE = str(cache)  # read by the client on every download
    return cache


def fresh_hub() -> HubServer:
    """The server emptied (no repos, no requests, no latency), with an empty Hub cache: a suite's start."""
    SERVER.reset()
    fresh_cache(HF_HOME)
    return SERVER
