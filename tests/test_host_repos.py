"""A push does no harm to the repo it goes into: for every common dataset layout, ``datasets.load_dataset`` of the
repo (on the local Hub server) and of a local folder resolves the same data files, splits and features before
and after signatures are pushed into it, the card's ``configs:`` are kept as they were, and an adapter repo
loads with ``PeftModel.from_pretrained`` as before."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub import CommitOperationAdd, RepoCard
from test_hub import make_signature

from fisherhub.hub import list_signatures, push_signature
from fisherhub.hub.cards import CARD_KEY
from fisherhub.pipeline.loop import sketch_texts


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def _parquet(rows: list[dict]) -> bytes:
    import pyarrow
    import pyarrow.parquet

    buffer = io.BytesIO()
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


TRAIN = [{"text": f"train row {i}", "label": i % 2} for i in range(6)]
TEST = [{"text": f"test row {i}", "label": i % 2} for i in range(3)]
CONFIGS_CARD = """---
license: mit
configs:
- config_name: main
  data_files:
  - split: train
    path: "texts/part-a.jsonl"
  - split: test
    path: "texts/part-b.jsonl"
  default: true
- config_name: all
  data_files: "**/*.jsonl"
---
# Data with configs
"""

#: layout name -> the repo's files
LAYOUTS = {
    "one file without a split word": {"corpus.jsonl": _jsonl(TRAIN)},
    "split-named files": {"train.jsonl": _jsonl(TRAIN), "test.jsonl": _jsonl(TEST)},
    "parquet shards": {
        "data/train-00000-of-00002.parquet": _parquet(TRAIN[:3]),
        "data/train-00001-of-00002.parquet": _parquet(TRAIN[3:]),
        "data/test-00000-of-00001.parquet": _parquet(TEST),
    },
    "a card with configs": {
        "README.md": CONFIGS_CARD.encode(),
        "texts/part-a.jsonl": _jsonl(TRAIN),
        "texts/part-b.jsonl": _jsonl(TEST),
    },
}
#: the signatures pushed: their names carry split words, and one names no dataset (a list of texts)
SIGNATURES = [
    {"dataset": "org/test-data", "dataset_split": "train"},
    {"dataset": "validation.jsonl", "dataset_config": "dev", "dataset_split": "test"},
    {},
]


def _resolved(path: str, cache_dir: str, config: str | None = None) -> dict:
    """What ``datasets`` makes of ``path`` (a fresh cache, so nothing is read from an earlier load): per split,
    the data files (commit ids taken out), the number of rows and the features."""
    import datasets

    builder = datasets.load_dataset_builder(path, config, cache_dir=cache_dir)
    loaded = datasets.load_dataset(path, config, cache_dir=cache_dir)
    files = {
        str(split): sorted(re.sub(r"@[0-9a-f]{40}", "", str(file)) for file in data_files)
        for split, data_files in (builder.config.data_files or {}).items()
    }
    return {
        split: {"files": files[split], "rows": loaded[split].num_rows, "features": loaded[split].features.to_dict()}
        for split in loaded
    }


def _signature(index: int, metadata: dict):
    signature = make_signature("org/base", n=40 + index, seed=index)
    kept = {key: value for key, value in signature.metadata.items() if key != "dataset"}
    return dataclasses.replace(signature, metadata={**kept, **metadata})


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_pushing_to_a_dataset_repo_keeps_what_load_dataset_resolves(layout, hub, hf_api, hf_hub_cache, tmp_path):
    files = LAYOUTS[layout]
    hf_api.create_repo("org/host", repo_type="dataset")
    hf_api.create_commit(
        "org/host",
        [CommitOperationAdd(path, data) for path, data in files.items()],
        commit_message="data",
        repo_type="dataset",
    )
    configs = [None, "all"] if "README.md" in files else [None]
    before = {config: _resolved("org/host", str(tmp_path / f"before-{config}"), config) for config in configs}
    assert before[None] and all(split["rows"] for split in before[None].values())
    for index, metadata in enumerate(SIGNATURES):
        push_signature(_signature(index, metadata), "datasets/org/host")
    assert len(list_signatures("datasets/org/host")) == len(SIGNATURES)  # three different files
    after = {config: _resolved("org/host", str(tmp_path / f"after-{config}"), config) for config in configs}
    assert after == before
    card = RepoCard(hub.files("org/host", "dataset")["README.md"].decode())
    if "README.md" in files:
        original = RepoCard(CONFIGS_CARD)
        assert card.data["configs"] == original.data["configs"]  # never rewritten
        assert card.text.startswith(original.text)
    assert len(card.data[CARD_KEY]) == len(SIGNATURES)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_pushing_into_a_local_folder_keeps_what_load_dataset_resolves(layout, tmp_path):
    folder = tmp_path / "host"
    for path, data in LAYOUTS[layout].items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    before = _resolved(str(folder), str(tmp_path / "before"))
    for index, metadata in enumerate(SIGNATURES):
        push_signature(_signature(index, metadata), folder)
    assert len(list_signatures(folder)) == len(SIGNATURES)
    assert _resolved(str(folder), str(tmp_path / "after")) == before


def test_two_signatures_of_text_lists_get_two_files(tmp_path):
    from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

    model, tokenizer = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    first = sketch_texts([f"a cat {i}." for i in range(6)], model, tokenizer, m=64, metadata={"base_model": "org/base"})
    second = sketch_texts(
        [f"a dog {i}!" for i in range(6)], model, tokenizer, m=64, metadata={"base_model": "org/base"}
    )
    paths = [push_signature(signature, folder).file for signature in (first, second)]
    assert paths[0] != paths[1]
    assert sorted(info.file for info in list_signatures(folder)) == sorted(paths)
    assert [Path(path).read_bytes() for path in paths] == [first.to_bytes(), second.to_bytes()]


def test_an_adapter_repo_loads_with_peft_as_before(hub, hf_api, hf_hub_cache, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model
    from fisherhub.testing.tiny_models import tiny_causal_lm

    base = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64)
    torch.manual_seed(0)
    adapter = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    adapter.save_pretrained(tmp_path / "saved")
    hf_api.create_repo("org/lora")
    hf_api.upload_folder(folder_path=str(tmp_path / "saved"), repo_id="org/lora")

    def loaded() -> dict:
        shutil.rmtree(hf_hub_cache, ignore_errors=True)
        model = PeftModel.from_pretrained(tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64), "org/lora")
        return {name: tensor.clone() for name, tensor in model.state_dict().items() if "lora" in name}

    before = loaded()
    for index, metadata in enumerate(SIGNATURES):
        push_signature(_signature(index, metadata), "org/lora")
    after = loaded()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    files = hub.files("org/lora")
    assert json.loads(files["adapter_config.json"]) == json.loads(
        (tmp_path / "saved" / "adapter_config.json").read_text()
    )
