"""Nearest datasets and adapters on the Hub: every signature of a base model, ranked by alignment with a target
("adapters trained on data like mine"). Collecting is Hub I/O; the ranking is ``fisherhub.selection.scoring.rank_nearest``."""

from __future__ import annotations

from fisherhub.core.errors import InputError
from fisherhub.core.signature import Signature
from fisherhub.hub.discovery import find_adapters, find_signed_datasets
from fisherhub.hub.read import list_signatures, load_signature
from fisherhub.selection.scoring import Neighbour, rank_nearest


def collect_signatures(base_model: str, *, sketch_id: str | None = None, token: str | None = None) -> dict[str, Signature]:
    """Every loadable signature of ``base_model`` (and ``sketch_id`` when given) in adapter repos and signed dataset
    repos, keyed by its reference (``SignatureInfo.location``, pinned to the commit listed)."""
    repos = [(snapshot.ref.repo_id, "model") for snapshot in find_adapters(base_model, token=token)]
    repos += [(repo, "dataset") for repo in find_signed_datasets(base_model, sketch_id=sketch_id, token=token)]
    found = {}
    for repo_id, repo_type in repos:
        for info in list_signatures(repo_id, repo_type, token=token):
            if info.problem is None and info.base_model == base_model and sketch_id in (None, info.sketch_id):
                found[info.location] = load_signature(info.location, token=token)
    return found


def nearest_signatures(target: Signature, base_model: str | None = None, *, limit: int | None = 10,
                       score: str = "fisher", token: str | None = None) -> list[Neighbour]:
    """The Hub's signatures nearest to ``target`` among those of its base model (``base_model`` or the target's
    ``base_model`` metadata) with its sketch id, nearest first (``rank_nearest``)."""
    base_model = base_model or target.metadata.get("base_model")
    if not base_model:
        raise InputError("the target signature records no base_model; pass base_model=")
    signatures = collect_signatures(base_model, sketch_id=target.sketch_id, token=token)
    if not signatures:
        raise InputError(f"no signature of {base_model} with sketch id {target.sketch_id} on the Hub; push some with "
                         "`fisherhub push`, or sketch the target with the spec the published ones use")
    return rank_nearest(target, signatures, limit=limit, score=score)
