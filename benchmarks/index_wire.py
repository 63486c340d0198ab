"""The signature index built end to end through the local Hub server, as the real Hub answers a client that
reads thousands of repos (``fisherhub.testing.hub_faults``): 50–150 ms drawn per request, 2% of reads answered
HTTP 429 with ``Retry-After: 1``, listings paginated 1,000 repos a page (``Link: <...>; rel="next"``), and 1%
of the adapters failing after being listed (404, 500 on every read, or a signature file served truncated).
All seeded.

Setup, not measured: N signed adapters written straight into the server's store, laid out as ``fisherhub push``
writes them (the signature file, ``.fisher_signatures/index.json``, a card with the signature block) plus one
of 10 random LoRAs of a tiny random Llama (``TinyBase``): the signatures are synthetic (m = 4,096, the 10
domains of ``benchmarks.index.Signatures``) but of that model's spec, so a target given as data is sketched
under it and the second stage loads the shortlisted adapters onto it. Everything measured goes through HTTP,
with ``WORKERS`` repos read at once:

- **build** at each N: ``build_index`` (one paginated listing, then each repo's signature: HEAD for its size,
  then ``hf_hub_download``); seconds, requests, 429s answered, requests sent again after a 429 / 5xx, those
  sent before the ``Retry-After`` had passed, rows, and each failing repo skipped with its reason (checked
  against the repos the faults broke: none lost, none extra);
- **kill and resume** (at ``--kill-size``): a build in a subprocess, killed (SIGKILL) once half the repos are
  journaled, then resumed in this process: its seconds and requests against a full build, and the index it
  pushes against the uninterrupted one (the same rows, none twice);
- **update** at each N: first with nothing changed (what an update costs at least: the listing, loading the
  index, one attempt at each adapter the Hub could not serve), then after 1% of the adapters pushed a new
  signature: ``update_index``'s requests and seconds as a share of the build's, split into reading the changed
  adapters, reading others again (those the Hub could not serve before: one attempt each, no backoff) and the
  rest (listing, loading the index, pushing the rows read as one more shard); then another 1% from another work
  folder, and another with the whole index pushed again (what one update in ``appending_updates`` + 1 does once
  the rows replaced pass ``shards.STALE_SHARE``), side by side, and the average over that cycle;
- **rank** at each N, cold and warm cache: ``select_adapter(target, index=)`` with a signature target (the
  index's shortlist ranked from the shortlisted files), and with a target given as data (``TARGET_TEXTS``,
  sketched under the tiny model) with the two-stage selection, ``rerank=3`` and ``rerank="halving"`` (the
  default budget).

Sizes not measured are extrapolated (labelled) by a line through the measured ones.

    nice -n 10 python -m benchmarks.index_wire --sizes 1000 2000 --kill-size 1000      # ≈ 16 min, crowded 2 cores
    nice -n 10 python -m benchmarks.index_wire --sizes 10000 --kill-size 0 --rank-size 0 --output-dir DIR  # ≈ 10 min
    python -m benchmarks.index_wire --quick       # N = 60 (and 120 written from the rows), 2 workers: QUICK_FAULTS
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from benchmarks.local_hub import SERVER, fresh_cache, fresh_hub  # noqa: E402  (before huggingface_hub)

import torch  # noqa: E402
from huggingface_hub.utils import logging as hf_logging  # noqa: E402

from benchmarks.index import BASE, DOMAINS, M, TARGET_DOMAIN, Signatures, write_index  # noqa: E402
from benchmarks.synthetic import add_output_arguments, machine_info, write_results  # noqa: E402
from fisherhub.hub.signature_index import build_index, shards, update_index  # noqa: E402
from fisherhub.hub.signature_index.shards import MAX_DELTAS  # noqa: E402
from fisherhub.hub.signature_index.store import load_index  # noqa: E402
from fisherhub.selection import select_adapter  # noqa: E402
from fisherhub.testing.hub_faults import BUSY_HUB, Faults  # noqa: E402
from fisherhub.testing.hub_repos import put_repo, save_random_lora, signed_adapter_files  # noqa: E402

WORKERS = 16
#: --quick: 2 workers journal 8 repos at a time, and the build is killed once a quarter of its 60 repos are
#: journaled, so that it is most often killed while it reads (the rest takes it ~0.5 s at 1-3 ms a request)
QUICK_WORKERS, QUICK_KILL_SHARE = 2, 0.25
FAULTS = dataclasses.replace(BUSY_HUB, seed=35)
#: --quick: no 500s (``huggingface_hub`` sends a HEAD answered 500 again 5 times, 23 s in all); 1% of reads
#: answered 429 with Retry-After 0 (the client still waits 1 s after each: ``huggingface_hub`` adds one; seed 35
#: answers 4 of the 60-repo build's 201 requests so, which the quick test needs: another seed if a change leaves none)
QUICK_FAULTS = Faults(
    seed=35,
    latency=(0.001, 0.003),
    rate_limited=0.01,
    retry_after=0,
    page_size=10,
    broken=0.1,
    kinds=("gone", "truncated"),
)
#: the target given as data (the two-stage selections): 40 short documents
TARGET_TEXTS = [f"the river {word} number {i} runs by the {word} mill again" for i in range(8) for word in "abcde"]
#: the selections ranked at each N: a signature target, and the target's data with the two second stages
SELECTIONS = {
    "signature target": {},
    "data target, rerank=3": {"rerank": 3},
    "data target, rerank=halving": {"rerank": "halving"},
}


class TinyBase:
    """What ``BASE`` stands for: a tiny random Llama and its tokenizer (``testing.tiny_models``), the spec of
    m = ``M`` the adapters' signatures take (``lm.specs.spec_for_model``), and ``loras`` random LoRAs of it
    (``save_random_lora``: ``adapter_config.json`` naming ``BASE`` and ``adapter_model.safetensors``), adapter i
    holding LoRA i mod ``loras``, which the second stage loads onto the model."""

    def __init__(self, folder: Path, loras: int = DOMAINS):
        from fisherhub.lm.specs import spec_for_model
        from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

        self.model, self.tokenizer = tiny_causal_lm("llama", tie_word_embeddings=False), tiny_tokenizer()
        self.spec = spec_for_model(self.model, self.tokenizer, m=M)
        self.lora = []
        for k in range(loras):
            saved = save_random_lora(self.model, folder / f"lora-{k}", k, BASE)
            self.lora.append(
                {name: (saved / name).read_bytes() for name in ("adapter_config.json", "adapter_model.safetensors")}
            )

    def files(self, i: int, signature) -> dict[str, bytes]:
        """Adapter ``i``'s files: signed with ``signature``, with LoRA i mod ``loras``."""
        return {**signed_adapter_files(signature, BASE), **self.lora[i % len(self.lora)]}


