"""An index built through a Hub that behaves as the real one does to a client reading many repos
(``fisherhub.testing.hub_faults``): 429 with Retry-After, paginated listings, repos that fail after being
listed, a build killed mid-way, an update after a few adapters changed. A few dozen repos: seconds."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from test_hub_server import serve, stop
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from fisherhub.cli import main
from fisherhub.hub.errors import HubUnavailableError, RepoNotFoundError
from fisherhub.hub.pool import bounded_completed
from fisherhub.hub.read import load_hub_signature
from fisherhub.hub.refs import SignatureRef
from fisherhub.hub.retry import RETRIES, with_retries
from fisherhub.hub.signature_index import build_index, update_index
from fisherhub.hub.signature_index.build import listed_adapters
from fisherhub.hub.signature_index.card import IndexSummary
from fisherhub.hub.signature_index.store import load_index
from fisherhub.hub.snapshot import repo_snapshot
from fisherhub.testing.hub_faults import BUSY_HUB, FaultLog, Faults
from fisherhub.testing.hub_repos import put_repo, signed_adapter_files
from fisherhub.testing.index_world import adapter_topic, topic_signature

BASE = "org/base"


def adapters(hub, count: int, start: int = 0, seed: int = 0) -> list[str]:
    """``count`` signed adapters of ``BASE`` written into the server's store (``org/lora-NN``)."""
    ids = []
    for k in range(start, start + count):
        signature = topic_signature(BASE, adapter_topic(k), seed=1000 * seed + k, dataset=f"org/data-{k}")
        ids.append(f"org/lora-{k:02d}")
        put_repo(hub, ids[-1], signed_adapter_files(signature, BASE))
    return ids


def seed_where(accept, limit: int = 10_000) -> int:
    """The first seed whose faults ``accept``s."""
    return next(seed for seed in range(limit) if accept(seed))


def index_keys(index: str) -> list[tuple[str, str]]:
    table = load_index(index).table
    return sorted(zip(table.column("repo_id").to_pylist(), table.column("path").to_pylist()))


def test_retry_after_is_waited_for_then_the_request_sent_once_more(hub, hf_hub_cache):
    adapters(hub, 1)
    path = "/api/models/org/lora-00"  # repo_info: huggingface_hub sends it once, fisherhub again after a 429
    seed = seed_where(
        lambda s: Faults(seed=s).draw("429", "GET", path, 0) < 0.5 <= Faults(seed=s).draw("429", "GET", path, 1)
    )
    hub.faults = Faults(seed=seed, rate_limited=0.5, retry_after=1)
    started = time.perf_counter()
    snapshot = repo_snapshot(SignatureRef("org/lora-00", "model"))
    assert time.perf_counter() - started >= 1.0  # the Retry-After, waited for
    assert snapshot.ref.revision == hub.repo("org/lora-00").refs["refs/heads/main"]
    log = hub.fault_log
    assert log.statuses[429] == 1 and log.retried == 1 and log.early == 0 and log.repeats[("GET", path)] == 2


def test_retries_are_bounded_and_a_long_retry_after_is_not_waited_for(hub):
    adapters(hub, 1)
    waits: list[float] = []

    def info():
        return HfApi().repo_info("org/lora-00")

    hub.faults = Faults(rate_limited=1.0, retry_after=2)  # every read answered 429
    with pytest.raises(HfHubHTTPError, match="429"):
        with_retries(info, "org/lora-00", sleep=waits.append)
    assert waits == [2.0] * RETRIES and hub.fault_log.statuses[429] == RETRIES + 1
    hub.faults, hub.fault_log.statuses[429] = Faults(rate_limited=1.0, retry_after=3600), 0
    with pytest.raises(HfHubHTTPError, match="429"):
        with_retries(info, "org/lora-00", sleep=waits.append)
    assert len(waits) == RETRIES and hub.fault_log.statuses[429] == 1  # an hour: not waited for, said at once
    hub.faults = Faults(broken=1.0, kinds=("error",))  # 500 on every read of the repo: 1, 2, 4 s between tries
    waits.clear()
    with pytest.raises(HfHubHTTPError, match="500"):
        with_retries(info, "org/lora-00", sleep=waits.append)
    assert waits == [1.0, 2.0, 4.0]


def test_a_repo_that_keeps_failing_is_unavailable_with_what_to_do(hub, hf_hub_cache, monkeypatch):
    adapters(hub, 1)
    hub.faults = Faults(broken=1.0, kinds=("error",))
    monkeypatch.setattr(
        "fisherhub.hub.snapshot.with_retries", lambda call, where: with_retries(call, where, sleep=lambda seconds: None)
    )
    with pytest.raises(HubUnavailableError, match=r"answered 500 \(server error\).*run again later"):
        repo_snapshot(SignatureRef("org/lora-00", "model"))
    assert hub.fault_log.statuses[500] == RETRIES + 1


