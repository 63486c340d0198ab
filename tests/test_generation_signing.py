"""Signing adapters from their own samples (``generation_signing``; SPEC §3b), on the local Hub server with tiny
random models: an index of one signed adapter, one whose card names a dataset, two LoRA adapters whose cards name
no data, and broken ones (no weights, NaN weights, another base model). ``sign_from_generations`` signs the two,
skips the broken with their reasons, resumes after a kill without sampling again, is deterministic in its seed,
and every row, table and verdict that shows such a signature says so."""

from __future__ import annotations

import json

import pytest
import torch

import fisherhub
from fisherhub.cli import main
from fisherhub.generation_signing import sign_adapter_from_generations, sign_from_generations
from fisherhub.hub.signature_index import IndexSummary, InterruptedBuild, build_index, load_index
from fisherhub.lm import generation
from fisherhub.lm.generation import sample_texts
from fisherhub.options import GenerationOptions
from fisherhub.pipeline.index_signing import sign_unsigned
from fisherhub.selection import select_adapter
from fisherhub.space.browse import row_view
from fisherhub.testing.hub_repos import publish_unsigned_world
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

BASE = "org/base"
INDEX = "datasets/tester/base-index"
OPTIONS = GenerationOptions(samples=24, max_new_tokens=12, generation_batch_size=8)


def texts(word: str, n: int = 24) -> list[str]:
    return [f"{word} number {i} {word} again" for i in range(n)]


@pytest.fixture
def world(hub, hf_api, hf_hub_cache, tmp_path):
    model, tokenizer = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)
    kinds = publish_unsigned_world(hf_api, BASE, model, tokenizer, tmp_path / "adapters")
    build_index(BASE, INDEX, work=str(tmp_path / "work"))
    sign_unsigned(BASE, INDEX, model=model, tokenizer=tokenizer, work=str(tmp_path / "work"))
    return model, tokenizer, kinds["signed"][0], dict.fromkeys(kinds["generation"]), dict.fromkeys(kinds["broken"])


def test_unsigned_adapters_without_rows_are_signed_from_generations_and_resume(world, hub, tmp_path, monkeypatch):
    model, tokenizer, signed, loras, broken = world
    commits = {repo: hub.commit_count(repo) for repo in [signed, *loras, *broken]}
    drawn = []
    sample = generation.sample_texts
    monkeypatch.setattr(generation, "sample_texts", lambda m, *a, **k: drawn.append(1) or sample(m, *a, **k))
    work = str(tmp_path / "work")
    with pytest.raises(InterruptedBuild):
        sign_from_generations(BASE, INDEX, model=model, tokenizer=tokenizer, options=OPTIONS, work=work, stop_after=1)
    assert len(drawn) == 1
    report = sign_from_generations(BASE, INDEX, model=model, tokenizer=tokenizer, options=OPTIONS, work=work)
    assert len(drawn) == 2  # gen-a not sampled again, gen-b sampled; broken weights are refused before sampling
    outcomes = {o.adapter: o for o in report.adapters}
    assert set(outcomes) == {*loras, *broken}  # signed and card-signed adapters have rows: not tried
    assert {a for a, o in outcomes.items() if o.status == "generated"} == set(loras)
    assert "no adapter weights" in outcomes["org/no-weights"].reason
    assert "NaN" in outcomes["org/nan-weights"].reason
    assert report.unsigned == 5 and report.without_rows == 4 and report.rows_added == 2
    assert report.sampling == {
        "source": "generated",
        "generation_prompts": "fisherhub-generic-v1",
        "generation_samples": "24",
        "generation_seed": "0",
        "generation_max_new_tokens": "12",
        "generation_temperature": "1",
    }
    assert any("skipped org/no-weights" in line for line in report.lines())
    assert {repo: hub.commit_count(repo) for repo in [signed, *loras, *broken]} == commits  # nothing written there

    loaded = load_index(INDEX)
    rows = {row["repo_id"]: row for row in loaded.table.to_pylist()}
    assert {r: row["obtained"] for r, row in rows.items()} == {
        signed: "published",
        "org/card-signed": "sketched",
        "org/gen-a": "generated",
        "org/gen-b": "generated",
    }
    metadata = json.loads(rows["org/gen-a"]["metadata"])
    assert metadata | report.sampling == metadata and metadata["adapter_revision"] == rows["org/gen-a"]["commit"]
    assert rows["org/gen-a"]["path"].startswith(".fisher_signatures/generated/")
    view = row_view(rows["org/gen-a"], None)
    assert view.source == "from generations" and any("from its generations (24 samples" in f for f in view.flags)
    summary = IndexSummary.of(loaded.table, loaded.base_model, loaded.state["repos"])
    assert any("adapter's generations" in line for line in summary.lines())

    again = sign_from_generations(BASE, INDEX, model=model, tokenizer=tokenizer, options=OPTIONS, work=work)
    assert again.without_rows == 2 and again.rows_added == 0 and len(drawn) == 2  # the broken two, refused again


