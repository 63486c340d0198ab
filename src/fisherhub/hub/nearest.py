"""Every signature of a base model on the Hub, the candidates of "adapters trained on data like mine" (Hub I/O;
the ranking is ``fisherhub.analysis.nearest.rank_nearest``, the two together ``fisherhub.selection.nearest``)."""

from __future__ import annotations

import warnings

from fisherhub.core.errors import FisherHubError
from fisherhub.core.signature import Signature
from fisherhub.hub.discovery import find_adapters, find_signed_datasets
from fisherhub.hub.read import list_signatures, load_signature


def collect_signatures(
    base_model: str, *, sketch_id: str | None = None, token: str | None = None
) -> dict[str, Signature]:
    """Every loadable signature of ``base_model`` (and ``sketch_id`` when given) in adapter repos and signed dataset
    repos, keyed by its reference (``SignatureInfo.location``, pinned to the commit listed); a file the loader
    refuses is left out with a warning."""
    repos = [(snapshot.ref.repo_id, "model") for snapshot in find_adapters(base_model, token=token)]
    repos += [(repo, "dataset") for repo in find_signed_datasets(base_model, sketch_id=sketch_id, token=token)]
    found = {}
    for repo_id, repo_type in repos:
        for info in list_signatures(repo_id, repo_type, token=token):
            if info.problem is None and info.base_model == base_model and sketch_id in (None, info.sketch_id):
                try:
                    found[info.location] = load_signature(info.location, token=token)
                except FisherHubError as exc:  # a file its own header contradicts: refused, the others kept
                    warnings.warn(f"{info.location} left out: {exc}", stacklevel=2)
    return found
