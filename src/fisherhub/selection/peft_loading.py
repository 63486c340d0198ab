"""Loading the chosen adapters with ``peft`` onto the base model (loaded by id when not given)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fisherhub.core.errors import InputError

if TYPE_CHECKING:
    from fisherhub.selection.results import RankedCandidate


def load_base_model(base_model: str | None):
    """(model, tokenizer) of ``base_model`` (a Hub id or local folder)."""
    from fisherhub.defaults import load_model_and_tokenizer

    if base_model is None:
        raise InputError(
            "the base model is unknown: pass base_model= (a Hub id or local folder) or model= and tokenizer="
        )
    return load_model_and_tokenizer(base_model)


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


def load_adapters(ranking: Sequence[RankedCandidate], model, base_model: str | None, top_k: int | None):
    """A ``peft.PeftModel`` on ``model`` (None: ``base_model`` loaded) with the ``top_k`` (default 1) best rows'
    adapters under ``adapter_names``, the best one active."""
    from peft import PeftModel

    count = 1 if top_k is None else top_k
    if not isinstance(count, int) or count < 1:
        raise InputError(f"top_k must be a positive int, got {top_k!r}")
    rows = ranking[:count]
    datasets_only = [row.candidate for row in rows if row.adapter is None]
    if datasets_only:
        raise InputError(
            f"dataset repos, not adapters, ranked among the top {count}: {', '.join(datasets_only)}; nothing to "
            "load for them. Pass adapter repos (or local adapter folders) as candidates, or a smaller top_k"
        )
    if model is None:
        model = load_base_model(base_model)[0]
    names = adapter_names([row.candidate for row in rows])
    first = rows[0].adapter
    peft_model = PeftModel.from_pretrained(model, first.path, adapter_name=names[0], revision=first.revision)
    for row, name in zip(rows[1:], names[1:]):
        peft_model.load_adapter(row.adapter.path, adapter_name=name, revision=row.adapter.revision)
    peft_model.set_adapter(names[0])
    return peft_model.eval()
