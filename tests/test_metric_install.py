"""What ``fisherhub install-metric`` installs: ``evaluate.load("fisher_alignment")`` by its bare name in a fresh
process with a fresh HF_HOME, offline and online against the local Hub server (which holds no
``evaluate-metric/fisher_alignment``), laid out as evaluate lays out a download of that module; the version it
names, a stale copy's warning and its replacement; ``--uninstall``; the folder form ``install-metric DIR``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_metric import _COMPUTE, _assert_matches_library, _fresh_env, _python, _result, signature_files  # noqa: F401

from fisherhub import __version__
from fisherhub.metric import (
    METRIC_NAME,
    install_metric,
    installed_copies,
    installed_version,
    metric_path,
    uninstall_metric,
)

REPO = Path(__file__).resolve().parents[1]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1"}
#: where evaluate keeps the canonical module under HF_HOME
CACHED = Path("modules", "evaluate_modules", "metrics", f"evaluate-metric--{METRIC_NAME}")
STALE_WARNING = "is a stale copy installed by fisherhub"


def _fisherhub(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python -m fisherhub ARGS`` in a fresh process (this tree's code)."""
    env = {**env, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-m", "fisherhub", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def installed_copies_under(home: Path) -> list[Path]:
    """The module files in the hash folders of evaluate's copy of the canonical module under HF_HOME ``home``."""
    return sorted((home / CACHED).glob(f"*/{METRIC_NAME}.py"))


def _bare_load(home: Path, pairs: list[tuple[str, str]], **extra: str) -> dict:
    """``evaluate.load("fisher_alignment")`` and its ``compute`` in a fresh process with HF_HOME ``home``."""
    completed = _python(_COMPUTE, METRIC_NAME, json.dumps(pairs), env=_fresh_env(home, **extra))
    result = _result(completed)
    assert STALE_WARNING not in completed.stderr
    return result


@pytest.mark.slow
def test_the_bare_name_loads_after_install_metric_offline_and_online(hub, tmp_path, signature_files):  # noqa: F811
    """Issue 32's sequence: in a fresh HF_HOME the bare name fails (importing fisherhub and loading the metric by
    path install nothing); after ``fisherhub install-metric`` it loads offline and, against a Hub without
    ``evaluate-metric/fisher_alignment``, online, computing what ``fisherhub.alignment`` computes;
    ``--uninstall`` takes it away again."""
    home = tmp_path / "hf_home"
    pairs = [
        (signature_files["first"], signature_files["second"]),
        (signature_files["second"], signature_files["second"]),
    ]
    before = _python(
        "import evaluate, fisherhub, fisherhub.cli, fisherhub.metric\n"
        "from fisherhub.metric import fisher_alignment\n"
        "evaluate.load(fisherhub.metric_path())\n"
        f"evaluate.load({METRIC_NAME!r})",
        env=_fresh_env(home, **OFFLINE),
    )
    assert before.returncode != 0 and "FileNotFoundError: Couldn't find a module script" in before.stderr
    assert not (home / CACHED).exists()  # (the path load made evaluate's copy of its own, metrics/fisher_alignment)

    installed = _fisherhub("install-metric", env=_fresh_env(home))
    assert f"load it with: evaluate.load({METRIC_NAME!r})" in installed.stdout
    assert f"of fisherhub {__version__}" in installed.stdout and "replaced" not in installed.stdout

    offline = _bare_load(home, pairs, **OFFLINE)
    hub.requests.clear()
    online = _bare_load(home, pairs, HF_ENDPOINT=hub.endpoint)
    assert ("space", f"evaluate-metric/{METRIC_NAME}") not in hub.repos
    assert any(f"evaluate-metric/{METRIC_NAME}" in path for _, path, _ in hub.requests)  # the Hub was asked first
    for loaded in (offline, online):
        assert loaded["name"] == METRIC_NAME and Path(loaded["file"]).parent.parent == home / CACHED
        _assert_matches_library(loaded["results"], pairs)
        assert loaded["results"]["fisher_alignment"][1] == 1.0 and loaded["results"]["stderr"][1] == 0.0
        assert installed_version(loaded["file"]) == __version__

    removed = _fisherhub("install-metric", "--uninstall", env=_fresh_env(home))
    assert f"removed {online['file']}" in removed.stdout and not (home / CACHED).exists()


@pytest.mark.slow
def test_the_installed_copy_is_laid_out_as_evaluates_download_of_it(hub, hf_api, tmp_path):
    """evaluate downloads the same module from a Space ``evaluate-metric/fisher_alignment`` into one HF_HOME;
    install-metric writes another: the same files (modes included) under ``modules/``, the same module bytes in the
    same hash folder, the same metadata keys and module path."""
    installed_home, downloaded_home = tmp_path / "installed", tmp_path / "downloaded"
    _fisherhub("install-metric", env=_fresh_env(installed_home))
    [module] = installed_copies_under(installed_home)
    hf_api.create_repo(f"evaluate-metric/{METRIC_NAME}", repo_type="space", space_sdk="gradio")
    hf_api.upload_file(
        path_or_fileobj=module.read_bytes(),
        path_in_repo=f"{METRIC_NAME}.py",
        repo_id=f"evaluate-metric/{METRIC_NAME}",
        repo_type="space",
    )
    downloaded = _python(
        f"import evaluate; evaluate.load({METRIC_NAME!r})",
        env=_fresh_env(downloaded_home, HF_ENDPOINT=hub.endpoint),
    )
    assert downloaded.returncode == 0, downloaded.stderr[-3000:]
    assert "Using the latest cached version" not in downloaded.stderr  # evaluate downloaded it, from the Space

    def layout(home: Path) -> dict[str, str]:
        root = home / "modules"
        return {
            str(path.relative_to(root)): oct(path.stat().st_mode)
            for path in root.rglob("*")
            if "__pycache__" not in path.parts
        }

    assert layout(installed_home) == layout(downloaded_home)
    [evaluates] = (downloaded_home / CACHED).glob(f"*/{METRIC_NAME}.py")
    assert evaluates.relative_to(downloaded_home) == module.relative_to(installed_home)
    assert evaluates.read_bytes() == module.read_bytes()
    ours, theirs = (json.loads(path.with_suffix(".json").read_text()) for path in (module, evaluates))
    assert sorted(ours) == sorted(theirs) == ["local file path", "original file path"]
    assert (ours["local file path"], theirs["local file path"]) == (str(module), str(evaluates))
    assert ours["original file path"] == metric_path()


@pytest.mark.slow
def test_a_stale_copy_warns_when_loaded_and_install_metric_replaces_it(
    tmp_path,
    signature_files,  # noqa: F811
    monkeypatch,
    capsys,
):
    """A copy installed by fisherhub 0.1.0 loads with a warning naming both versions and the command; the command
    says it replaces it, and leaves one copy, of this version."""
    import evaluate.config

    import fisherhub.metric.install as install
    from fisherhub.cli import main

    home = tmp_path / "hf_home"
    monkeypatch.setattr(evaluate.config, "HF_MODULES_CACHE", home / "modules")  # what HF_HOME=home gives
    monkeypatch.setattr(install, "library_version", lambda: "0.1.0")
    path = list(sys.path)
    stale = install_metric()
    assert sys.path == path  # installing leaves this process's imports alone (evaluate_modules is found as before)
    assert installed_copies_under(home) == [stale] and installed_version(stale) == "0.1.0"
    pairs = [(signature_files["first"], signature_files["second"])]
    loaded = _python(_COMPUTE, METRIC_NAME, json.dumps(pairs), env=_fresh_env(home, **OFFLINE))
    assert f"{STALE_WARNING} 0.1.0, and fisherhub {__version__} is installed" in loaded.stderr
    assert "run `fisherhub install-metric` to replace it" in loaded.stderr
    _assert_matches_library(_result(loaded)["results"], pairs)  # a warning, not a failure

    monkeypatch.undo()
    monkeypatch.setattr(evaluate.config, "HF_MODULES_CACHE", home / "modules")
    assert main(["install-metric"]) == 0
    assert f"replaced a stale copy installed by fisherhub 0.1.0: {stale}" in capsys.readouterr().out
    [current] = installed_copies_under(home)
    assert current != stale and installed_version(current) == __version__
    assert main(["install-metric"]) == 0 and "replaced" not in capsys.readouterr().out
    assert main(["install-metric", "--uninstall"]) == 0 and not (home / CACHED).exists()
    assert main(["install-metric", "--uninstall"]) == 0 and "nothing to remove" in capsys.readouterr().out


def test_install_into_a_folder_names_the_version_and_uninstall_removes_only_that(tmp_path):
    """A folder not named after the metric gets one inside; the copy is the package's module with the version
    that wrote it; re-installing replaces it; uninstalling removes it and leaves anything else."""
    module = install_metric(tmp_path)
    assert module == tmp_path / METRIC_NAME / f"{METRIC_NAME}.py" and install_metric(module.parent) == module
    package = Path(metric_path()).read_text().splitlines()
    copy = module.read_text().splitlines()
    assert [line for line in copy if line not in package] == [f'INSTALLED_BY_FISHERHUB = "{__version__}"']
    assert installed_version(metric_path()) is None and installed_copies(tmp_path) == {module: __version__}
    module.write_text("stale = True\n")
    assert installed_copies(tmp_path) == {}  # not a copy install-metric wrote
    install_metric(tmp_path)
    assert installed_version(module) == __version__
    assert uninstall_metric(tmp_path) == [module] and not module.parent.exists()
    assert uninstall_metric(tmp_path) == []
    own = tmp_path / "mine" / METRIC_NAME
    own.mkdir(parents=True)
    (own / f"{METRIC_NAME}.py").write_text("# my own\n")
    assert uninstall_metric(own) == [] and (own / f"{METRIC_NAME}.py").is_file()