def add_adapters(maker: Signatures, tiny: TinyBase, signatures: list, stop: int) -> None:
    """Adapters ``bench/lora-<i>`` for i from ``len(signatures)`` to ``stop``, written into the store; their
    signatures appended to ``signatures``."""
    for i in range(len(signatures), stop):
        signatures.append(maker.make(i % DOMAINS, f"bench/domain-{i % DOMAINS}-part-{i}"))
        put_repo(SERVER, repo_name(i), tiny.files(i, signatures[i]), title="adapter with signature")


def repo_name(i: int) -> str:
    return f"bench/lora-{i:05d}"


def counted(fn) -> tuple[object, dict]:
    """``fn()`` and what it cost on the wire: seconds, requests, statuses, retries (counted by the server)."""
    log = SERVER.fault_log
    before = (len(SERVER.requests), dict(log.statuses), log.retried, log.early, len(log.early_requests))
    sent, received = len(SERVER.sent), len(SERVER.received)
    started, cpu = time.perf_counter(), time.process_time()
    value = fn()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    statuses = {s: n - before[1].get(s, 0) for s, n in log.statuses.items() if n - before[1].get(s, 0)}
    return value, {
        "seconds": seconds,
        "cpu_seconds_client_and_server": cpu,
        "requests": len(SERVER.requests) - before[0],
        "bytes_uploaded": sum(SERVER.received[received:]),
        "bytes_downloaded": sum(SERVER.sent[sent:]),
        "answered_429": statuses.get(429, 0),
        "answered_5xx": sum(n for s, n in statuses.items() if s >= 500),
        "retried": log.retried - before[2],
        "retried_before_retry_after": log.early - before[3],
        "retried_before_retry_after_by_kind": dict(
            collections.Counter(
                f"{m} {'/resolve/' if '/resolve/' in p else p}" for m, p in log.early_requests[before[4] :]
            )
        ),
        "statuses": {str(s): n for s, n in sorted(statuses.items())},
    }


