"""Repos as the tests and benchmarks put them on the local Hub server, through the real client: a PEFT adapter
of a base model (``adapter_config.json`` and a card naming the base model and, optionally, its training
datasets) and a dataset repo of JSON lines; ``put_repo`` writes a repo straight into a server's store (``signed_adapter_files``: a signed adapter's files)."""

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


def put_repo(server, repo_id: str, files: dict[str, bytes], repo_type: str = "model", title: str = "files") -> str:
    """A commit of ``files`` (added to what the repo holds) straight into ``server``'s store, the repo made when
    missing: setup for thousands of repos, no request sent. Returns the commit id."""
    from fisherhub.testing.hub_memory import Repo

    with server.lock:
        repo = server.repos.setdefault((repo_type, repo_id), Repo(repo_type, repo_id))
        head = repo.refs["refs/heads/main"]
        repo.refs["refs/heads/main"] = oid = repo.add_commit(head, {**repo.commits[head].files, **files}, title)
    return oid


def signed_adapter_files(signature, base_model: str) -> dict[str, bytes]:
    """The files of an adapter of ``base_model`` signed with ``signature``, as ``fisherhub push`` lays them out:
    ``adapter_config.json``, the signature file, ``.fisher_signatures/index.json`` and a card with the block."""
    from fisherhub.hub import INDEX_PATH, signature_path
    from fisherhub.hub.cards import CARD_KEY, SIGNATURE_TAG
    from fisherhub.hub.listing import entry_for, render_listing

    path = signature_path(signature)
    entries = [entry_for(signature, path)]
    card = (
        f"---\nbase_model: {base_model}\nlibrary_name: peft\ntags: [{SIGNATURE_TAG}]\n"
        f"{CARD_KEY}: {json.dumps(entries)}\n---\n# an adapter of {base_model}\n"
    )
    return {
        "adapter_config.json": json.dumps({"base_model_name_or_path": base_model, "peft_type": "LORA"}).encode(),
        "README.md": card.encode(),
        path: signature.to_bytes(),
        INDEX_PATH: render_listing(entries),
    }
