"""Repos and folders laid out before signatures moved to the hidden ``.fisher_signatures/`` (fisherhub 0.2.0, and
fishersketch 0.1.0 signature files): ``fisher_signatures/index.json`` with ``fisher_signatures/<file>.safetensors``
entries is read after the new index, each index only for entries under its own folder; a push writes the new
layout and the old signatures stay listed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml
from test_hub import cli
from test_trust import task

from fisherhub import Signature
from fisherhub.hub import CardError, list_signatures, load_signature, push_signature
from fisherhub.hub.cards import CARD_KEY
from fisherhub.hub.listing import INDEX_PATH, parse_index
from fisherhub.hub.refs import repo_ref
from fisherhub.hub.snapshot import cached_snapshot
from fisherhub.hub.read import snapshot_signatures
from fisherhub.selection import select_adapter

FIXTURE = (
    Path(__file__).parent / "fixtures" / "pre_rename_maclaurin-srht_0.safetensors"
)  # written by fishersketch 0.1.0
LEGACY_INDEX = "fisher_signatures/index.json"  # where fisherhub 0.2.0 wrote the index
ADAPTER_CONFIG = json.dumps({"base_model_name_or_path": "org/base", "peft_type": "LORA"})


@pytest.fixture(scope="module")
def signatures():
    return {
        "target": task(0, (0, 16)),
        "good": task(1, (0, 16)),
        "good-too": task(3, (0, 16)),
        "weak": task(2, (14, 46)),
    }


def legacy_entry(path: str, data: bytes) -> dict:
    """An index or card entry as fisherhub 0.2.0 wrote it for the signature file ``data`` at ``path``."""
    signature = Signature.from_bytes(data)
    return {
        "path": path,
        "base_model": signature.metadata.get("base_model", "org/base"),
        "sketch_id": signature.sketch_id,
        "tokens": signature.num_tokens,
        "documents": signature.num_documents,
    }


def legacy_index(*entries: dict) -> bytes:
    """A ``fisher_signatures/index.json`` as fisherhub 0.2.0 wrote it (the paths are not checked here)."""
    return json.dumps({"kind": "fisherhub-signature-index", "version": 1, "signatures": entries}, indent=2).encode()


def legacy_folder(folder: Path, files: dict[str, bytes], *, adapter: bool = True, card: dict | None = None) -> Path:
    """``folder`` laid out the old way: ``files`` (name -> bytes) under ``fisher_signatures/``, listed by its index."""
    (folder / "fisher_signatures").mkdir(parents=True)
    for name, data in files.items():
        (folder / "fisher_signatures" / name).write_bytes(data)
    (folder / LEGACY_INDEX).write_bytes(
        legacy_index(*(legacy_entry(f"fisher_signatures/{n}", d) for n, d in files.items()))
    )
    if adapter:
        (folder / "adapter_config.json").write_text(ADAPTER_CONFIG)
    if card is not None:
        (folder / "README.md").write_text(f"---\n{yaml.safe_dump(card)}---\n\n# An adapter of fisherhub 0.2.0\n")
    return folder


def legacy_card(files: dict[str, bytes]) -> dict:
    """An adapter card as fisherhub 0.2.0 wrote it: the signature tag and the block with the old paths."""
    block = [legacy_entry(f"fisher_signatures/{name}", data) for name, data in files.items()]
    return {"base_model": "org/base", "library_name": "peft", "tags": ["fisher-signatures"], CARD_KEY: block}


def upload(hf_api, folder: Path, repo_id: str, repo_type: str = "model") -> None:
    hf_api.create_repo(repo_id, repo_type=repo_type)
    hf_api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type=repo_type)


def test_legacy_repos_and_folders_are_listed_pulled_and_ranked(signatures, hub, hf_api, hf_hub_cache, tmp_path, capsys):
    good, weak = signatures["good"].to_bytes(), signatures["weak"].to_bytes()
    tagged = {"good.safetensors": good}
    upload(hf_api, legacy_folder(tmp_path / "tagged", tagged, card=legacy_card(tagged)), "old/adapter")
    untagged = {"good-too.safetensors": signatures["good-too"].to_bytes()}
    upload(hf_api, legacy_folder(tmp_path / "untagged", untagged, card={"base_model": "org/base"}), "old/untagged")
    upload(
        hf_api,
        legacy_folder(tmp_path / "dataset", {"old.safetensors": FIXTURE.read_bytes()}, adapter=False),
        "old/synthetic",
        "dataset",
    )
    local = legacy_folder(tmp_path / "local-adapter", {"weak.safetensors": weak})

    for repo, path in [
        ("old/adapter", "fisher_signatures/good.safetensors"),
        ("datasets/old/synthetic", "fisher_signatures/old.safetensors"),
        (str(local), "fisher_signatures/weak.safetensors"),
    ]:
        [info] = list_signatures(repo)
        assert (info.path, info.listed, info.problem) == (path, True, None), repo
        assert cli("list", repo) == 0 and path in capsys.readouterr().out
    assert list_signatures("datasets/old/synthetic")[0].metadata["library_version"] == "0.1.0"

    assert cli("pull", "old/adapter", "-o", str(tmp_path / "pulled.safetensors")) == 0
    assert (tmp_path / "pulled.safetensors").read_bytes() == good
    assert cli("pull", "datasets/old/synthetic", "-o", str(tmp_path / "fixture.safetensors")) == 0
    assert (tmp_path / "fixture.safetensors").read_bytes() == FIXTURE.read_bytes()
    assert load_signature(str(local)).to_bytes() == weak

    selection = select_adapter(signatures["target"], ["old/adapter", str(local)])
    assert [row.candidate for row in selection.ranking] == ["old/adapter", str(local)] and not selection.skipped
    discovered = select_adapter(signatures["target"], base_model="org/base")  # by the tag, and untagged by the index
    assert {row.candidate for row in discovered.ranking} == {"old/adapter", "old/untagged"} and not discovered.skipped

    offline = snapshot_signatures(
        cached_snapshot(repo_ref("old/adapter")), read_headers=False
    )  # what HF_HUB_OFFLINE reads
    assert [(info.path, info.problem) for info in offline] == [("fisher_signatures/good.safetensors", None)]


def test_an_index_entry_outside_its_own_folder_is_skipped(signatures, hub, hf_api, hf_hub_cache, tmp_path, caplog):
    """A legacy index reads only ``fisher_signatures/`` entries and the new one only ``.fisher_signatures/``
    ones, with the same path checks; a candidate whose index points elsewhere is skipped with the reason."""
    stray = legacy_folder(tmp_path / "stray", {})
    (stray / LEGACY_INDEX).write_bytes(
        legacy_index(legacy_entry(".fisher_signatures/good.safetensors", signatures["good"].to_bytes()))
    )
    upload(hf_api, stray, "old/stray")
    upload(hf_api, legacy_folder(tmp_path / "good", {"good.safetensors": signatures["good"].to_bytes()}), "old/adapter")
    with pytest.raises(
        CardError, match=r"entry 0: path '\.fisher_signatures/good\.safetensors' is not a fisher_signatures/\*"
    ):
        list_signatures(stray)
    selection = select_adapter(signatures["target"], ["old/stray", "old/adapter"])
    assert [row.candidate for row in selection.ranking] == ["old/adapter"]
    [skip] = selection.skipped
    assert skip.candidate == "old/stray"
    assert (
        ": fisher_signatures/index.json's `signatures`, entry 0: path '.fisher_signatures/good.safetensors'"
        in skip.reason
    )
    with caplog.at_level(logging.WARNING, logger="fisherhub"):
        assert list_signatures("old/stray") == []  # listed without it, and said why
    assert "is not a fisher_signatures/*.safetensors file" in caplog.text

    for index, path in [
        (LEGACY_INDEX, "fisher_signatures/../adapter_model.safetensors"),
        (LEGACY_INDEX, "../../etc/passwd.safetensors"),
        (INDEX_PATH, "fisher_signatures/good.safetensors"),
    ]:
        with pytest.raises(CardError, match="is not a"):
            parse_index(legacy_index(legacy_entry(path, FIXTURE.read_bytes())), "test", index)
    fine = legacy_index(legacy_entry("fisher_signatures/good.safetensors", FIXTURE.read_bytes()))
    assert parse_index(fine, "test", LEGACY_INDEX)[0]["path"] == "fisher_signatures/good.safetensors"


def test_a_push_onto_a_legacy_repo_keeps_the_old_signatures_listed(signatures, hub, hf_api, hf_hub_cache, tmp_path):
    old = {"good.safetensors": signatures["good"].to_bytes()}
    upload(hf_api, legacy_folder(tmp_path / "hub", old, card=legacy_card(old)), "old/adapter")
    local = legacy_folder(tmp_path / "local", old)
    before = {"hub": hub.files("old/adapter")[LEGACY_INDEX], "local": (local / LEGACY_INDEX).read_bytes()}
    commits = hub.commit_count("old/adapter")
    new = signatures["weak"]

    pushed = push_signature(new, "old/adapter")
    assert pushed.committed and hub.commit_count("old/adapter") == commits + 1
    files = hub.files("old/adapter")
    local_file = push_signature(new, local).file
    for where, listing, index, card, legacy in [
        ("hub", list_signatures("old/adapter"), files[INDEX_PATH], files["README.md"], files[LEGACY_INDEX]),
        (
            "local",
            list_signatures(local),
            (local / INDEX_PATH).read_bytes(),
            (local / "README.md").read_bytes(),
            (local / LEGACY_INDEX).read_bytes(),
        ),
    ]:
        new_path = pushed.ref.path if where == "hub" else Path(local_file).relative_to(local).as_posix()
        assert new_path.startswith(".fisher_signatures/")
        assert sorted(info.path for info in listing) == sorted([new_path, "fisher_signatures/good.safetensors"]), where
        assert all(info.listed and info.problem is None for info in listing), where
        assert [entry["path"] for entry in parse_index(index, where)] == [new_path]  # written: the new layout only
        assert legacy == before[where]  # the legacy index is left as it was
        block = yaml.safe_load(card.decode().split("---")[1])[CARD_KEY]
        assert sorted(entry["path"] for entry in block) == sorted([new_path, "fisher_signatures/good.safetensors"])

    selection = select_adapter(signatures["target"], ["old/adapter", str(local)])
    assert {row.candidate for row in selection.ranking} == {"old/adapter", str(local)} and not selection.skipped