def skipped(index: str) -> dict[str, str]:
    """Repo id -> the reason its signature was skipped, from the pushed index's state file."""
    state = load_index(index).state["repos"]
    return {e["repo_id"]: "; ".join(reason for _, reason in e["problems"]) for e in state if e["problems"]}


def reason_kind(reason: str) -> str:
    for words, kind in (("not found", "gone"), ("server error", "error"), ("signature", "truncated")):
        if words in reason:
            return kind
    return "other"


def build_run(n: int, work: Path, workers: int) -> dict:
    fresh_cache(work)
    index = f"datasets/bench/wire-{n}"
    (_, summary), cost = counted(lambda: build_index(BASE, index, work=work / f"build-{n}", workers=workers))
    broken = SERVER.faults.broken_repos(repo_name(i) for i in range(n))
    reasons = skipped(index)
    rows = load_index(index).table
    keys = list(zip(rows.column("repo_id").to_pylist(), rows.column("path").to_pylist()))
    return {
        "adapters": n,
        **cost,
        "rows": summary.rows,
        "distinct_rows": len(set(keys)),
        "broken": dict(collections.Counter(broken.values())),
        "skipped": dict(collections.Counter(reason_kind(why) for why in reasons.values())),
        "skipped_not_broken": sorted(set(reasons) - set(broken)),
        "broken_not_skipped": sorted(set(broken) - set(reasons)),
        "skipped_with_another_reason": sorted(r for r in broken if reason_kind(reasons.get(r, "")) != broken[r]),
        "reasons": {
            kind: next(why for r, why in reasons.items() if broken.get(r) == kind) for kind in set(broken.values())
        },
        "index": index,
    }


def kill_and_resume(n: int, work: Path, full: dict, workers: int, share: float = 0.5) -> dict:
    """A build in a subprocess killed mid-way (SIGKILL once a ``share`` of the repos are journaled), then resumed
    here."""
    folder, index = work / f"killed-{n}", f"datasets/bench/wire-killed-{n}"
    environment = {**os.environ, "HF_HUB_CACHE": str(fresh_cache(work)), "HF_HUB_VERBOSITY": "error"}
    script = (
        "import sys; from fisherhub.hub.signature_index import build_index; "
        "build_index(sys.argv[1], sys.argv[2], work=sys.argv[3], workers=int(sys.argv[4]))"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, BASE, index, str(folder), str(workers)], env=environment, cwd=work
    )
    journal, started = folder / "journal.jsonl", time.perf_counter()
    while child.poll() is None and (not journal.is_file() or journal.read_text().count("\n") < n * share):
        time.sleep(0.05)
    running = child.poll() is None
    child.send_signal(signal.SIGKILL)
    child.wait()
    killed_after = time.perf_counter() - started
    journaled = journal.read_text().count("\n")
    fresh_cache(work)
    (_, summary), cost = counted(lambda: build_index(BASE, index, work=folder, workers=workers))
    resumed, whole = load_index(index).table, load_index(full["index"]).table
    keys = sorted(zip(resumed.column("repo_id").to_pylist(), resumed.column("path").to_pylist()))
    whole_keys = sorted(zip(whole.column("repo_id").to_pylist(), whole.column("path").to_pylist()))
    return {
        "adapters": n,
        "killed_mid_build": running,
        "killed_after_seconds": killed_after,
        "repos_journaled_at_kill": journaled,
        "resume": cost,
        "resume_share_of_build_seconds": cost["seconds"] / full["seconds"],
        "resume_share_of_build_requests": cost["requests"] / full["requests"],
        "rows": summary.rows,
        "duplicate_rows": len(keys) - len(set(keys)),
        "same_rows_as_uninterrupted": keys == whole_keys
        and resumed.sort_by("repo_id").column("joint").equals(whole.sort_by("repo_id").column("joint")),
    }


