"""``sign_unsigned`` (pipeline/index_signing.py): adapters without signatures whose card names datasets get
rows sketched by the indexer (tiny model, local Hub server); gated, missing and unreadable datasets are
skipped with their reason; a run stopped midway resumes without sketching again; nothing is written to the
repos read; the rows rank like the others."""

from __future__ import annotations

import json

import pytest
from huggingface_hub import HfApi
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

import fisherhub
from fisherhub.cli import main
from fisherhub.hub import push_signature
from fisherhub.hub.signature_index import InterruptedBuild, build_index, load_index
from fisherhub.pipeline import index_signing, loop
from fisherhub.selection import select_adapter
from fisherhub.selection.index_ranking import rank_index
from fisherhub.selection.target import Target
from fisherhub.testing.hub_repos import create_adapter, create_jsonl_dataset

BASE = "org/base"
INDEX = "datasets/tester/base-index"
WORDS = ["apple pie recipe", "stock market news", "football match report", "quantum physics lecture"]


def texts(topic: int, n: int = 12) -> list[str]:
    return [f"{WORDS[topic]} number {i} {WORDS[topic]} again" for i in range(n)]


def adapter(api: HfApi, name: str, datasets: list[str] | None = None) -> str:
    return create_adapter(api, f"org/{name}", BASE, datasets)


def dataset(api: HfApi, name: str, rows: list[dict]) -> str:
    return create_jsonl_dataset(api, f"org/{name}", rows)


@pytest.fixture
def world(hub, hf_api, hf_hub_cache):
    model, tokenizer = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)
    signed = []
    for topic in (0, 1):
        repo_id = adapter(hf_api, f"signed-{topic}")
        push_signature(
            fisherhub.sketch_texts(texts(topic), model, tokenizer, m=64, metadata={"base_model": BASE}), repo_id
        )
        signed.append(repo_id)
    dataset(hf_api, "ds-sport", [{"text": t} for t in texts(2)])
    dataset(hf_api, "ds-physics", [{"text": t} for t in texts(3)])
    dataset(hf_api, "ds-gated", [{"text": t} for t in texts(3)])
    hub.repo("org/ds-gated", "dataset").gated = "manual"
    dataset(hf_api, "ds-no-text", [{"body": t} for t in texts(2)])
    unsigned = {
        "org/sport-a": adapter(hf_api, "sport-a", ["org/ds-sport"]),
        "org/sport-b": adapter(hf_api, "sport-b", ["org/ds-sport", "org/ds-missing"]),
        "org/physics": adapter(hf_api, "physics", ["org/ds-physics", "org/ds-gated"]),
        "org/broken": adapter(hf_api, "broken", ["org/ds-no-text"]),
        "org/silent": adapter(hf_api, "silent"),
    }
    build_index(BASE, INDEX, work=hf_hub_cache + "/work")
    return model, tokenizer, signed, unsigned


def test_sign_sketches_each_dataset_once_skips_with_reasons_and_resumes(world, hub, hf_hub_cache, monkeypatch):
    model, tokenizer, signed, unsigned = world
    commits = {repo: hub.commit_count(repo) for repo in [*signed, *unsigned]}
    commits |= {f"datasets/{d}": hub.commit_count(d, "dataset") for d in ("org/ds-sport", "org/ds-physics")}
    calls = []
    sketch = loop.sketch_dataset
    monkeypatch.setattr(loop, "sketch_dataset", lambda name, *a, **k: calls.append(name) or sketch(name, *a, **k))
    work = hf_hub_cache + "/work"
    with pytest.raises(InterruptedBuild):
        index_signing.sign_unsigned(
            BASE, INDEX, model=model, tokenizer=tokenizer, max_documents=8, work=work, stop_after=1
        )
    assert calls == ["org/ds-sport"]
    report = index_signing.sign_unsigned(BASE, INDEX, model=model, tokenizer=tokenizer, max_documents=8, work=work)
    assert calls == ["org/ds-sport", "org/ds-physics", "org/ds-gated", "org/ds-no-text"]  # ds-sport not again
    outcomes = {o.dataset: o for o in report.datasets}
    assert {d for d, o in outcomes.items() if o.status == "sketched"} == {"org/ds-sport", "org/ds-physics"}
    assert "not found" in outcomes["org/ds-missing"].reason.lower() or "404" in outcomes["org/ds-missing"].reason
    assert "gated" in outcomes["org/ds-gated"].reason.lower() or "restricted" in outcomes["org/ds-gated"].reason.lower()
    assert "text" in outcomes["org/ds-no-text"].reason
    assert report.unsigned == 5 and report.naming_datasets == 4 and report.rows_added == 3
    assert {repo: hub.commit_count(repo) for repo in [*signed, *unsigned]} | {
        f"datasets/{d}": hub.commit_count(d, "dataset") for d in ("org/ds-sport", "org/ds-physics")
    } == commits

    import datasets

    rows = datasets.load_dataset("tester/base-index", split="train")
    obtained = dict(zip(rows["repo_id"], rows["obtained"]))
    assert obtained == {
        **{r: "published" for r in signed},
        "org/sport-a": "sketched",
        "org/sport-b": "sketched",
        "org/physics": "sketched",
    }

    target = fisherhub.sketch_texts(texts(2, 20)[8:], model, tokenizer, m=64, metadata={"base_model": BASE})
    selection = select_adapter(target, index=INDEX)
    assert selection.best.candidate.split("@")[0] in ("org/sport-a", "org/sport-b")
    assert selection.best.signature_source.startswith("datasets/tester/base-index@")
    shortlisted = rank_index(load_index(INDEX), Target([target]), BASE).candidates()
    assert select_adapter(target, shortlisted).table() == selection.table()
    sketched = select_adapter(
        texts(2, 20)[8:], index=INDEX, model=model, tokenizer=tokenizer, rerank=0
    )  # texts: sketched like a row (the first stage alone, as for a signature target)
    assert sketched.table() == selection.table()