def test_a_paginated_listing_is_followed_to_its_last_page(hub, hf_hub_cache):
    ids = adapters(hub, 10)
    hub.faults = Faults(page_size=3)
    assert sorted(s.ref.repo_id for s in listed_adapters(BASE)) == ids
    pages = [p for m, p, _ in hub.requests if p == "/api/models"]
    assert len(pages) == 4  # 3 + 3 + 3 + 1
    response = HfApi().list_models(filter=f"base_model:adapter:{BASE}", limit=5)
    assert len(list(response)) == 5


def test_repos_failing_after_listing_are_skipped_with_their_reason(hub, hf_hub_cache, tmp_path, capsys):
    ids = adapters(hub, 12)

    def kinds(seed: int) -> dict[str, str]:
        return Faults(seed=seed, broken=0.2, kinds=("gone", "truncated")).broken_repos(ids)

    seed = seed_where(lambda s: sorted(set(kinds(s).values())) == ["gone", "truncated"])
    broken = kinds(seed)
    # a fifth of the reads answered 429 (the paths name commit ids, new each run: some are always drawn)
    hub.faults = Faults(seed=seed, broken=0.2, kinds=("gone", "truncated"), rate_limited=0.2, page_size=5)
    command = [
        "index",
        "build",
        BASE,
        "--push",
        "datasets/org/index",
        "--work",
        str(tmp_path / "work"),
        "--workers",
        "4",
    ]
    assert main(command) == 0
    out = capsys.readouterr().out
    log = hub.fault_log
    assert f"{len(hub.requests)} requests to the Hub in" in out  # every request the server answered, counted
    assert f"{log.statuses[429]} answered 429 (rate limited, sent again)" in out and log.statuses[429] > 0
    summary = IndexSummary.of(
        load_index("datasets/org/index").table, BASE, load_index("datasets/org/index").state["repos"]
    )
    assert summary.rows == len(ids) - len(broken) and summary.problems == len(broken)
    assert {repo for repo, _ in index_keys("datasets/org/index")} == set(ids) - set(broken)
    reasons = {
        e["repo_id"]: e["problems"][0][1] for e in load_index("datasets/org/index").state["repos"] if e["problems"]
    }
    assert set(reasons) == set(broken)
    for repo, kind in broken.items():
        assert ("repository not found" if kind == "gone" else "not a readable safetensors signature") in reasons[
            repo
        ].lower()
    assert hub.fault_log.early <= hub.fault_log.statuses[429]  # at most hf_hub_download's one HEAD at once


def test_a_killed_build_resumes_with_nothing_lost_or_twice(hub, hf_hub_cache, tmp_path):
    ids = adapters(hub, 24)
    hub.faults = Faults(seed=1, latency=(0.02, 0.04))
    work, script = (
        tmp_path / "work",
        (
            "import sys; from fisherhub.hub.signature_index import build_index; "
            "build_index(sys.argv[1], sys.argv[2], work=sys.argv[3], workers=2)"
        ),
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, BASE, "datasets/org/killed", str(work)],
        env={**os.environ, "HF_HUB_CACHE": str(tmp_path / "child-cache")},
    )
    journal = work / "journal.jsonl"
    while child.poll() is None and (not journal.is_file() or journal.read_text().count("\n") < 8):
        time.sleep(0.02)
    assert child.poll() is None, "the build ended before it could be killed"
    child.send_signal(signal.SIGKILL)
    child.wait()
    journaled = {line.split('"repo_id": "')[1].split('"')[0] for line in journal.read_text().splitlines()}
    assert 8 <= len(journaled) < len(ids)
    with pytest.raises(RepoNotFoundError):  # nothing was pushed
        load_index("datasets/org/killed")
    hub.requests.clear()
    build_index(BASE, "datasets/org/killed", work=work, workers=2)
    read_again = {p.split("/resolve/")[0].strip("/") for m, p, _ in hub.requests if "/resolve/" in p and "lora" in p}
    assert read_again == set(ids) - journaled  # the journaled repos are not read again
    build_index(BASE, "datasets/org/whole", work=tmp_path / "whole", workers=2)
    assert index_keys("datasets/org/killed") == index_keys("datasets/org/whole")
    assert len(index_keys("datasets/org/killed")) == len(ids)


