"""Find repos with signatures for a base model: adapters (by the Hub's base-model tag) and dataset repos
(by the signature tag, then their cards' ``fisher_signatures`` block)."""

from __future__ import annotations

from huggingface_hub import HfApi

from fisherhub.hub.cards import SIGNATURE_TAG, entry_matches, signature_entries
from fisherhub.hub.errors import CardError


def find_adapters(base_model: str, *, token: str | None = None) -> list[str]:
    """Ids of adapter repos of ``base_model`` (tagged ``base_model:adapter:<id>`` by the Hub from their card)."""
    return [model.id for model in HfApi(token=token).list_models(filter=f"base_model:adapter:{base_model}")]


def find_signed_datasets(base_model: str, *, sketch_id: str | None = None, token: str | None = None) -> list[str]:
    """Ids of dataset repos whose card lists a signature under ``base_model`` (and ``sketch_id`` when given)."""
    found = []
    for dataset in HfApi(token=token).list_datasets(filter=SIGNATURE_TAG, expand=["cardData"]):
        try:
            entries = signature_entries(dataset.card_data, dataset.id)
        except CardError:  # a malformed card lists nothing that can be loaded
            continue
        if any(entry_matches(entry, base_model, sketch_id) for entry in entries):
            found.append(dataset.id)
    return found
