"""Nearest datasets and adapters on the Hub: every signature of a base model (``hub.nearest``), ranked by
alignment with a target (``analysis.nearest``)."""

from __future__ import annotations

from fisherhub.analysis.nearest import Neighbour, rank_nearest
from fisherhub.core.errors import InputError
from fisherhub.core.signature import Signature
from fisherhub.hub.nearest import collect_signatures


def nearest_signatures(
    target: Signature,
    base_model: str | None = None,
    *,
    limit: int | None = 10,
    score: str = "fisher",
    token: str | None = None,
) -> list[Neighbour]:
    """The Hub's signatures nearest to ``target`` among those of its base model (``base_model`` or the target's
    ``base_model`` metadata) with its sketch id, nearest first (``rank_nearest``)."""
    base_model = base_model or target.metadata.get("base_model")
    if not base_model:
        raise InputError("the target signature records no base_model; pass base_model=")
    signatures = collect_signatures(base_model, sketch_id=target.sketch_id, token=token)
    if not signatures:
        raise InputError(
            f"no signature of {base_model} with sketch id {target.sketch_id} on the Hub; push some with "
            "`fisherhub push`, or sketch the target with the spec the published ones use"
        )
    return rank_nearest(target, signatures, limit=limit, score=score)