def test_an_update_reads_only_the_adapters_that_changed(hub, hf_hub_cache, tmp_path):
    ids = adapters(hub, 30)
    hub.faults = Faults(seed=2, rate_limited=0.02, page_size=8)
    build_index(BASE, "datasets/org/index", work=tmp_path / "work", workers=4)
    changed = adapters(hub, 1, start=7, seed=1) + adapters(hub, 1, start=21, seed=1)
    hub.requests.clear()
    commit, summary, read = update_index("datasets/org/index", work=tmp_path / "update", workers=4)
    assert commit is not None and read == 2 and summary.rows == len(ids)
    named = {
        p.split("/")[4] if p.startswith("/api/models/") else p.split("/")[2] for m, p, _ in hub.requests if "lora-" in p
    }
    assert named == {repo.split("/")[1] for repo in changed}  # no request for any adapter that did not change
    table = load_index("datasets/org/index").table
    commits = dict(zip(table.column("repo_id").to_pylist(), table.column("commit").to_pylist()))
    assert all(commits[repo] == hub.repo(repo).refs["refs/heads/main"] for repo in ids)


class _NoBackoff:
    """``time`` for ``huggingface_hub``'s backoff (``utils._http``): its sleeps recorded, not waited for."""

    def __init__(self, waits: list[float]):
        self.sleep = waits.append

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_a_repo_the_hub_could_not_serve_is_tried_once_more_without_backoff(hub, hf_hub_cache, tmp_path, monkeypatch):
    import huggingface_hub.utils._http as client_http

    ids = adapters(hub, 4)
    failing = ids[1]
    seed = seed_where(lambda s: Faults(seed=s, broken=0.25, kinds=("error",)).broken_repos(ids) == {failing: "error"})
    hub.faults = Faults(seed=seed, broken=0.25, kinds=("error",))
    waits: list[float] = []
    monkeypatch.setattr(client_http, "time", _NoBackoff(waits))

    def heads() -> int:
        return sum(method == "HEAD" and f"/{failing}/" in path for method, path, _ in hub.requests)

    def reads() -> int:  # any request naming the repo (an update asks its files, then each file's size)
        return sum(f"/{failing}/" in path for _, path, _ in hub.requests)

    def reason() -> str:
        entry = next(e for e in load_index("datasets/org/index").state["repos"] if e["repo_id"] == failing)
        assert entry["retry"] and entry["rows"] == 0
        return entry["problems"][0][1]

    build_index(BASE, "datasets/org/index", work=tmp_path / "work", workers=2)
    assert heads() == 6 and sum(waits) >= 20  # the client's backoff at the first read: 5 retries, 23 s
    assert "answered 500 (server error) and still did after retrying" in reason()
    hub.requests.clear(), waits.clear()
    build_index(BASE, "datasets/org/index", work=tmp_path / "work", workers=2)  # run again: the journal resumes
    assert heads() == 1 and waits == []
    changed = adapters(hub, 1, start=3, seed=1)
    hub.requests.clear()
    commit, summary, read = update_index("datasets/org/index", work=tmp_path / "update", workers=2)
    assert commit is not None and read == 2 and reads() == 1 and waits == []  # one request, no backoff
    assert summary.problems == 1 and "again, to a single attempt" in reason()  # still skipped, with its reason
    assert changed[0] in {repo for repo, _ in index_keys("datasets/org/index")}
    hub.requests.clear()
    commit, summary, read = update_index("datasets/org/index", work=tmp_path / "update-2", workers=2)
    assert commit is None and read == 1 and reads() == 1 and summary.problems == 1  # nothing new: not pushed
    hub.faults = Faults()  # the Hub serves it again
    commit, summary, read = update_index("datasets/org/index", work=tmp_path / "update-3", workers=2)
    assert commit is not None and read == 1 and summary.problems == 0 and summary.rows == len(ids)
    assert waits == []


def test_a_single_attempt_still_waits_for_retry_after(hub, hf_hub_cache, monkeypatch):
    adapters(hub, 1)
    commit = hub.repo("org/lora-00").refs["refs/heads/main"]
    path = next(p for p in hub.repo("org/lora-00").commits[commit].files if p.endswith(".safetensors"))
    ref = SignatureRef("org/lora-00", "model", commit, path)
    drawn = f"/org/lora-00/resolve/<commit>/{path}"
    seed = seed_where(
        lambda s: Faults(seed=s).draw("429", "HEAD", drawn, 0) < 0.5 <= Faults(seed=s).draw("429", "HEAD", drawn, 1)
    )
    hub.faults = Faults(seed=seed, rate_limited=0.5, retry_after=1)
    started = time.perf_counter()
    assert load_hub_signature(ref, once=True).metadata["base_model"] == BASE
    assert time.perf_counter() - started >= 1.0  # the Retry-After, waited for
    log = hub.fault_log
    assert log.statuses[429] == 1 and log.retried == 1 and log.early == 0
    shutil.rmtree(hf_hub_cache)  # not read from the cache: asked again
    hub.faults, hub.fault_log, waits = Faults(rate_limited=1.0, retry_after=2), FaultLog(), []
    monkeypatch.setattr(
        "fisherhub.hub.read.with_retries",
        lambda call, where, statuses: with_retries(call, where, sleep=waits.append, statuses=statuses),
    )
    with pytest.raises(HubUnavailableError, match=r"answered 429 \(rate limited\) and still did after retrying"):
        load_hub_signature(ref, once=True)
    assert waits == [2.0] * RETRIES and hub.fault_log.statuses[429] == RETRIES + 1


