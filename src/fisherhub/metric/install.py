"""Installed copies of the metric module, each naming the fisherhub version that wrote it.

``install_metric()`` puts the module where ``evaluate.load("fisher_alignment")`` finds it by its bare name:
evaluate 0.4.6's ``evaluation_module_factory`` looks for the canonical module ``evaluate-metric/NAME`` on the
Hub, and when the Hub has none or is offline loads the newest copy it keeps of one it downloaded
(``CachedEvaluationModuleFactory``). The copy is laid out as ``_create_importable_file`` lays out a download,
under ``HF_MODULES_CACHE`` (default ``$HF_HOME/modules``)::

    __init__.py
    evaluate_modules/__init__.py
    evaluate_modules/metrics/__init__.py
    evaluate_modules/metrics/evaluate-metric--fisher_alignment.lock           (the lock of the folder below)
    evaluate_modules/metrics/evaluate-metric--fisher_alignment/__init__.py
    evaluate_modules/metrics/evaluate-metric--fisher_alignment/<hash>/__init__.py
    evaluate_modules/metrics/evaluate-metric--fisher_alignment/<hash>/fisher_alignment.py
    evaluate_modules/metrics/evaluate-metric--fisher_alignment/<hash>/fisher_alignment.json

``<hash>`` is evaluate's ``files_to_hash`` of the module (64 hex digits: the folders evaluate considers), the
JSON its ``{"original file path", "local file path"}``; of several hash folders evaluate loads the one whose
module was modified last. ``install_metric(DIR)`` writes the module into a folder instead, for
``evaluate.load("DIR/fisher_alignment")``. In both, the module's ``INSTALLED_BY_FISHERHUB`` names the version
that wrote it (a copy of another version warns when loaded); ``uninstall_metric`` removes exactly these copies.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path

from fisherhub.core.version import library_version

METRIC_NAME = "fisher_alignment"
#: the Hub namespace whose modules ``evaluate.load(NAME)`` takes for a bare NAME (evaluate's own metrics)
CANONICAL_NAMESPACE = "evaluate-metric"
#: the module's line naming the fisherhub version of an installed copy (None in the package itself)
_STAMP = re.compile(r"^INSTALLED_BY_FISHERHUB = (None|\"([^\"\n]*)\")$", flags=re.MULTILINE)


def metric_path() -> str:
    """The metric module file inside the installed package.

    Returns:
        `str`: its path, for ``evaluate.load(metric_path())``.
    """
    return str(Path(__file__).with_name(f"{METRIC_NAME}.py"))


def installed_version(module: str | os.PathLike) -> str | None:
    """The fisherhub version that installed the module file ``module``; None for one it did not install (the
    package's own, a download, another file)."""
    try:
        match = _STAMP.search(Path(module).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
    return match.group(2) if match else None


def _stamped_module(version: str) -> str:
    """The package's module, its ``INSTALLED_BY_FISHERHUB`` set to ``version``."""
    source = Path(metric_path()).read_text(encoding="utf-8")
    stamped, count = _STAMP.subn(f"INSTALLED_BY_FISHERHUB = {json.dumps(version)}", source)
    if count != 1:
        raise RuntimeError(f"{metric_path()} names no INSTALLED_BY_FISHERHUB line: the package is damaged")
    return stamped


def cached_metric_folder() -> Path:
    """``HF_MODULES_CACHE/evaluate_modules/metrics/evaluate-metric--fisher_alignment``: the folder evaluate
    keeps its downloads of the canonical module in (``HF_MODULES_CACHE`` as evaluate reads it when imported)."""
    from evaluate import config

    return (
        Path(config.HF_MODULES_CACHE)
        / config.MODULE_NAME_FOR_DYNAMIC_MODULES
        / "metrics"
        / f"{CANONICAL_NAMESPACE}--{METRIC_NAME}"
    )


def installed_copies(folder: str | os.PathLike | None = None) -> dict[Path, str]:
    """The copies ``install_metric(folder)`` wrote (a download or a file of one's own is none of them).

    Args:
        folder (`str` or `os.PathLike`, *optional*):
            As for ``install_metric``; default: evaluate's modules cache.

    Returns:
        `dict[Path, str]`: each copy's module file -> the fisherhub version that wrote it.
    """
    modules = (
        [_metric_folder(folder) / f"{METRIC_NAME}.py"]
        if folder is not None
        else sorted(cached_metric_folder().glob(f"*/{METRIC_NAME}.py"))
    )
    return {module: version for module in modules if (version := installed_version(module)) is not None}


def _metric_folder(folder: str | os.PathLike) -> Path:
    """evaluate loads a folder by the module file named after it: a folder of another name gets one inside."""
    target = Path(folder)
    return target if target.name == METRIC_NAME else target / METRIC_NAME


def install_metric(folder: str | os.PathLike | None = None) -> Path:
    """Install the metric module, naming this fisherhub's version; an installed copy (e.g. of an older
    fisherhub) is replaced. Nothing else writes it: not ``import fisherhub``, not loading the metric.

    Args:
        folder (`str` or `os.PathLike`, *optional*):
            None: into evaluate's modules cache, laid out as evaluate lays out a downloaded canonical module,
            for ``evaluate.load("fisher_alignment")`` (offline too, and online where the Hub has no
            ``evaluate-metric/fisher_alignment``). A folder: the module file into it (into a
            ``fisher_alignment`` folder inside, unless it is named so), for ``evaluate.load("DIR/fisher_alignment")``.

    Returns:
        `Path`: the installed module file.

    Raises:
        `OSError`: the folder cannot be created or written.
    """
    text = _stamped_module(library_version())
    if folder is not None:
        module = _metric_folder(folder) / f"{METRIC_NAME}.py"
        module.parent.mkdir(parents=True, exist_ok=True)
        temporary = module.with_suffix(".py.tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, module)
        return module
    return _install_in_modules_cache(text)


def _install_in_modules_cache(text: str) -> Path:
    """``text`` as evaluate's copy of the canonical module (the module docstring's layout), under evaluate's
    lock of the folder; the hash folders of earlier installs are removed, the new one is renamed into place."""
    from evaluate.loading import files_to_hash
    from filelock import FileLock

    folder = cached_metric_folder()
    folder.mkdir(parents=True, exist_ok=True)
    # the packages above it, as evaluate's init_hf_modules / init_dynamic_modules make them (without putting
    # HF_MODULES_CACHE on this process's sys.path, as they do: evaluate does that when it loads a module)
    for package in (folder.parents[2], folder.parents[1], folder.parent):
        (package / "__init__.py").touch(exist_ok=True)
    with FileLock(f"{folder}.lock"):
        (folder / "__init__.py").touch(exist_ok=True)
        for module in installed_copies():
            shutil.rmtree(module.parent)
        staging = folder / f".installing-{os.getpid()}"  # not 64 characters: evaluate never loads it
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            (staging / "__init__.py").touch()
            (staging / f"{METRIC_NAME}.py").write_text(text, encoding="utf-8")
            hashed = folder / files_to_hash([str(staging / f"{METRIC_NAME}.py")])
            module = hashed / f"{METRIC_NAME}.py"
            meta = {"original file path": metric_path(), "local file path": str(module)}
            (staging / f"{METRIC_NAME}.json").write_text(json.dumps(meta), encoding="utf-8")
            if hashed.exists():  # the same code, downloaded: this copy replaces it
                shutil.rmtree(hashed)
            os.replace(staging, hashed)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return module


def uninstall_metric(folder: str | os.PathLike | None = None) -> list[Path]:
    """Remove the copies ``install_metric(folder)`` wrote (``installed_copies``), and their folder when nothing
    else is left in it; evaluate's own downloads and other files stay.

    Args:
        folder (`str` or `os.PathLike`, *optional*):
            As for ``install_metric``; default: evaluate's modules cache.

    Returns:
        `list[Path]`: the module files removed (empty when none was installed).

    Raises:
        `OSError`: a copy cannot be removed.
    """
    from filelock import FileLock

    target = _metric_folder(folder) if folder is not None else cached_metric_folder()
    if not target.is_dir():
        return []
    with FileLock(f"{target}.lock") if folder is None else contextlib.nullcontext():
        removed = list(installed_copies(folder))
        for module in removed:
            if folder is not None:
                module.unlink()
            else:
                shutil.rmtree(module.parent)
        if removed and {path.name for path in target.iterdir()} <= {"__init__.py", "__pycache__"}:
            shutil.rmtree(target)
    if removed and folder is None and not target.exists():
        Path(f"{target}.lock").unlink(missing_ok=True)
    return removed
