"""Pinned provenance: the commits of the base model and of the dataset a signature was made from, the dataset's
full Hub id, a relative local path never published as a Hub link, and ``load_base_model`` at the recorded
revision with a token (all against the local Hub server)."""

from __future__ import annotations

import json

import torch
from huggingface_hub import HfApi
from fisherhub.testing.tiny_models import saved_tiny_model, tiny_causal_lm

from fisherhub.hub import push_signature
from fisherhub.lm.loading import load_model_and_tokenizer, model_provenance
from fisherhub.pipeline.loop import sketch_dataset
from fisherhub.lm.loading import load_base_model

TEXTS = [f"the {word} sat on mat {i}." for i, word in enumerate(["cat", "dog", "owl", "fox"] * 6)]


def _jsonl(texts) -> bytes:
    return "".join(json.dumps({"text": text}) + "\n" for text in texts).encode()


def test_base_model_commit_is_recorded_and_loaded_again(hub, hf_api, hf_hub_cache, tmp_path):
    import datasets

    hf_api.create_repo("org/tiny")
    first = hf_api.upload_folder(
        folder_path=str(saved_tiny_model(tmp_path / "v1", "llama", False, 64)), repo_id="org/tiny"
    )
    model, tokenizer = load_model_and_tokenizer("org/tiny")
    provenance = model_provenance("org/tiny", model)
    assert provenance.revision == first.oid  # transformers 5 has no config._commit_hash: resolved from the cache
    signature = sketch_dataset(
        datasets.Dataset.from_dict({"text": TEXTS}), model, tokenizer, m=64, metadata=provenance.as_metadata()
    )
    assert signature.metadata["base_model_revision"] == first.oid
    changed = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64)
    with torch.no_grad():
        changed.model.embed_tokens.weight.add_(1.0)
    changed.save_pretrained(tmp_path / "v2")
    tokenizer.save_pretrained(tmp_path / "v2")
    second = hf_api.upload_folder(folder_path=str(tmp_path / "v2"), repo_id="org/tiny")
    assert second.oid != first.oid
    again, _ = load_base_model("org/tiny", signature, token="hf_fisherhub_local_test_token")
    latest, _ = load_model_and_tokenizer("org/tiny")
    weight = "model.embed_tokens.weight"
    assert torch.equal(again.state_dict()[weight], model.state_dict()[weight])  # the recorded commit, not main
    assert not torch.equal(latest.state_dict()[weight], model.state_dict()[weight])
    assert model_provenance("org/tiny", latest).revision == second.oid


def test_dataset_id_with_its_org_and_its_commit(hub, hf_api, hf_hub_cache, tmp_path):
    import datasets

    hf_api.create_repo("org/pets", repo_type="dataset")
    commit = hf_api.upload_file(
        path_or_fileobj=_jsonl(TEXTS), path_in_repo="train.jsonl", repo_id="org/pets", repo_type="dataset"
    ).oid
    model, tokenizer = load_model_and_tokenizer(saved_tiny_model(tmp_path / "m", "llama", False, 64))
    loaded = datasets.load_dataset("org/pets", split="train")
    by_object = sketch_dataset(loaded, model, tokenizer, m=64, metadata={"base_model": "org/base"})
    by_id = sketch_dataset("org/pets", model, tokenizer, m=64, metadata={"base_model": "org/base"})
    for signature in (by_object, by_id):
        assert signature.metadata["dataset"] == "org/pets"  # not "pets"
        assert signature.metadata["dataset_revision"] == HfApi().dataset_info("org/pets").sha == commit


def test_a_relative_local_path_is_published_as_plain_text(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_bytes(_jsonl(TEXTS))
    model, tokenizer = load_model_and_tokenizer(saved_tiny_model(tmp_path / "m", "llama", False, 64))
    monkeypatch.chdir(tmp_path)
    signature = sketch_dataset("data/train.jsonl", model, tokenizer, m=64, metadata={"base_model": "org/base"})
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    push_signature(signature, folder)
    card = (folder / "README.md").read_text()
    index = json.loads((folder / ".fisher_signatures" / "index.json").read_text())
    assert index["signatures"][0]["dataset"] == "train.jsonl"
    assert "/datasets/data/train.jsonl" not in card and "](/datasets/" not in card
    assert str(tmp_path) not in card + json.dumps(index)


def test_a_streamed_hub_dataset_records_its_commit(hub, hf_api, hf_hub_cache, tmp_path):
    """Issue 23 leftover: --streaming read a Hub dataset without pinning it. The commit is the one the id (and
    revision) resolve to, as for the map-style path; a later commit on the branch is not the one recorded."""
    import datasets

    from fisherhub.options import DataArgs

    hf_api.create_repo("org/stream", repo_type="dataset")
    first = hf_api.upload_file(
        path_or_fileobj=_jsonl(TEXTS), path_in_repo="train.jsonl", repo_id="org/stream", repo_type="dataset"
    ).oid
    model, tokenizer = load_model_and_tokenizer(saved_tiny_model(tmp_path / "m", "llama", False, 64))
    common = {"m": 64, "metadata": {"base_model": "org/base"}}
    streamed = sketch_dataset("org/stream", model, tokenizer, data=DataArgs("org/stream", streaming=True), **common)
    assert streamed.metadata["dataset"] == "org/stream" and streamed.metadata["dataset_revision"] == first
    mapped = sketch_dataset("org/stream", model, tokenizer, **common)
    assert mapped.metadata["dataset_revision"] == first and mapped.joint.equal(streamed.joint)
    second = hf_api.upload_file(
        path_or_fileobj=_jsonl(TEXTS[::-1]), path_in_repo="train.jsonl", repo_id="org/stream", repo_type="dataset"
    ).oid
    at_first = sketch_dataset(
        "org/stream", model, tokenizer, data=DataArgs("org/stream", streaming=True, revision=first), **common
    )
    at_main = sketch_dataset("org/stream", model, tokenizer, data=DataArgs("org/stream", streaming=True), **common)
    assert (at_first.metadata["dataset_revision"], at_main.metadata["dataset_revision"]) == (first, second)
    # a map-style Dataset from the Hub streamed with to_iterable_dataset: the commit of its own cache files
    loaded = datasets.load_dataset("org/stream", split="train", revision=first)
    by_object = sketch_dataset(loaded, model, tokenizer, data=DataArgs(loaded, streaming=True), **common)
    assert (by_object.metadata["dataset"], by_object.metadata["dataset_revision"]) == ("org/stream", first)