def test_a_generated_signature_is_deterministic_in_its_seed_and_sketched_under_the_base_model(world):
    model, tokenizer, _, _, _ = world
    location = "org/gen-a"
    one, two = (
        sign_adapter_from_generations(model, tokenizer, location, base_model=BASE, options=OPTIONS) for _ in range(2)
    )
    other = sign_adapter_from_generations(
        model,
        tokenizer,
        location,
        base_model=BASE,
        options=GenerationOptions(samples=24, max_new_tokens=12, generation_seed=1),
    )
    assert torch.equal(one.joint, two.joint) and not torch.equal(one.joint, other.joint)
    assert 20 <= one.num_documents <= 24 and one.metadata["source"] == "generated"  # empty samples are no documents
    assert not hasattr(model, "peft_config")  # the adapter is out of the base model again
    torch.manual_seed(123)  # the global random state does not change the samples
    assert sample_texts(
        model, tokenizer, ["", "ab"], samples=5, max_new_tokens=6, seed=4, batch_size=2
    ) == sample_texts(model, tokenizer, ["", "ab"], samples=5, max_new_tokens=6, seed=4, batch_size=5)


def test_selection_tables_and_verdicts_mark_generated_signatures(world, tmp_path):
    model, tokenizer, _, _, _ = world
    sign_from_generations(BASE, INDEX, model=model, tokenizer=tokenizer, options=OPTIONS, work=str(tmp_path / "w"))
    target = fisherhub.sketch_texts(texts("zebra"), model, tokenizer, m=64, metadata={"base_model": BASE})
    selection = select_adapter(target, index=INDEX)
    generated = [row for row in selection.ranking if row.candidate.startswith("org/gen-")]
    assert len(generated) == 2 and all("from its generations (24 samples" in row.provenance for row in generated)
    assert all("unverifiable (sketched from the adapter's own samples" in row.provenance for row in generated)
    table = selection.table(wide=True)
    assert "note: signed from its generations: " in table
    assert ("(the pick is signed from its generations)" in table) == selection.best.candidate.startswith("org/gen-")


def test_cli_sign_from_generations_writes_both_reports(world, tmp_path, capsys):
    model, tokenizer, _, _, _ = world
    folder = tmp_path / "base"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    report = tmp_path / "report.json"
    argv = ["index", "sign", BASE, "--index", "tester/base-index", "--model", str(folder), "--report", str(report)]
    argv += ["--work", str(tmp_path / "cli"), "--from-generations", "--samples", "24", "--max-new-tokens", "8"]
    assert main(argv) == 0
    written = json.loads(report.read_text())
    assert written["rows_added"] == 1 and written["generations"]["rows_added"] == 2  # card-signed again, then 2
    assert written["generations"]["sampling"]["generation_max_new_tokens"] == "8"
    out = capsys.readouterr().out
    assert "2 signed from their generations" in out and "skipped org/nan-weights" in out
    assert main([*argv, "--samples", "0"]) == 1
    assert "--samples must be a positive integer" in capsys.readouterr().err


def test_two_processes_split_the_adapters_and_add_the_rows_one_process_adds(world, hf_api, tmp_path):
    """``accelerate launch`` (2 CPU processes) of ``index sign --from-generations``: each adapter signed by one
    process, the main one pushes; the generated rows equal those of one process (a second index built alike)."""
    import os
    import subprocess
    import sys

    from sketch_helpers import LAUNCH_TWO_CPU_PROCESSES, single_thread

    model, tokenizer, _, _, _ = world
    build_index(BASE, "datasets/tester/launched-index", work=str(tmp_path / "build"))
    with single_thread():
        one = sign_from_generations(
            BASE, INDEX, model=model, tokenizer=tokenizer, options=OPTIONS, work=str(tmp_path / "one")
        )
    folder = tmp_path / "base"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    report = tmp_path / "report.json"
    command = [sys.executable, *LAUNCH_TWO_CPU_PROCESSES, "-m", "fisherhub", "index", "sign", BASE]
    command += ["--index", "tester/launched-index", "--model", str(folder), "--report", str(report)]
    command += ["--work", str(tmp_path / "two"), "--from-generations", "--samples", "24", "--max-new-tokens", "12"]
    command += ["--generation-batch-size", "8"]
    done = subprocess.run(
        command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("signed from their generations") == 1  # the main process alone reports
    two = json.loads(report.read_text())["generations"]
    assert [(o["adapter"], o["status"]) for o in two["adapters"]][-4:] == [(o.adapter, o.status) for o in one.adapters]
    journals = sorted(p.name for p in (tmp_path / "two" / "sign").rglob("generated-*.jsonl"))
    assert journals == ["generated-0.jsonl", "generated-1.jsonl"]  # both processes signed some

    def generated(index: str) -> dict:
        rows = load_index(index).table.to_pylist()
        return {r["repo_id"]: r["joint"] for r in rows if r["obtained"] == "generated"}

    assert generated(INDEX) == generated("datasets/tester/launched-index")
