"""The linters CI runs before the tests (.ci/run): ``ruff check`` and ``mypy`` pass on the tree with the
project's configuration (pyproject.toml) and fail on a planted violation; ``ruff format --check`` fails on a
file it would reformat."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pyproject.toml"
LINTED = ["src", "tests", "benchmarks", "scripts", "hub_cards"]


def run(*command: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``python -m COMMAND ...`` (ruff and mypy of this interpreter: the test extra installs them)."""
    return subprocess.run([sys.executable, "-m", *command], cwd=cwd, capture_output=True, text=True, check=False)


def test_ruff_check_passes_on_the_tree():
    result = run("ruff", "check", *LINTED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_check_fails_on_an_undefined_name_and_an_unused_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f():\n    return undefined_name\n")
    result = run("ruff", "check", "--config", str(CONFIG), str(bad))
    assert result.returncode == 1
    assert "F401" in result.stdout and "F821" in result.stdout


def test_ruff_format_check_fails_on_a_file_it_would_reformat(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = {  'a':1 }\n")
    assert run("ruff", "format", "--check", "--config", str(CONFIG), str(bad)).returncode == 1
    bad.write_text('x = {"a": 1}\n')
    assert run("ruff", "format", "--check", "--config", str(CONFIG), str(bad)).returncode == 0


def test_mypy_checks_all_of_src_and_passes():
    files = re.findall(r'"([^"]+)"', re.search(r"(?m)^files = (\[.*?\])", CONFIG.read_text()).group(1))
    assert files == ["src/fisherhub"], f"[tool.mypy] files in pyproject.toml must be all of the package, got {files}"
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_fails_on_a_type_error_in_core(tmp_path):
    """A copy of core with a planted ``str`` returned as a float, checked with the project's configuration."""
    shutil.copytree(ROOT / "src/fisherhub/core", tmp_path / "src/fisherhub/core")
    (tmp_path / "src/fisherhub/__init__.py").write_text("")
    (tmp_path / "src/fisherhub/core/planted.py").write_text('def half(x: float) -> float:\n    return "x"\n')
    config = re.sub(r"(?m)^files = .*$", 'files = ["src/fisherhub/core"]', CONFIG.read_text())
    (tmp_path / "pyproject.toml").write_text(config)
    result = run("mypy", cwd=tmp_path)
    assert result.returncode == 1
    assert "planted.py:2: error: Incompatible return value type" in result.stdout
