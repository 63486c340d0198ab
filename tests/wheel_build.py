"""Build the fisherhub wheel from a copy of this source tree (offline: no build isolation, the installed
setuptools), so building writes nothing into the checkout."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_clean(command: list[str], cwd: Path, timeout: int = 600, checkout: bool = False) -> subprocess.CompletedProcess:
    """``command`` with one BLAS thread and without PYTHONPATH, so it sees the installed packages, not the
    checkout; ``checkout=True``: with this checkout's src/ first instead."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["OMP_NUM_THREADS"] = "1"
    if checkout:
        env["PYTHONPATH"] = str(REPO / "src")
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def see_these_site_packages(python: Path) -> None:
    """Let the venv of ``python`` import this interpreter's packages after its own: a ``.pth`` file naming
    them (``--system-site-packages`` would give the base interpreter's instead, not a venv's such as the one
    ``.ci/run`` makes)."""
    found = run_clean([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=REPO)
    assert found.returncode == 0, found.stderr
    (Path(found.stdout.strip()) / "outer-site-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")


def build_wheel(folder: Path) -> Path:
    """The wheel of this tree, built in ``folder``; returns its path."""
    source = folder / "source"
    shutil.copytree(
        REPO,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git", "__pycache__", "build", "dist", "*.egg-info", "benchmarks", "tests", ".venv"
        ),
    )
    built = run_clean(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(folder / "dist"),
            str(source),
        ],
        cwd=folder,
    )
    if built.returncode != 0:
        raise RuntimeError(f"building the wheel failed:\n{built.stdout[-2000:]}\n{built.stderr[-2000:]}")
    (wheel,) = (folder / "dist").glob("fisherhub-*.whl")
    return wheel