def test_cli_sign_writes_its_report(world, hub, tmp_path, capsys):
    model, tokenizer, _, _ = world
    folder = tmp_path / "base"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    report = tmp_path / "report.json"
    argv = [
        "index",
        "sign",
        BASE,
        "--index",
        "tester/base-index",
        "--model",
        str(folder),
        "--max-documents",
        "6",
        "--report",
        str(report),
        "--work",
        str(tmp_path / "work"),
    ]
    assert main(argv) == 0
    written = json.loads(report.read_text())
    assert (
        written["rows_added"] == 3
        and {d["dataset"]: d["status"] for d in written["datasets"]}["org/ds-gated"] == "skipped"
    )
    assert "3 rows added" in capsys.readouterr().out
    assert main([*argv[:-2], "--max-documents", "0"]) == 1
    assert "--max-documents must be a positive integer" in capsys.readouterr().err


def test_two_processes_split_the_datasets_and_add_the_rows_one_process_adds(world, hf_api, hf_hub_cache, tmp_path):
    """``accelerate launch`` (2 CPU processes) of ``index sign``: each dataset sketched by one process, the
    main one pushes; the index gets the rows a one-process run gives another index built alike; a second
    launch with the same work folder sketches nothing again."""
    import os
    import subprocess
    import sys

    import datasets
    import torch

    from sketch_helpers import LAUNCH_TWO_CPU_PROCESSES, single_thread

    model, tokenizer, _, _ = world
    dataset(hf_api, "ds-cooking", [{"text": t} for t in texts(0)])
    adapter(hf_api, "cooking", ["org/ds-cooking"])  # a third dataset to sketch: each process gets some
    build_index(BASE, "datasets/tester/launched-index", work=str(tmp_path / "build"))
    with single_thread():
        one = index_signing.sign_unsigned(
            BASE, INDEX, model=model, tokenizer=tokenizer, max_documents=6, work=str(tmp_path / "one")
        )
    folder = tmp_path / "base"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    report, work = tmp_path / "report.json", tmp_path / "two"
    command = [sys.executable, *LAUNCH_TWO_CPU_PROCESSES, "-m", "fisherhub", "index", "sign", BASE]
    command += ["--index", "tester/launched-index", "--model", str(folder), "--max-documents", "6"]
    command += ["--report", str(report), "--work", str(work)]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("rows added") == 1  # the main process alone reports
    two = json.loads(report.read_text())
    assert {k: v for k, v in two.items() if k != "commit"} == {
        k: v for k, v in json.loads(json.dumps(one.as_dict())).items() if k != "commit"
    }
    journals = [
        json.loads(line)
        for path in sorted((work / "sign").glob("sketched-*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert sorted(entry["name"] for entry in journals) == ["org/ds-cooking", "org/ds-physics", "org/ds-sport"]
    assert all((work / "sign" / f"sketched-{rank}.jsonl").read_text() for rank in (0, 1))  # both sketched
    again = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and json.loads(report.read_text())["rows_added"] == 4, again.stderr[-3000:]
    assert sum(len(p.read_text().splitlines()) for p in (work / "sign").glob("sketched-*.jsonl")) == 3  # none again

    def rows(repo_id: str) -> dict:
        table = datasets.load_dataset(repo_id, split="train").to_list()
        return {(row["repo_id"], row["path"]): row for row in table}

    by_one, by_two = rows("tester/base-index"), rows("tester/launched-index")
    assert by_one.keys() == by_two.keys() and sum(r["obtained"] == "sketched" for r in by_two.values()) == 4
    for key, row in by_one.items():
        other = by_two[key]
        for column, value in row.items():
            if column in ("file_repo", "file_commit"):  # the index repo each run pushed its files to
                continue
            if column == "metadata":  # all but the time each was sketched
                value, other[column] = (json.loads(m) | {"created": None} for m in (value, other[column]))
            if isinstance(value, list) and all(isinstance(v, float) for v in value):  # split norms, lengths
                assert torch.allclose(torch.tensor(value), torch.tensor(other[column]), rtol=1e-5, atol=1e-7), column
            else:
                assert value == other[column], column
