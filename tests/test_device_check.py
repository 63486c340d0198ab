"""scripts/device_check.py: a clean exit without CUDA, and its checks run end to end on the CPU at tiny sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "device_check.py"


def run(*args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600)


def test_without_cuda_it_says_so_and_exits_cleanly():
    result = run()
    assert result.returncode == 0, result.stderr
    assert "no CUDA device" in result.stderr and "nothing was checked" in result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr


@pytest.mark.slow
def test_small_run_on_the_cpu(tmp_path):
    result = run("--small", "--device", "cpu", out=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "device_check.json").read_text())
    checks = ["core", "capture", "throughput_K512", "throughput_K1024", "cpu_update_vs_floor"]
    assert [
        name for name in report if not name.endswith("_seconds") and isinstance(report[name], (dict, list))
    ] == checks
    assert not any("error" in report[name] for name in checks)
    assert all(figures["cpu_2_threads_bits_equal_1_thread"] for figures in report["core"].values())
    assert [row["threads"]["1"]["floor_ratio_cpu"] > 0 for row in report["cpu_update_vs_floor"]] == [True, True]
    for estimator, core in report["core"].items():  # CPU against CPU: the same sums
        assert core["sums_relative_difference"] == 0.0 and core["alignment_cpu_vs_device"] == 1.0, estimator
        assert core["formed_e_relative_difference"] < 1e-5, estimator
    assert report["capture"]["head_checksums_agree"] is True
    assert report["capture"]["alignment_vs_cpu_float32"]["device_float32"] == 1.0
    assert report["throughput_K512"]["maclaurin-hadamard"]["tokens_per_s"] > 0