def adapters_named(requests: list) -> list[str]:
    """The adapter (``bench/lora-<i>``) each of ``requests`` (the server's (method, path, range)) names, if any."""
    named = [path.removeprefix("/api/models").split("/")[1:3] for _, path, _ in requests]
    return ["/".join(parts) for parts in named if parts[:1] == ["bench"] and parts[1].startswith("lora-")]


def update_run(n: int, maker: Signatures, tiny: TinyBase, signatures: list, work: Path, full: dict, workers: int):
    """``update_index`` from the build's work folder (as ``fisherhub index update`` after ``index build`` on one
    machine: the rows the build checked are not checked again) with nothing changed, then after 1% of the
    adapters pushed a new signature; then after another 1% changed, from an empty work folder (another machine:
    every row checked, the heatmap drawn again); each pushes its rows as one more shard. Then another 1%, with
    the whole index pushed again (what an update does once the rows replaced pass ``shards.STALE_SHARE``), and
    the cost of an update averaged over that cycle."""
    broken = SERVER.faults.broken_repos(repo_name(i) for i in range(n))
    unavailable = sorted(r for r, kind in broken.items() if kind == "error")
    fresh_cache(work)
    (commit, _, read), floor = counted(lambda: update_index(full["index"], work=work / f"build-{n}", workers=workers))
    unchanged = {"pushed": commit is not None, "repos_read": read, **floor}
    unchanged["share_of_build_seconds"] = floor["seconds"] / full["seconds"]
    runs = []
    readable = [i for i in range(n) if repo_name(i) not in broken]
    for offset, folder, deltas in (
        (0, f"build-{n}", MAX_DELTAS),
        (1, f"elsewhere-{n}", MAX_DELTAS),
        (2, f"elsewhere-{n}", 0),
    ):
        changed = readable[offset::100][: max(1, n // 100)]
        for i in changed:
            signatures[i] = maker.make(i % DOMAINS, f"bench/domain-{i % DOMAINS}-part-{i}")
            put_repo(SERVER, repo_name(i), tiny.files(i, signatures[i]), title="a new signature")
        fresh_cache(work)
        shards.MAX_DELTAS = deltas  # 0: the whole index pushed
        try:
            (_, _, read), cost = counted(
                lambda folder=folder: update_index(full["index"], work=work / folder, workers=workers)
            )
        finally:
            shards.MAX_DELTAS = MAX_DELTAS
        adapters = adapters_named(SERVER.requests[-cost["requests"] :])
        changed_names = {repo_name(i) for i in changed}
        runs.append(
            {
                "changed": len(changed),
                "repos_read": read,
                **cost,
                "appended": "deltas" in load_index(full["index"]).state,
                "requests_reading_changed_adapters": sum(name in changed_names for name in adapters),
                "requests_reading_other_adapters": sum(name not in changed_names for name in adapters),
                "share_of_build_requests": cost["requests"] / full["requests"],
                "share_of_build_seconds": cost["seconds"] / full["seconds"],
                "share_of_build_requests_reading_changed": sum(name in changed_names for name in adapters)
                / full["requests"],
            }
        )
    appending = appending_updates(0.01)
    averaged = (appending * runs[0]["seconds"] + runs[2]["seconds"]) / (appending + 1)
    return {
        "adapters": n,
        "unavailable_before": len(unavailable),
        **runs[0],
        "nothing_changed": unchanged,
        "elsewhere": runs[1],
        "whole_index": runs[2],
        "appending_updates_per_whole_push": appending,
        "averaged_seconds": averaged,
        "averaged_share_of_build_seconds": averaged / full["seconds"],
    }


def appending_updates(changed: float) -> int:
    """How many updates in a row, each replacing the rows of a share ``changed`` of the adapters, push their rows as
    one more shard before the next pushes the whole index (``shards.Replacement.appends``: the rows behind at most
    ``STALE_SHARE`` of those stored, fewer than ``MAX_DELTAS`` update shards)."""
    count = 0
    while count + 1 <= MAX_DELTAS and (count + 1) * changed <= shards.STALE_SHARE * (1 + (count + 1) * changed):
        count += 1
    return count


def rank_run(n: int, target, tiny: TinyBase, index: str, work: Path, selections: Collection[str] = SELECTIONS) -> dict:
    """Each of ``selections`` (names in ``SELECTIONS``) from the index ``index``, from an empty Hub cache
    (cold), then again (warm)."""
    out: dict = {"adapters": n, "built": True}
    for name in selections:
        options = SELECTIONS[name]
        given = (TARGET_TEXTS, {"model": tiny.model, "tokenizer": tiny.tokenizer}) if options else (target, {})
        run: dict = {}
        for phase in ("cold", "warm"):
            if phase == "cold":
                fresh_cache(work)
            selection, run[phase] = counted(lambda: select_adapter(given[0], index=index, **given[1], **options))
        run["top1"] = selection.ranking[0].candidate
        if selection.rerank is not None:
            second = selection.rerank
            run.update(measured=len(second.measured), passes=second.passes, second_stage_seconds=second.seconds)
            run["not_measured"] = [skip.reason for skip in second.skipped]
        out[name] = run
    return out


def extrapolate(runs: list[dict], key: str, size: int) -> float:
    """``key`` at ``size`` by the least-squares line through the measured runs (a + b N)."""
    xs, ys = [r["adapters"] for r in runs], [r[key] for r in runs]
    if len(xs) == 1:
        return ys[0] * size / xs[0]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
    return mean_y + slope * (size - mean_x)


def plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    shares = {}
    if "kill" in result:
        kill = result["kill"]
        shares[f"N={kill['adapters']:,} resume after kill: seconds"] = kill["resume_share_of_build_seconds"]
        shares[f"N={kill['adapters']:,} resume after kill: requests"] = kill["resume_share_of_build_requests"]
    for update in result["update"]:
        n = f"N={update['adapters']:,} update 1%"
        shares[f"{n}: seconds"] = update["share_of_build_seconds"]
        shares[f"{n}: requests"] = update["share_of_build_requests"]
        shares[f"{n}, another work folder: seconds"] = update["elsewhere"]["share_of_build_seconds"]
        if "whole_index" in update:
            shares[f"{n}, whole index pushed: seconds"] = update["whole_index"]["share_of_build_seconds"]
            shares[f"{n}, averaged over the cycle: seconds"] = update["averaged_share_of_build_seconds"]
    figure = Figure(figsize=(15, max(4.5, 0.22 * len(shares) + 1.2)))
    left, middle, right = figure.subplots(1, 3, gridspec_kw={"width_ratios": [1, 0.8, 1]})
    builds = result["build"]
    sizes = [b["adapters"] for b in builds]
    left.plot(sizes, [b["seconds"] for b in builds], "o-", label="build, measured")
    more = result["extrapolated"]
    if more:
        left.plot([e["adapters"] for e in more], [e["seconds"] for e in more], "x--", label="build, extrapolated")
    for name, marker in zip(SELECTIONS, "s^v"):
        runs = [r for r in result["rank"] if name in r]
        left.plot(
            [r["adapters"] for r in runs],
            [r[name]["cold"]["seconds"] for r in runs],
            f"{marker}-",
            label=f"select_adapter(index=), cold: {name}",
        )
    left.set(xlabel="adapters", ylabel="seconds", title=f"Through the wire, {result['workers']} workers")
    left.legend(fontsize=7, loc="upper left")
    middle.bar([str(n) for n in sizes], [b["requests"] for b in builds], label="requests", color="tab:blue")
    middle.bar([str(n) for n in sizes], [b["answered_429"] for b in builds], label="answered 429", color="tab:red")
    middle.set(xlabel="adapters", ylabel="requests", title="Build: requests, 429s")
    middle.legend(fontsize=8)
    right.barh(list(shares), [100 * v for v in shares.values()], color="tab:green")
    right.invert_yaxis()
    right.tick_params(axis="y", labelsize=7)
    right.set(xlabel="% of a full build", title="Resume and update")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def print_tables(result: dict) -> None:
    faults = result["faults"]
    print(
        f"\nbuild through the wire: {faults['latency'][0] * 1000:.0f}-{faults['latency'][1] * 1000:.0f} ms per request, "
        f"{faults['rate_limited']:.0%} 429 (Retry-After {faults['retry_after']} s), pages of {faults['page_size']}, "
        f"{faults['broken']:.0%} broken; {result['workers']} workers"
    )
    header = ("adapters", "seconds", "requests", "429s", "5xx", "retried", "early", "rows", "skipped", "lost")
    print("  ".join(f"{h:>10}" for h in header))
    for b in result["build"]:
        lost = len(b["skipped_not_broken"]) + len(b["broken_not_skipped"]) + len(b["skipped_with_another_reason"])
        cells = (
            b["adapters"],
            f"{b['seconds']:.1f}",
            b["requests"],
            b["answered_429"],
            b["answered_5xx"],
            b["retried"],
            b["retried_before_retry_after"],
            b["rows"],
            sum(b["skipped"].values()),
            lost,
        )
        print("  ".join(f"{c!s:>10}" for c in cells))
    for e in result["extrapolated"]:
        print(
            f"{e['adapters']:>10}  {e['seconds']:>10.0f}  {e['requests']:>10.0f}  (extrapolated from the measured sizes)"
        )
    for r in result["rank"]:
        written = "" if r["built"] else " (index written from the rows)"
        for name in (name for name in SELECTIONS if name in r):
            run = r[name]
            measured = f"; {run['measured']} measured" if "measured" in run else ""
            print(
                f"select_adapter(index=) at N = {r['adapters']}{written}, {name}: cold {run['cold']['seconds']:.2f} s / "
                f"{run['cold']['requests']} requests, warm {run['warm']['seconds']:.2f} s / {run['warm']['requests']} "
                f"requests{measured}"
            )
    if "kill" in result:
        kill = result["kill"]
        print(
            f"\nkill and resume at N = {kill['adapters']}: killed after {kill['killed_after_seconds']:.1f} s with "
            f"{kill['repos_journaled_at_kill']} repos journaled; resume {kill['resume']['seconds']:.1f} s, "
            f"{kill['resume']['requests']} requests ({kill['resume_share_of_build_seconds']:.0%} / "
            f"{kill['resume_share_of_build_requests']:.0%} of a build); {kill['rows']} rows, "
            f"{kill['duplicate_rows']} twice, same rows as the uninterrupted build: {kill['same_rows_as_uninterrupted']}"
        )
    for update in result["update"]:
        floor = update["nothing_changed"]
        print(
            f"update at N = {update['adapters']}, nothing changed: {floor['seconds']:.1f} s, {floor['requests']} "
            f"requests ({floor['repos_read']} repos the Hub could not serve tried once; pushed: {floor['pushed']}); "
            f"{update['changed']} changed: {update['repos_read']} repos read, {update['seconds']:.1f} s, "
            f"{update['requests']} requests ({update['share_of_build_seconds']:.1%} of the build's seconds, "
            f"{update['share_of_build_requests']:.1%} of its requests; reading the changed adapters "
            f"{update['share_of_build_requests_reading_changed']:.1%}); another 1% from another work folder: "
            f"{update['elsewhere']['seconds']:.1f} s, {update['elsewhere']['requests']} requests "
            f"({update['elsewhere']['share_of_build_seconds']:.1%} / {update['elsewhere']['share_of_build_requests']:.1%})"
        )
        whole = update["whole_index"]
        print(
            f"  each pushed as one more shard: {update['appended']}, {update['elsewhere']['appended']} "
            f"({update['bytes_uploaded'] / 2**20:.1f} MB, {update['elsewhere']['bytes_uploaded'] / 2**20:.1f} MB "
            f"uploaded); another 1% pushing the whole index again: {whole['seconds']:.1f} s, {whole['requests']} "
            f"requests, {whole['bytes_uploaded'] / 2**20:.1f} MB uploaded "
            f"({whole['share_of_build_seconds']:.1%} of the build's seconds); 1 in "
            f"{update['appending_updates_per_whole_push'] + 1} such updates does: averaged "
            f"{update['averaged_seconds']:.1f} s ({update['averaged_share_of_build_seconds']:.1%})"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000], help="adapters built through the wire")
    parser.add_argument("--kill-size", type=int, help="N of the kill / resume run (default: the smallest; 0: none)")
    parser.add_argument("--extrapolate", type=int, nargs="*", default=[10000], help="sizes to extrapolate to")
    parser.add_argument(
        "--rank-size", type=int, default=10000, help="rank also at this N, from an index written from the rows (0: not)"
    )
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    faults, workers = (QUICK_FAULTS, QUICK_WORKERS) if args.quick else (FAULTS, WORKERS)
    if args.quick:
        args.sizes, args.kill_size, args.extrapolate, args.rank_size = [60], 60, [1000], 120
    torch.set_num_threads(1)
    result: dict = {
        "machine": machine_info(),
        "faults": {**faults.__dict__, "latency": list(faults.latency)},
        "workers": workers,
        "load_average_at_start": os.getloadavg(),
        "build": [],
        "rank": [],
        "update": [],
    }
    fresh_hub()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # not a warning per 429 answered
    with tempfile.TemporaryDirectory(prefix="fisherhub-index-wire-") as tmp:
        measure(args, faults, workers, result, Path(tmp))
        SERVER.faults = Faults()
        hf_logging.set_verbosity(verbosity)
    result["extrapolated"] = [
        {
            "adapters": size,
            "seconds": extrapolate(result["build"], "seconds", size),
            "requests": extrapolate(result["build"], "requests", size),
        }
        for size in args.extrapolate
        if size not in args.sizes
    ]
    result["load_average_at_end"] = os.getloadavg()
    print_tables(result)
    write_results("index_wire", result, lambda path: plot(result, path), args)


def measure(args: argparse.Namespace, faults: Faults, workers: int, result: dict, work: Path) -> None:
    """Each size built, ranked, (at the kill size) killed and resumed, and updated; then the ranking at
    ``args.rank_size`` from an index written from the rows."""
    kill_size = min(args.sizes) if args.kill_size is None else args.kill_size
    tiny = TinyBase(work / "lora", 2 if args.quick else DOMAINS)
    maker = Signatures(spec=tiny.spec)
    target = maker.make(TARGET_DOMAIN, "bench/target")
    signatures: list = []
    for n in sorted(set(args.sizes)):
        SERVER.faults = Faults()
        started = time.perf_counter()
        add_adapters(maker, tiny, signatures, n)
        print(f"N = {n}: {n} adapters written into the store in {time.perf_counter() - started:.1f} s", flush=True)
        SERVER.faults = faults
        full = build_run(n, work, workers)
        result["build"].append(full)
        print(f"  build: {full['seconds']:.1f} s, {full['requests']} requests", flush=True)
        result["rank"].append(rank_run(n, target, tiny, full["index"], work))
        print(f"  rank: {[round(result['rank'][-1][s]['cold']['seconds'], 1) for s in SELECTIONS]} s cold", flush=True)
        if n == kill_size:
            result["kill"] = kill_and_resume(n, work, full, workers, QUICK_KILL_SHARE if args.quick else 0.5)
            print(f"  kill and resume: {result['kill']['resume']['seconds']:.1f} s", flush=True)
        result["update"].append(update_run(n, maker, tiny, signatures, work, full, workers))
        print(f"  update: {result['update'][-1]['seconds']:.1f} s", flush=True)
    if args.rank_size and args.rank_size not in args.sizes:
        SERVER.faults = Faults()
        add_adapters(maker, tiny, signatures, args.rank_size)
        index = f"bench/wire-rows-{args.rank_size}"
        write_index(signatures[: args.rank_size], [repo_name(i) for i in range(args.rank_size)], index, work)
        SERVER.faults = faults
        selections = ["signature target"] if args.quick else SELECTIONS  # quick: the second stage once, above
        ranked = rank_run(args.rank_size, target, tiny, f"datasets/{index}", work, selections)
        result["rank"].append({**ranked, "built": False})
        print(f"  rank at {args.rank_size} (the index written from the rows): done", flush=True)


if __name__ == "__main__":
    main()
