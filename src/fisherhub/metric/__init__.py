"""The `evaluate` metric ``fisher_alignment``, loaded by path or from a Space (never registered in evaluate's
own ``evaluate-metric`` namespace, which belongs to evaluate's maintainers):

- ``evaluate.load(metric_path())``: the module file inside the installed package;
- ``fisherhub install-metric [DIR]`` (``install_metric()``) copies it into a folder named ``fisher_alignment``
  (default ``$HF_HOME/fisherhub/fisher_alignment``), for ``evaluate.load("DIR/fisher_alignment")``: a path
  that outlives the environment, offline too;
- a project-owned Space: ``python scripts/push_metric_space.py --namespace ORG`` uploads
  ``hub_cards/evaluate_space/`` (card, Gradio app, requirements and this module) to the Space
  ``ORG/fisher_alignment``; then ``evaluate.load("ORG/fisher_alignment")`` loads it from the Hub.
"""

from __future__ import annotations

import os
from pathlib import Path

METRIC_NAME = "fisher_alignment"
#: the metric's ``MetricInfo`` links (pyproject.toml's [project.urls] has the same homepage): the package, its
#: source distribution, and the paper author's own implementation
HOMEPAGE = "https://pypi.org/project/fisherhub/"
CODEBASE_URLS = ("https://pypi.org/project/fisherhub/#files",)
REFERENCE_URLS = ("https://pypi.org/project/fishersketch/",)


def metric_path() -> str:
    """The metric module file inside the installed package.

    Returns:
        `str`: its path, for ``evaluate.load(metric_path())``.
    """
    return str(Path(__file__).with_name(f"{METRIC_NAME}.py"))


def default_metric_folder() -> Path:
    """``$HF_HOME/fisherhub/fisher_alignment``: where ``install_metric()`` copies the module by default."""
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "fisherhub" / METRIC_NAME


def install_metric(folder: str | os.PathLike | None = None) -> Path:
    """Copy the metric module into a folder, for ``evaluate.load(str(folder))``: a path that outlives the
    environment, offline too. Re-running it (e.g. after upgrading fisherhub) replaces the copy with the
    installed code.

    Args:
        folder (`str` or `os.PathLike`, *optional*):
            Where (default ``default_metric_folder()``); evaluate loads a folder by the module file named after
            it, so a folder not named ``fisher_alignment`` gets one of that name inside.

    Returns:
        `Path`: the folder holding ``fisher_alignment.py``.

    Raises:
        `OSError`: the folder cannot be created or written.
    """
    target = Path(folder) if folder is not None else default_metric_folder()
    if target.name != METRIC_NAME:
        target = target / METRIC_NAME
    target.mkdir(parents=True, exist_ok=True)
    module = target / f"{METRIC_NAME}.py"
    temporary = module.with_suffix(".py.tmp")
    temporary.write_bytes(Path(metric_path()).read_bytes())
    os.replace(temporary, module)
    return target


__all__ = [
    "CODEBASE_URLS",
    "HOMEPAGE",
    "METRIC_NAME",
    "REFERENCE_URLS",
    "default_metric_folder",
    "install_metric",
    "metric_path",
]
