"""The `evaluate` metric ``fisher_alignment``, loaded by its bare name, by path or from a Space:

- ``fisherhub install-metric`` (``install_metric()``) installs it as evaluate keeps a downloaded canonical module
  (``metric.install``), for ``evaluate.load("fisher_alignment")``, offline too; ``install-metric DIR`` into a
  folder, for ``evaluate.load("DIR/fisher_alignment")``; ``install-metric --uninstall`` removes it. An installed
  copy names the fisherhub version that wrote it and warns when loaded under another one;
- ``evaluate.load(metric_path())``: the module file inside the installed package (nothing to install);
- a Space: ``python scripts/push_metric_space.py --namespace ORG`` uploads ``hub_cards/evaluate_space/`` (card,
  Gradio app, requirements and this module) to the Space ``ORG/fisher_alignment``; then
  ``evaluate.load("ORG/fisher_alignment")`` loads it from the Hub. The same folder is what a pull request to the
  ``evaluate-metric`` organisation would carry (the Space ``evaluate-metric/fisher_alignment``, which evaluate
  would then load for the bare name, ahead of an installed copy).
"""

from __future__ import annotations

from fisherhub.metric.install import (
    METRIC_NAME,
    cached_metric_folder,
    install_metric,
    installed_copies,
    installed_version,
    metric_path,
    uninstall_metric,
)

#: the metric's ``MetricInfo`` links (pyproject.toml's [project.urls] has the same homepage): the package, its
#: source distribution, and the paper author's own implementation
HOMEPAGE = "https://pypi.org/project/fisherhub/"
CODEBASE_URLS = ("https://pypi.org/project/fisherhub/#files",)
REFERENCE_URLS = ("https://pypi.org/project/fishersketch/",)

__all__ = [
    "CODEBASE_URLS",
    "HOMEPAGE",
    "METRIC_NAME",
    "REFERENCE_URLS",
    "cached_metric_folder",
    "install_metric",
    "installed_copies",
    "installed_version",
    "metric_path",
    "uninstall_metric",
]