def test_the_second_stage_waits_for_retry_after_and_peft_sends_no_request(hub, hf_hub_cache, tmp_path):
    """A 429 answered to the weights file's size no longer skips the adapter: asked again after its Retry-After;
    peft then loads it from the Hub cache, with no request of its own (its existence check has no retries)."""
    from fisherhub.selection.peft_loading import checked_adapter_on
    from fisherhub.selection.rows import AdapterLocation
    from fisherhub.testing.hub_repos import save_random_lora
    from fisherhub.testing.tiny_models import tiny_causal_lm

    model = tiny_causal_lm("llama", tie_word_embeddings=False)
    saved = save_random_lora(model, tmp_path / "lora", 0, BASE)
    commit = put_repo(hub, "org/lora-00", {p.name: p.read_bytes() for p in saved.iterdir()})
    weights, config = (
        f"/org/lora-00/resolve/<commit>/{name}" for name in ("adapter_model.safetensors", "adapter_config.json")
    )
    others = [("HEAD", weights, 1), ("HEAD", weights, 2), ("GET", weights, 0), ("HEAD", config, 0), ("GET", config, 0)]
    seed = seed_where(
        lambda s: (
            Faults(seed=s).draw("429", "HEAD", weights, 0) < 0.1
            and all(Faults(seed=s).draw("429", *request) >= 0.1 for request in others)
        )
    )
    hub.faults = Faults(seed=seed, rate_limited=0.1, retry_after=1)
    started = time.perf_counter()
    with checked_adapter_on(model, AdapterLocation("org/lora-00", commit), BASE, None, None) as peft_model:
        assert time.perf_counter() - started >= 1.0  # the Retry-After, waited for
        assert any("lora_A" in name for name, _ in peft_model.named_parameters())
        sent = len(hub.requests)
    log = hub.fault_log
    assert log.statuses[429] == 1 and log.retried == 1 and log.early == 0
    assert [method for method, path, _ in hub.requests if path.endswith("adapter_model.safetensors")] == [
        "HEAD",  # its size (answered 429)
        "HEAD",  # again, after the Retry-After
        "HEAD",  # hf_hub_download into the cache
        "GET",
    ]
    assert len(hub.requests) == sent


def test_hub_serve_busy_answers_as_a_busy_hub(tmp_path):
    process, printed = serve(None, "--busy", "--seed", "1")  # seed 1: one of the 40 answered 429
    try:
        endpoint, timings, statuses = printed["HF_ENDPOINT"], [], []
        for k in range(40):
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(f"{endpoint}/api/models?search=x{k}") as answer:
                    statuses.append(answer.status)
            except urllib.error.HTTPError as exc:
                statuses.append(exc.code)
                assert exc.code == 429 and exc.headers["Retry-After"] == str(BUSY_HUB.retry_after)
            timings.append(time.perf_counter() - started)
        low, high = BUSY_HUB.latency
        assert min(timings) >= low and max(timings) > (low + high) / 2  # drawn in [50, 150] ms
        expected = [
            dataclasses.replace(BUSY_HUB, seed=1).draw("429", "GET", "/api/models", k) < 0.02 for k in range(40)
        ]
        assert [status == 429 for status in statuses] == expected and sum(expected) == 1
    finally:
        stop(process)


def test_a_slow_repo_holds_one_worker_and_the_others_go_on():
    def read(item: int) -> int:
        time.sleep(0.6 if item == 0 else 0.01)  # item 0: a repo whose requests the client backs off on
        return item

    started = time.perf_counter()
    finished = [outcome.value for outcome in bounded_completed(read, range(16), workers=2)]
    assert sorted(finished) == list(range(16)) and finished[-1] == 0  # the other 15 went on meanwhile
    assert time.perf_counter() - started < 0.6 + 15 * 0.01 + 1.0
    started_items: list[int] = []
    outcomes = bounded_completed(lambda item: started_items.append(item) or read(item), range(40), workers=2)
    assert next(outcomes).value != 0
    outcomes.close()  # the caller stops: the items not started are cancelled
    assert len(started_items) < 10
