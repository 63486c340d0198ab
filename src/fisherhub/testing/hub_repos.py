"""Repos as the tests and benchmarks put them on the local Hub server, through the real client: a PEFT adapter
of a base model (``adapter_config.json`` and a card naming the base model and, optionally, its training
datasets; with ``save_random_lora``'s files, weights that load), and a dataset repo of JSON lines; ``put_repo`` writes a repo straight into a server's store (``signed_adapter_files``: a signed adapter's files)."""

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
    model.save_pretrained(os.fspath(folder))
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


def publish_unsigned_world(api, base_model: str, model, tokenizer, folder: str | os.PathLike) -> dict[str, list[str]]:
    """Adapters of ``base_model`` (``model``, a tiny model, and ``tokenizer``) in every state ``fisherhub
    first-hour`` meets, by kind: ``signed`` (LoRA weights and a signature of its "apple" texts), ``card`` (its
    card names the dataset ``org/ds-sport``, of "football" texts), ``generation`` (LoRA weights, a card naming no
    data, or only a dataset that does not exist), ``broken`` (no weights; NaN weights). Local files under
    ``folder``."""
    import torch
    from safetensors.torch import load_file, save_file

    from fisherhub.hub.push import push_signature
    from fisherhub.pipeline.loop import sketch_texts

    folder = Path(folder)

    def lora(name: str, seed: int) -> Path:
        return save_random_lora(model, folder / name, seed, base_model)

    def texts(word: str) -> list[str]:
        return [f"{word} number {i} {word} again" for i in range(24)]

    signed = create_adapter(api, "org/signed", base_model, folder=lora("signed", 0))
    push_signature(sketch_texts(texts("apple"), model, tokenizer, m=64, metadata={"base_model": base_model}), signed)
    create_jsonl_dataset(api, "org/ds-sport", [{"text": t} for t in texts("football")])
    card = create_adapter(api, "org/card-signed", base_model, ["org/ds-sport"], folder=lora("card", 1))
    generation = [
        create_adapter(api, "org/gen-a", base_model, folder=lora("a", 2)),
        create_adapter(api, "org/gen-b", base_model, ["org/ds-missing"], folder=lora("b", 3)),
    ]
    nan = lora("nan", 9)
    weights = load_file(nan / "adapter_model.safetensors")
    save_file({k: torch.full_like(v, float("nan")) for k, v in weights.items()}, nan / "adapter_model.safetensors")
    broken = [
        create_adapter(api, "org/no-weights", base_model),
        create_adapter(api, "org/nan-weights", base_model, folder=nan),
    ]
    return {"signed": [signed], "card": [card], "generation": generation, "broken": broken}
