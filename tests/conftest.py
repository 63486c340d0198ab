"""Shared pytest setup: a local Hub server (fisherhub.testing.hub_server) that the real `huggingface_hub` client talks to.

`huggingface_hub` reads HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE, ... once, when it is imported; so this
module starts the server and sets the environment before anything imports it. Nothing contacts the Hub.

Fixtures:
    hub_server    the session's HubServer (state persists across tests)
    hub           the same server, emptied first: use it for a clean Hub in a test (its latency and faults end with it)
    hf_api        an `HfApi()` pointed at the server
    hf_hub_cache  a fresh, empty HF_HUB_CACHE directory for this test (env var and client constant)
    wide_terminal a terminal too wide for any line to wrap or any name to be shortened

Under pytest-xdist (the README's test command: ``-n auto --dist loadfile``) each worker has its own server and
HF_HOME, and sends its bounded-claims tally to the controller, which counts them all.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read by torch when it is imported
if "PYTEST_XDIST_WORKER" in os.environ:  # pytest-xdist runs a worker per core: one thread each unless a test asks
    os.environ.setdefault("OMP_NUM_THREADS", "1")

if "huggingface_hub" in sys.modules:
    raise RuntimeError("huggingface_hub was imported before tests/conftest.py could point it at the local Hub server")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fisherhub.testing.hub_faults import Faults  # noqa: E402  (standard library only)
from fisherhub.testing.hub_server import HubServer  # noqa: E402  (standard library + yaml only)

_SERVER = HubServer().start()
_HF_HOME = tempfile.mkdtemp(prefix="fisherhub-hf-home-")
for _var in (
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_ASSETS_CACHE",
    "HF_XET_CACHE",
    "HF_DATASETS_CACHE",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "HF_TOKEN_PATH",
    "HUGGING_FACE_HUB_TOKEN",
):
    os.environ.pop(_var, None)
os.environ.update(
    HF_ENDPOINT=_SERVER.endpoint,
    HF_HOME=_HF_HOME,
    HF_HUB_DISABLE_TELEMETRY="1",
    HF_HUB_DISABLE_PROGRESS_BARS="1",
    HF_HUB_DISABLE_XET="1",
    HF_TOKEN="hf_fisherhub_local_test_token",
)

import pytest  # noqa: E402


def pytest_unconfigure(config):
    _SERVER.stop()
    shutil.rmtree(_HF_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def hub_server() -> HubServer:
    return _SERVER


@pytest.fixture
def hub(hub_server: HubServer) -> HubServer:
    hub_server.reset()
    yield hub_server
    # a test's slow or faulty Hub ends with it, not in the next file's fixtures
    hub_server.latency, hub_server.faults = 0.0, Faults()


@pytest.fixture
def hf_api(hub_server: HubServer):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub_server.endpoint)


@pytest.fixture
def hf_hub_cache(tmp_path, monkeypatch) -> str:
    from huggingface_hub import constants

    cache = str(tmp_path / "hf_hub_cache")
    os.makedirs(cache)
    monkeypatch.setenv("HF_HUB_CACHE", cache)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", cache)
    return cache


@pytest.fixture
def wide_terminal(monkeypatch) -> None:
    """``COLUMNS`` = 1000: what a test asserts of printed text then holds whatever the length of its temporary
    folder (pytest-xdist's ``popen-gwN/``, another ``TMPDIR``), since no line wraps and no name is shortened."""
    monkeypatch.setenv("COLUMNS", "1000")


#: every signature the session's tests make (``SketchState.finalize``), checked by the bounded-claims checks
_TALLY = None


@pytest.fixture(scope="session", autouse=True)
def _every_signature_made_passes_the_bounded_claims_checks():
    """No false alarms: a signature a test makes that the checks doubt fails the session (``pytest_sessionfinish``);
    the count is in the terminal summary. Signatures made in subprocesses are not seen here."""
    global _TALLY
    from fisherhub.testing.plausibility import PlausibilityTally

    _TALLY = PlausibilityTally()
    with _TALLY.watch():
        yield


def pytest_terminal_summary(terminalreporter):
    if _TALLY is not None:  # doubted pairs are the tests' own forgeries: counted, not listed
        for line in _TALLY.lines(pairs=False):
            terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller counts its tally (pytest_testnodedown)
        if _TALLY is not None:
            workeroutput["plausibility_tally"] = dataclasses.asdict(_TALLY)
    elif _TALLY is not None and _TALLY.doubted and exitstatus == 0:
        session.exitstatus = 1


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: a worker's tally added to the session's (the controller runs no test)."""
    global _TALLY
    from fisherhub.testing.plausibility import PlausibilityTally

    tally = getattr(node, "workeroutput", {}).get("plausibility_tally")
    if tally is not None:
        _TALLY = _TALLY or PlausibilityTally()
        _TALLY.merge(PlausibilityTally(**tally))
