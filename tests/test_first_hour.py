"""``fisherhub first-hour`` (and ``scripts/first_hour.py``) end to end on the local Hub server: from a base model's
id alone, adapters signed, signed through their card's dataset, signed from their generations, and broken are
discovered; without ``--push`` nothing is written anywhere; with it the index is built (then updated), the
unsigned signed, every skip explained, and the target ranked with the generation-signed rows marked."""

from __future__ import annotations

import importlib
import json
import runpy
import sys
from pathlib import Path

import pytest
from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

from fisherhub.cli import main
from fisherhub.hub.signature_index import load_index
from fisherhub.testing.hub_repos import publish_unsigned_world
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

BASE = "org/base"
INDEX = "tester/base-index"
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "first_hour.py"


@pytest.fixture
def world(hub, hf_api, hf_hub_cache, tmp_path):
    model, tokenizer = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)
    kinds = publish_unsigned_world(hf_api, BASE, model, tokenizer, tmp_path / "adapters")
    folder = tmp_path / "base"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    target = tmp_path / "target.jsonl"
    target.write_text("".join(json.dumps({"text": f"football match {i} football again"}) + "\n" for i in range(24)))
    argv = [BASE, "--target", str(target), "--index", INDEX, "--model", str(folder), "--work", str(tmp_path / "w")]
    argv += ["--samples", "24", "--max-new-tokens", "8", "--report", str(tmp_path / "report.json")]
    return kinds, argv, tmp_path / "report.json"


def commits(hub, kinds) -> dict[str, int]:
    repos = {repo: hub.commit_count(repo) for kind in kinds.values() for repo in kind}
    return repos | {"datasets/org/ds-sport": hub.commit_count("org/ds-sport", "dataset")}


def test_without_push_nothing_is_written_and_the_signed_adapters_are_ranked(world, hub, capsys, monkeypatch):
    kinds, argv, report = world
    before = commits(hub, kinds)
    monkeypatch.setattr(importlib.import_module("huggingface_hub.utils.tqdm"), "HF_HUB_DISABLE_PROGRESS_BARS", None)
    enable_progress_bars()  # as without HF_HUB_DISABLE_PROGRESS_BARS=1 (the tests' setting)
    try:
        assert main(["first-hour", *argv, "--rerank", "0"]) == 0
    finally:
        disable_progress_bars()
    captured = capsys.readouterr()
    assert "discovering adapters" in captured.err  # a bar per stage, when bars are on
    assert "discovered: 1 signed, 2 naming datasets, 3 neither" in captured.out
    assert "without --push nothing is written" in captured.out
    assert commits(hub, kinds) == before and ("dataset", INDEX) not in hub.repos
    written = json.loads(report.read_text())
    assert [row["candidate"].split("@")[0] for row in written["ranking"]] == ["org/signed"]
    assert {name for name, _ in written["skipped"]} >= {"org/card-signed"}  # its dataset carries no signature


def test_push_builds_signs_ranks_explains_and_a_second_run_updates(world, hub, capsys, monkeypatch):
    kinds, argv, report = world
    before = commits(hub, kinds)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *argv, "--push", "--rerank", "2"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert commits(hub, kinds) == before  # nothing written to the adapters' or the datasets' repos
    rows = {row["repo_id"]: row["obtained"] for row in load_index(INDEX).table.to_pylist()}
    assert rows == {
        "org/signed": "published",
        "org/card-signed": "sketched",
        "org/gen-a": "generated",
        "org/gen-b": "generated",
    }
    written = json.loads(report.read_text())
    assert written["index_stage"]["action"] == "built" and written["generations"]["rows_added"] == 2
    skipped = dict(written["skipped"])
    assert "no adapter weights" in skipped["org/no-weights"] and "NaN" in skipped["org/nan-weights"]
    assert "dataset org/ds-missing" in skipped
    provenance = {row["candidate"].split("@")[0]: row["provenance"] for row in written["ranking"]}
    assert set(provenance) == {"org/signed", "org/card-signed", "org/gen-a", "org/gen-b"}
    assert "from its generations" in provenance["org/gen-a"] and "from its generations" not in provenance["org/signed"]
    assert "note: signed from its generations" in out and "two-stage: first" in out
    assert "skipped, and why:" in out and "\nbest: org/" in out, out

    assert main(["first-hour", *argv, "--push", "--rerank", "0"]) == 0
    again = json.loads(report.read_text())
    assert again["index_stage"]["action"] == "updated" and again["generations"]["rows_added"] == 0
