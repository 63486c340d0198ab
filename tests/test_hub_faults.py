"""Refused and unreachable Hubs: a 403 on push and a Hub that cannot be reached end in one clear line (exit 1,
no traceback) that says what to do."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from test_hub import make_signature

from fisherhub.cli import main
from fisherhub.hub import HubAccessError, push_signature


def test_a_push_the_hub_forbids_says_what_to_do(hub, hf_api, tmp_path, capsys):
    hf_api.create_repo("org/locked", repo_type="dataset")
    hub.repo("org/locked", "dataset").read_only = True
    signature = make_signature()
    with pytest.raises(HubAccessError, match=r"refused the request \(403 forbidden\).*write access.*--create-pr"):
        push_signature(signature, "datasets/org/locked")
    path = tmp_path / "sig.safetensors"
    signature.save(path)
    assert main(["push", str(path), "datasets/org/locked"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "403 forbidden" in err and "Traceback" not in err
    assert main(["push", str(path), "datasets/org/locked", "--create-pr"]) == 0  # a pull request is allowed


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens there once the socket is closed


@pytest.mark.parametrize(
    "command", [["list", "org/anything"], ["pull", "org/anything:.fisher_signatures/x.safetensors"]]
)
def test_an_unreachable_hub_says_so(command, tmp_path):
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}", "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_HUB_OFFLINE", None)
    result = subprocess.run(
        [sys.executable, "-m", "fisherhub", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "cannot be reached" in result.stderr or "is unreachable" in result.stderr, result.stderr[-2000:]
