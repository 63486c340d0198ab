"""Repos as the tests and benchmarks put them on the local Hub server, through the real client: a PEFT adapter
of a base model (``adapter_config.json`` and a card naming the base model and, optionally, its training
datasets; with ``save_random_lora``'s files, weights that load), and a dataset repo of JSON lines."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

#: the modules ``save_random_lora`` adapts (those of the tiny Llama of ``tiny_models``)
LORA_MODULES = ("q_proj", "v_proj")


def save_random_lora(base, folder: str | os.PathLike, seed: int, base_model: str, rank: int = 4) -> Path:
    """A LoRA adapter of ``base`` (a copy of it is wrapped) with random A and B (a nonzero update, no training),
    its config naming ``base_model``, saved to ``folder``."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(LORA_MODULES), init_lora_weights=False)
    model = get_peft_model(copy.deepcopy(base), config)
    model.peft_config["default"].base_model_name_or_path = base_model
    model.save_pretrained(folder)
    return Path(folder)


def create_adapter(
    api,
    repo_id: str,
    base_model: str,
    datasets: list[str] | None = None,
    card: dict | None = None,
    folder: str | os.PathLike | None = None,
) -> str:
    """An adapter repo of ``base_model`` without signatures; its card names ``datasets`` when given, and has the
    fields of ``card`` (e.g. ``license``, ``tags``); ``folder``: the adapter's saved files (``save_random_lora``),
    else a config alone."""
    api.create_repo(repo_id)
    named = f"datasets: {json.dumps(datasets)}\n" if datasets else ""
    named += "".join(f"{key}: {json.dumps(value)}\n" for key, value in (card or {}).items())
    text = f"---\nbase_model: {base_model}\nlibrary_name: peft\n{named}---\n# {repo_id}\n"
    from huggingface_hub import CommitOperationAdd

    saved = {} if folder is None else {p.name: p.read_bytes() for p in Path(folder).iterdir() if p.name != "README.md"}
    saved.setdefault("adapter_config.json", json.dumps({"base_model_name_or_path": base_model}).encode())
    operations = [CommitOperationAdd(name, data) for name, data in {**saved, "README.md": text.encode()}.items()]
    api.create_commit(repo_id, operations, commit_message="adapter")
    return repo_id


def create_jsonl_dataset(api, repo_id: str, rows: list[dict]) -> str:
    """A dataset repo holding ``rows`` as ``train.jsonl``."""
    from huggingface_hub import CommitOperationAdd

    api.create_repo(repo_id, repo_type="dataset")
    data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    api.create_commit(repo_id, [CommitOperationAdd("train.jsonl", data)], repo_type="dataset", commit_message="data")
    return repo_id
