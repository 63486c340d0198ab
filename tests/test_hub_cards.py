"""What fisherhub publishes: the index (source of truth) and the card (its escaped rendering), adapter
metadata for repos it creates, no local paths, the same files in a local folder, and gated repos."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from huggingface_hub import CommitOperationAdd, ModelCard, RepoCard
from test_hub import DATA, card_of, cli, dataset_repo, make_signature  # noqa: F401  (a fixture)

from fisherhub.core.errors import InputError
from fisherhub.hub import (
    INDEX_PATH,
    SIGNATURE_TAG,
    GatedRepoAccessError,
    find_adapters,
    list_signatures,
    load_signature,
    push_signature,
)
from fisherhub.hub.cards import CARD_KEY, SECTION_BEGIN, SECTION_END
from fisherhub.hub.listing import parse_index, printable, public_name

HOSTILE = {
    "dataset": f"<script>alert(1)</script> [x](javascript:alert(1)) | col {SECTION_END} `tick`\n## Heading",
    "dataset_config": "a|b<img src=x onerror=alert(1)>",
    "dataset_split": f"train{SECTION_BEGIN}",
    "base_model": 'org/base") ; import os #',
}


def section_of(text: str) -> str:
    assert text.count(SECTION_BEGIN) == 1 and text.count(SECTION_END) == 1, text
    return text[text.index(SECTION_BEGIN) : text.index(SECTION_END)]


def test_metadata_cannot_inject_into_the_card(hub, hf_api, dataset_repo):
    hostile = make_signature(
        HOSTILE["base_model"],
        HOSTILE["dataset"],
        dataset_config=HOSTILE["dataset_config"],
        dataset_split=HOSTILE["dataset_split"],
    )
    plain = make_signature("org/base", seed=1)
    push_signature(hostile, DATA)
    push_signature(plain, DATA)
    push_signature(hostile, DATA)  # re-rendered in place
    text = hub.files("org/data", "dataset")["README.md"].decode()
    section = section_of(text)  # exactly one managed section after three pushes
    body = RepoCard(text).text  # (the YAML header holds the raw strings, quoted by the YAML dump)
    for raw in ("<script>", "<img", "](javascript:", "\n## Heading", "`tick`"):
        assert raw not in body, raw
    rows = [line for line in section.splitlines() if line.startswith("| [")]
    assert len(rows) == 2 and all(len(re.findall(r"(?<!\\)\|", row)) == 7 for row in rows)  # 6 cells, no stray |
    code = section[section.index("```python") :]
    assert 'load_signature("datasets/org/data", base_model="org/base")' in code and "import os" not in code
    assert "&lt;script&gt;alert\\(1\\)&lt;/script&gt;" in section  # escaped, still readable
    card = RepoCard(text)
    assert {e["dataset_split"] for e in card.data[CARD_KEY] if "dataset_split" in e} == {
        printable(HOSTILE["dataset_split"])
    }
    assert card.text.startswith("# Org data\n\nWhat this dataset is.\n")  # the human text before it stays
    entries = parse_index(hub.files("org/data", "dataset")[INDEX_PATH], "test")
    assert entries == card.data[CARD_KEY]  # the card block is the index's rendering
    assert {info.dataset for info in list_signatures(DATA)} == {printable(HOSTILE["dataset"]), "org/data"}  # one line


def test_stray_and_duplicated_sections_collapse_to_one(hub, hf_api, dataset_repo):
    push_signature(make_signature(), DATA)
    text = hub.files("org/data", "dataset")["README.md"].decode()
    section = text[text.index(SECTION_BEGIN) : text.index(SECTION_END) + len(SECTION_END)]
    edited = text + "\nHand-written notes.\n\n" + section + "\n" + SECTION_END + "\nMore notes.\n"
    hf_api.create_commit(
        "org/data", [CommitOperationAdd("README.md", edited.encode())], commit_message="hand edit", repo_type="dataset"
    )
    push_signature(make_signature(seed=1, n=150), DATA)
    text = hub.files("org/data", "dataset")["README.md"].decode()
    section_of(text)
    assert "Hand-written notes." in text and "More notes." in text


@pytest.mark.parametrize(
    "base_model, dataset, expected_base, expected_dataset",
    [
        ("/home/alice/models/llama-tiny", "/home/alice/secret-project/data/train.jsonl", "llama-tiny", "train.jsonl"),
        (
            "/home/alice/.cache/huggingface/hub/models--org--base/snapshots/" + "a" * 40,
            "~/data/corpus/",
            "org/base",
            "corpus",
        ),
        (
            "./checkpoints/run-7/",
            "/srv/datasets--org--corpus/snapshots/" + "b" * 40 + "/train.jsonl",
            "run-7",
            "org/corpus",
        ),
    ],
)
def test_local_paths_never_leak(hub, hf_api, tmp_path, base_model, dataset, expected_base, expected_dataset):
    assert public_name(base_model) == expected_base and public_name(dataset) == expected_dataset
    hf_api.create_repo("org/published", repo_type="dataset")
    signature = make_signature("org/base", dataset)  # (its test fingerprint is named after the base model)
    signature = dataclasses.replace(signature, metadata={**signature.metadata, "base_model": base_model})
    result = push_signature(signature, "datasets/org/published")
    files = hub.files("org/published", "dataset")
    published = {path: data for path, data in files.items() if path != ".gitattributes"}
    for path, data in published.items():
        if path.endswith(".safetensors"):  # the header's metadata; the tensors' bytes may hold any character
            data = data[8 : 8 + int.from_bytes(data[:8], "little")]
        for secret in ("/home", "alice", "secret-project", "~", ".cache", "checkpoints", "/srv"):
            assert secret not in path and secret.encode() not in data, (secret, path)
    assert result.ref.path.startswith(f".fisher_signatures/{expected_base.replace('/', '--')}__")
    signature = load_signature(str(result.ref))  # the published copy is a valid signature with public names
    assert (signature.metadata["base_model"], signature.metadata["dataset"]) == (expected_base, expected_dataset)


def test_create_repo_for_an_adapter_gets_base_model_and_library_name(hub, hf_api):
    signature = make_signature("org/base", "org/train-data")
    push_signature(signature, "org/new-adapter", create_repo=True)
    card = card_of(hub, "org/new-adapter", "model")
    assert (card.data.base_model, card.data.library_name) == ("org/base", "peft")
    assert SIGNATURE_TAG in card.data.tags
    # once PEFT's files are in, the Hub's own filter lists it as an adapter of its base model
    hf_api.upload_file(
        path_or_fileobj=b'{"base_model_name_or_path": "org/base"}',
        path_in_repo="adapter_config.json",
        repo_id="org/new-adapter",
    )
    assert "base_model:adapter:org/base" in hf_api.model_info("org/new-adapter").tags
    assert [a.ref.repo_id for a in find_adapters("org/base")] == ["org/new-adapter"]
    # an existing card's own base_model and library_name are kept
    hf_api.create_repo("org/kept")
    ModelCard("---\nbase_model: org/other\nlibrary_name: transformers\n---\n").push_to_hub("org/kept")
    push_signature(signature, "org/kept", create_repo=True)
    kept = card_of(hub, "org/kept", "model")
    assert (kept.data.base_model, kept.data.library_name) == ("org/other", "transformers")


def test_listing_survives_a_push_to_hub_that_rewrites_the_card(hub, hf_api):
    hf_api.create_repo("org/adapter")
    hf_api.upload_file(path_or_fileobj=b"{}", path_in_repo="adapter_config.json", repo_id="org/adapter")
    signature = make_signature()
    result = push_signature(signature, "org/adapter")
    assert hub.commit_count("org/adapter") == 3  # initial, adapter_config, then signature + index + card in one
    assert set(hub.files("org/adapter")) >= {result.ref.path, INDEX_PATH, "README.md"}
    # what Trainer.push_to_hub / PeftModel.push_to_hub do: a fresh card, without our block or tag
    ModelCard(
        "---\nbase_model: org/base\nlibrary_name: peft\ntags: [lora]\n---\n# Model trained with TRL\n"
    ).push_to_hub("org/adapter")
    assert CARD_KEY not in card_of(hub, "org/adapter", "model").data
    [info] = list_signatures("org/adapter")
    assert (info.path, info.listed, info.sketch_id) == (result.ref.path, True, signature.sketch_id)
    assert load_signature("org/adapter").to_bytes() == signature.to_bytes()  # chosen from the index
    assert [a.ref.repo_id for a in find_adapters("org/base")] == ["org/adapter"]  # the fallback listing
    assert find_adapters("org/base", untagged=False) == []  # the tag is gone
    other = make_signature(seed=1, n=150, base_model="org/other")
    push_signature(other, "org/adapter", force=True)  # re-renders the block
    card = card_of(hub, "org/adapter", "model")
    assert len(card.data[CARD_KEY]) == 2 and card.text.startswith("# Model trained with TRL")


def test_push_to_and_list_a_local_folder(hub, tmp_path, capsys):
    folder = tmp_path / "my-adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text('{"base_model_name_or_path": "org/base"}')
    signature = make_signature(dataset=str(tmp_path / "data" / "train.jsonl"))
    signature.save(tmp_path / "sig.safetensors")
    assert cli("push", str(tmp_path / "sig.safetensors"), str(folder)) == 0
    assert capsys.readouterr().out.startswith("wrote ")
    from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

    everything = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    files = sorted(filter_repo_objects(everything, ignore_patterns=DEFAULT_IGNORE_PATTERNS))  # what an upload carries
    [path] = [p for p in files if p.endswith(".safetensors")]
    assert files == sorted(["README.md", "adapter_config.json", INDEX_PATH, path])
    assert sorted(set(everything) - set(files)) == [".cache/huggingface/fisher_signatures.lock"]  # the push lock
    assert path == f".fisher_signatures/org--base__train.jsonl__{signature.sketch_id}.safetensors"
    entries = parse_index((folder / INDEX_PATH).read_bytes(), "test")
    card = RepoCard.load(folder / "README.md")
    assert card.data[CARD_KEY] == entries and entries[0]["dataset"] == "train.jsonl"
    assert (card.data.base_model, card.data.library_name) == ("org/base", "peft")
    assert str(tmp_path) not in (folder / "README.md").read_text() + (folder / INDEX_PATH).read_text()
    assert cli("push", str(tmp_path / "sig.safetensors"), str(folder)) == 0
    assert "already there, nothing to commit" in capsys.readouterr().out

    assert cli("list", str(folder)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{folder}: 1 signature file"
    assert lines[2].split() == [path, "org/base", signature.sketch_id, "train.jsonl", "200", "yes"]
    assert load_signature(folder).sketch_id == signature.sketch_id  # the folder's index chooses
    # the same folder uploaded as it is is a signed repo
    from huggingface_hub import HfApi

    HfApi().create_repo("org/uploaded")
    HfApi().upload_folder(repo_id="org/uploaded", folder_path=folder)
    assert [i.path for i in list_signatures("org/uploaded")] == [path]
    assert "base_model:adapter:org/base" in HfApi().model_info("org/uploaded").tags


def test_gated_repo_says_request_access(hub, hf_api, dataset_repo):
    push_signature(make_signature(), DATA)
    hub.repo("org/data", "dataset").gated = "manual"
    for call in (lambda: load_signature(DATA), lambda: list_signatures(DATA)):
        with pytest.raises(GatedRepoAccessError, match="gated: request access") as exc:
            call()
        assert "not found" not in str(exc.value)
    hub.repo("org/data", "dataset").granted.add("hf_fisherhub_local_test_token")  # conftest's HF_TOKEN
    assert load_signature(DATA).sketch_id == make_signature().sketch_id
    info = json.loads(json.dumps(hf_api.dataset_info("org/data").gated))
    assert info == "manual"


def test_cards_are_read_as_their_repo_types_card_class(hub, hf_api, tmp_path):
    """A model repo's card is a ``ModelCard`` (``ModelCardData``: its eval results parsed and written back),
    a dataset's a ``DatasetCard``; a model card whose ``model-index`` its card data cannot parse is malformed:
    refused, or repaired with the rest of the header kept and the old one verbatim in the body."""
    from huggingface_hub import DatasetCard, DatasetCardData, ModelCardData

    from fisherhub.hub.cards import read_card
    from fisherhub.hub.errors import CardError

    model_index = "model-index:\n- name: tuned\n  results:\n  - task: {type: text-generation}\n    dataset: {name: d, type: d}\n    metrics: [{type: accuracy, value: 0.5}]\n"
    card = read_card(f"---\nlicense: mit\n{model_index}---\nBody\n", "org/a", "model")
    assert isinstance(card, ModelCard) and isinstance(card.data, ModelCardData)
    assert card.data.eval_results[0].metric_value == 0.5
    assert "model-index" in card.data.to_dict() and "metrics" in str(card)
    dataset_card = read_card("---\nlicense: mit\n---\nBody\n", "org/d", "dataset")
    assert isinstance(dataset_card, DatasetCard) and isinstance(dataset_card.data, DatasetCardData)
    assert isinstance(read_card(None, "org/d", "dataset"), DatasetCard)

    broken = "---\nlicense: mit\nmodel-index: [{results: oops}]\n---\n# Body\n"
    with pytest.raises(CardError, match="malformed YAML header"):
        read_card(broken, "org/a", "model")
    repaired = read_card(broken, "org/a", "model", repair=True)
    assert repaired.data.license == "mit" and repaired.data.to_dict()[CARD_KEY] == []
    assert "model-index" not in repaired.data.to_dict()
    assert "```yaml\nlicense: mit\nmodel-index: [{results: oops}]\n```" in repaired.text
    assert repaired.text.endswith("# Body\n")
    assert RepoCard(str(repaired)).data.license == "mit"  # what is pushed parses again


def test_push_with_index_links_the_index_from_the_section(hub, hf_api, tmp_path):
    signature = make_signature("org/base", "org/train-data")
    signature.save(tmp_path / "sig.safetensors")
    hf_api.create_repo("org/adapter")
    assert cli("push", str(tmp_path / "sig.safetensors"), "org/adapter", "--index", "datasets/org/base-index") == 0
    section = section_of(card_of(hub, "org/adapter", "model").text)
    assert "signature index [org/base-index](/datasets/org/base-index)" in section
    # without an index the section links to none
    hf_api.create_repo("org/other")
    push_signature(signature, "org/other")
    assert "signature index" not in section_of(card_of(hub, "org/other", "model").text)
    # a bad index is refused naming the flag, before anything is pushed
    commits = hub.commit_count("org/other", "model")
    with pytest.raises(InputError, match=r"^--index 'not a repo!': an index is a dataset repo"):
        cli("push", str(tmp_path / "sig.safetensors"), "org/other", "--index", "not a repo!")
    with pytest.raises(InputError, match="'spaces/org/x': an index is a dataset repo"):
        push_signature(signature, "org/other", index="spaces/org/x")
    assert hub.commit_count("org/other", "model") == commits
