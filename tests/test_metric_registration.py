"""The evaluate metric: loads of the folder ``install-metric DIR`` writes log nothing; MetricInfo links; the
module type."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import evaluate

from fisherhub.metric import CODEBASE_URLS, HOMEPAGE, METRIC_NAME, REFERENCE_URLS, metric_path

REPO = Path(__file__).resolve().parents[1]

LOAD_THREE_TIMES = r"""
import logging
import sys
import evaluate

class Collect(logging.Handler):
    records = []
    def emit(self, record):
        self.records.append(record.getMessage())

logging.getLogger("evaluate").addHandler(Collect())
for _ in range(3):
    module = evaluate.load(sys.argv[1])
assert type(module).__name__ == "FisherAlignment"
print("LOGGED", Collect.records)
"""


def test_the_installed_folder_loads_three_times_without_a_log_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HF_MODULES_CACHE"}
    env.update(
        HF_HOME=str(tmp_path / "hf_home"),
        HF_EVALUATE_OFFLINE="1",
        HF_UPDATE_DOWNLOAD_COUNTS="0",
        PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}",
    )
    folder = tmp_path / "metrics" / METRIC_NAME
    install = subprocess.run(
        [sys.executable, "-m", "fisherhub", "install-metric", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    assert f"load it with: evaluate.load({str(folder)!r})" in install.stdout
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD_THREE_TIMES, str(folder)], env=env, capture_output=True, text=True, timeout=300
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert "LOGGED []" in loaded.stdout, loaded.stdout


def test_info_links_and_module_type():
    info = evaluate.load(metric_path(), keep_in_memory=True).info
    assert info.module_type == "metric"
    assert info.homepage == HOMEPAGE
    assert info.codebase_urls == list(CODEBASE_URLS) and info.reference_urls == list(REFERENCE_URLS)
    assert all(url.startswith("https://") for url in (info.homepage, *info.codebase_urls, *info.reference_urls))
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["urls"]["Homepage"] == HOMEPAGE
    assert METRIC_NAME == "fisher_alignment"
