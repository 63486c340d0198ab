"""The `evaluate` metric ``fisher_alignment`` and its registration in evaluate's modules cache.

``evaluate.load(metric_path())`` loads the module by path. ``evaluate.load("fisher_alignment")`` (the bare
name) resolves the canonical Hub namespace ``evaluate-metric/fisher_alignment`` and, when that fails
(offline with ``HF_EVALUATE_OFFLINE=1``, or not found), the newest module in

    $HF_MODULES_CACHE/evaluate_modules/metrics/evaluate-metric--fisher_alignment/<sha256 of the code>/

which ``install_metric()`` (``fisherhub install-metric``) writes. evaluate 0.4.6 logs "Using the latest cached
version of the module ..." whenever it takes a module from that cache (its fallback cannot tell an installed
copy from a stale download); the metric module drops that notice for itself once imported, so it shows on the
first load of a process only. ``evaluate.load(metric_path())`` (a local file) and
``evaluate.load("<org>/fisher_alignment")`` (a Space, online) log nothing.

A project-owned Space: ``python scripts/push_metric_space.py --namespace ORG`` uploads
``hub_cards/evaluate_space/`` (card, Gradio app, requirements and this module) to the Space
``ORG/fisher_alignment``; then ``evaluate.load("ORG/fisher_alignment")`` loads it from the Hub.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

METRIC_NAME = "fisher_alignment"
#: evaluate's canonical namespace for metrics; a bare name is looked up as ``evaluate-metric/<name>``.
CANONICAL_NAMESPACE = "evaluate-metric"
#: the metric's ``MetricInfo`` links (pyproject.toml's [project.urls] has the same homepage): the package, its
#: source distribution, and the paper author's own implementation
HOMEPAGE = "https://pypi.org/project/fisherhub/"
CODEBASE_URLS = ("https://pypi.org/project/fisherhub/#files",)
REFERENCE_URLS = ("https://pypi.org/project/fishersketch/",)


def metric_path() -> str:
    """Path of the metric module file, for ``evaluate.load(metric_path())``."""
    return str(Path(__file__).with_name(f"{METRIC_NAME}.py"))


def install_metric(modules_cache: str | os.PathLike | None = None) -> Path:
    """Register the metric in evaluate's modules cache so the bare name loads offline; return the module file.

    ``modules_cache`` defaults to evaluate's ``HF_MODULES_CACHE`` (``$HF_HOME/modules``); evaluate reads it
    when imported, so a custom folder also needs ``HF_MODULES_CACHE`` set to it before ``import evaluate``.
    Re-running it (e.g. after upgrading fisherhub) makes the installed code the newest cached version,
    the one evaluate picks.
    """
    from evaluate import config
    from evaluate.loading import files_to_hash

    source = metric_path()
    root = Path(modules_cache if modules_cache is not None else config.HF_MODULES_CACHE)
    dynamic_modules = root / config.MODULE_NAME_FOR_DYNAMIC_MODULES
    module_folder = dynamic_modules / "metrics" / f"{CANONICAL_NAMESPACE}--{METRIC_NAME}"
    code_folder = module_folder / files_to_hash([source])
    code_folder.mkdir(parents=True, exist_ok=True)
    for package in (root, dynamic_modules, dynamic_modules / "metrics", module_folder, code_folder):
        (package / "__init__.py").touch(exist_ok=True)
    target = code_folder / f"{METRIC_NAME}.py"
    temporary = target.with_suffix(".py.tmp")
    temporary.write_bytes(Path(source).read_bytes())
    os.replace(temporary, target)  # a fresh mtime: evaluate loads the most recently modified version
    record = {"original file path": source, "local file path": str(target)}
    target.with_suffix(".json").write_text(json.dumps(record), encoding="utf-8")
    return target


__all__ = ["CANONICAL_NAMESPACE", "CODEBASE_URLS", "HOMEPAGE", "METRIC_NAME", "REFERENCE_URLS", "install_metric",
           "metric_path"]
