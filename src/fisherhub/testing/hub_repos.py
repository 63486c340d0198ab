"""Repos as the tests and benchmarks put them on the local Hub server, through the real client: a PEFT adapter
of a base model (``adapter_config.json`` and a card naming the base model and, optionally, its training
datasets) and a dataset repo of JSON lines."""

from __future__ import annotations

import json


def create_adapter(
    api, repo_id: str, base_model: str, datasets: list[str] | None = None, card: dict | None = None
) -> str:
    """An adapter repo of ``base_model`` without signatures; its card names ``datasets`` when given, and has the
    fields of ``card`` (e.g. ``license``, ``tags``)."""
    api.create_repo(repo_id)
    named = f"datasets: {json.dumps(datasets)}\n" if datasets else ""
    named += "".join(f"{key}: {json.dumps(value)}\n" for key, value in (card or {}).items())
    text = f"---\nbase_model: {base_model}\nlibrary_name: peft\n{named}---\n# {repo_id}\n"
    from huggingface_hub import CommitOperationAdd

    api.create_commit(
        repo_id,
        [
            CommitOperationAdd("adapter_config.json", json.dumps({"base_model_name_or_path": base_model}).encode()),
            CommitOperationAdd("README.md", text.encode()),
        ],
        commit_message="adapter",
    )
    return repo_id


def create_jsonl_dataset(api, repo_id: str, rows: list[dict]) -> str:
    """A dataset repo holding ``rows`` as ``train.jsonl``."""
    from huggingface_hub import CommitOperationAdd

    api.create_repo(repo_id, repo_type="dataset")
    data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    api.create_commit(repo_id, [CommitOperationAdd("train.jsonl", data)], repo_type="dataset", commit_message="data")
    return repo_id
