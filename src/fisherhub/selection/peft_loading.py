"""Loading the chosen adapters with ``peft`` onto the base model (loaded by id when not given)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fisherhub.core.errors import InputError

if TYPE_CHECKING:
    from fisherhub.core.signature import Signature
    from fisherhub.selection.rows import RankedCandidate

#: the ``add_weighted_adapter`` combinations ``Selection.mix`` offers
MIX_TYPES = ("cat", "linear")


def adapter_names(candidates: Sequence[str]) -> list[str]:
    """Distinct adapter names for ``peft`` (identifiers: ``org/lora-a`` -> ``lora_a``, repeats get ``_2``...)."""
    names: list[str] = []
    for candidate in candidates:
        base = re.sub(r"\W+", "_", Path(candidate.rstrip("/")).name).strip("_") or "adapter"
        name, repeat = base, 1
        while name in names:
            repeat += 1
            name = f"{base}_{repeat}"
        names.append(name)
    return names


def check_top_k(top_k: int | None) -> int:
    """``top_k`` (default 1), refused unless a positive int."""
    count = 1 if top_k is None else top_k
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise InputError(f"top_k must be a positive int, got {top_k!r}")
    return count


def load_adapters(
    ranking: Sequence[RankedCandidate],
    model,
    base_model: str | None,
    top_k: int | None,
    signature: Signature | None = None,
    token: str | None = None,
):
    """A ``peft.PeftModel`` on ``model`` (None: ``base_model`` loaded, at what ``signature`` records) with the
    ``top_k`` (default 1) best rows' adapters under ``adapter_names``, the best one active; each from its repo
    at the commit ranked (and its subfolder), with ``token``."""
    from peft import PeftModel

    from fisherhub.lm.loading import load_base_model

    count = check_top_k(top_k)
    rows = ranking[:count]
    adapters = [row.adapter for row in rows if row.adapter is not None]
    datasets_only = [row.candidate for row in rows if row.adapter is None]
    if datasets_only:
        raise InputError(
            f"dataset repos, not adapters, ranked among the top {count}: {', '.join(datasets_only)}; nothing to "
            "load for them. Pass adapter repos (or local adapter folders) as candidates, or a smaller top_k"
        )
    if model is None:
        model = load_base_model(base_model, signature, token)[0]
    names = adapter_names([row.candidate for row in rows])
    peft_model = PeftModel.from_pretrained(
        model, adapters[0].path, adapter_name=names[0], **adapters[0].hub_kwargs(token)
    )
    for adapter, name in zip(adapters[1:], names[1:]):
        peft_model.load_adapter(adapter.path, adapter_name=name, **adapter.hub_kwargs(token))
    peft_model.set_adapter(names[0])
    return peft_model.eval()
