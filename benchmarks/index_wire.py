"""The signature index built end to end through the local Hub server, as the real Hub answers a client that
reads thousands of repos (``fisherhub.testing.hub_faults``): 50–150 ms drawn per request, 2% of reads answered
HTTP 429 with ``Retry-After: 1``, listings paginated 1,000 repos a page (``Link: <...>; rel="next"``), and 1%
of the adapters failing after being listed (404, 500 on every read, or a signature file served truncated).
All seeded.

Setup, not measured: N signed adapters (m = 4,096, d = 576, laid out as ``fisherhub push`` writes them: the
signature file, ``.fisher_signatures/index.json``, a card with the signature block) written straight into the
server's store. Everything measured goes through HTTP, with ``WORKERS`` repos read at once:

- **build** at each N: ``build_index`` (one paginated listing, then each repo's signature: HEAD for its size,
  then ``hf_hub_download``); seconds, requests, 429s answered, requests sent again after a 429 / 5xx, those
  sent before the ``Retry-After`` had passed, rows, and each failing repo skipped with its reason (checked
  against the repos the faults broke: none lost, none extra);
- **kill and resume** (at ``--kill-size``): a build in a subprocess, killed (SIGKILL) once half the repos are
  journaled, then resumed in this process: its seconds and requests against a full build, and the index it
  pushes against the uninterrupted one (the same rows, none twice);
- **update** after 1% of the adapters pushed a new signature: ``update_index``'s requests and seconds as a
  share of the build's, split into reading the changed adapters, reading others again (those the Hub could not
  serve before) and the rest (listing, loading and pushing the index);
- **rank**: ``select_adapter(target, index=)`` (the default: a signature target, the index's shortlist
  ranked from the shortlisted files), cold and warm cache.

Sizes not measured are extrapolated (labelled) by a line through the measured ones.

    nice -n 10 python -m benchmarks.index_wire --sizes 1000 2000 --kill-size 1000      # ≈ 16 min, crowded 2 cores
    nice -n 10 python -m benchmarks.index_wire --sizes 5000 --kill-size 0 --rank-size 0   # the 5,000 build alone
    python -m benchmarks.index_wire --quick       # N = 60, 120: 1-3 ms a request, 10 a page, 10% broken, no 500s
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
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from benchmarks.local_hub import SERVER, fresh_cache, fresh_hub  # noqa: E402  (before huggingface_hub)

import torch  # noqa: E402
from huggingface_hub.utils import logging as hf_logging  # noqa: E402

from benchmarks.index import BASE, DOMAINS, TARGET_DOMAIN, Signatures, write_index  # noqa: E402
from benchmarks.synthetic import add_output_arguments, machine_info, write_results  # noqa: E402
from fisherhub.hub.signature_index import build_index, update_index  # noqa: E402
from fisherhub.hub.signature_index.store import load_index  # noqa: E402
from fisherhub.selection import select_adapter  # noqa: E402
from fisherhub.testing.hub_faults import BUSY_HUB, Faults  # noqa: E402
from fisherhub.testing.hub_repos import put_repo, signed_adapter_files  # noqa: E402

WORKERS = 16
FAULTS = dataclasses.replace(BUSY_HUB, seed=35)
#: --quick: no 500s (``huggingface_hub`` sends a HEAD answered 500 again 5 times, 23 s in all)
QUICK_FAULTS = Faults(
    seed=35,
    latency=(0.001, 0.003),
    rate_limited=0.02,
    retry_after=1,
    page_size=10,
    broken=0.1,
    kinds=("gone", "truncated"),
)


def add_adapters(maker: Signatures, signatures: list, stop: int) -> None:
    """Adapters ``bench/lora-<i>`` for i from ``len(signatures)`` to ``stop``, written into the store; their
    signatures appended to ``signatures``."""
    for i in range(len(signatures), stop):
        signatures.append(maker.make(i % DOMAINS, f"bench/domain-{i % DOMAINS}-part-{i}"))
        put_repo(SERVER, repo_name(i), signed_adapter_files(signatures[i], BASE), title="adapter with signature")


def repo_name(i: int) -> str:
    return f"bench/lora-{i:05d}"


def counted(fn) -> tuple[object, dict]:
    """``fn()`` and what it cost on the wire: seconds, requests, statuses, retries (counted by the server)."""
    log = SERVER.fault_log
    before = (len(SERVER.requests), dict(log.statuses), log.retried, log.early, len(log.early_requests))
    started, cpu = time.perf_counter(), time.process_time()
    value = fn()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    statuses = {s: n - before[1].get(s, 0) for s, n in log.statuses.items() if n - before[1].get(s, 0)}
    return value, {
        "seconds": seconds,
        "cpu_seconds_client_and_server": cpu,
        "requests": len(SERVER.requests) - before[0],
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


def build_run(n: int, work: Path) -> dict:
    fresh_cache(work)
    index = f"datasets/bench/wire-{n}"
    (_, summary), cost = counted(lambda: build_index(BASE, index, work=work / f"build-{n}", workers=WORKERS))
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


def kill_and_resume(n: int, work: Path, full: dict) -> dict:
    """A build in a subprocess killed mid-way (SIGKILL once half the repos are journaled), then resumed here."""
    folder, index = work / f"killed-{n}", f"datasets/bench/wire-killed-{n}"
    environment = {**os.environ, "HF_HUB_CACHE": str(fresh_cache(work)), "HF_HUB_VERBOSITY": "error"}
    script = (
        "import sys; from fisherhub.hub.signature_index import build_index; "
        "build_index(sys.argv[1], sys.argv[2], work=sys.argv[3], workers=int(sys.argv[4]))"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, BASE, index, str(folder), str(WORKERS)], env=environment, cwd=work
    )
    journal, started = folder / "journal.jsonl", time.perf_counter()
    while child.poll() is None and (not journal.is_file() or journal.read_text().count("\n") < n // 2):
        time.sleep(0.05)
    running = child.poll() is None
    child.send_signal(signal.SIGKILL)
    child.wait()
    killed_after = time.perf_counter() - started
    journaled = journal.read_text().count("\n")
    fresh_cache(work)
    (_, summary), cost = counted(lambda: build_index(BASE, index, work=folder, workers=WORKERS))
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


def update_run(n: int, maker: Signatures, signatures: list, work: Path, full: dict) -> dict:
    """1% of the adapters push a new signature; ``update_index`` brings the index up to date."""
    broken = SERVER.faults.broken_repos(repo_name(i) for i in range(n))
    changed = [i for i in range(0, n, 100) if repo_name(i) not in broken][: max(1, n // 100)]
    for i in changed:
        signatures[i] = maker.make(i % DOMAINS, f"bench/domain-{i % DOMAINS}-part-{i}")
        put_repo(SERVER, repo_name(i), signed_adapter_files(signatures[i], BASE), title="a new signature")
    fresh_cache(work)
    (_, _, read), cost = counted(lambda: update_index(full["index"], work=work / f"update-{n}", workers=WORKERS))
    named = [p.removeprefix("/api/models").split("/")[1:3] for _, p, _ in SERVER.requests[-cost["requests"] :]]
    adapters = ["/".join(parts) for parts in named if parts[:1] == ["bench"] and parts[1].startswith("lora-")]
    changed_names = {repo_name(i) for i in changed}
    return {
        "adapters": n,
        "changed": len(changed),
        "repos_read": read,
        **cost,
        "requests_reading_changed_adapters": sum(name in changed_names for name in adapters),
        "requests_reading_other_adapters": sum(name not in changed_names for name in adapters),
        "share_of_build_requests": cost["requests"] / full["requests"],
        "share_of_build_seconds": cost["seconds"] / full["seconds"],
        "share_of_build_requests_reading_changed": sum(name in changed_names for name in adapters) / full["requests"],
    }


def rank_run(n: int, target, index: str, work: Path) -> dict:
    out: dict = {"adapters": n, "built": True}
    for phase in ("cold", "warm"):
        if phase == "cold":
            fresh_cache(work)
        selection, cost = counted(lambda: select_adapter(target, index=index))
        out[phase] = cost
    out["top1"] = selection.ranking[0].candidate
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

    figure = Figure(figsize=(13, 4))
    left, middle, right = figure.subplots(1, 3)
    builds = result["build"]
    sizes = [b["adapters"] for b in builds]
    left.plot(sizes, [b["seconds"] for b in builds], "o-", label="build, measured")
    more = result["extrapolated"]
    left.plot([e["adapters"] for e in more], [e["seconds"] for e in more], "x--", label="build, extrapolated")
    left.plot(
        [r["adapters"] for r in result["rank"]],
        [r["cold"]["seconds"] for r in result["rank"]],
        "s-",
        label="select_adapter(index=), cold",
    )
    left.set(xlabel="adapters", ylabel="seconds", title=f"Through the wire, {result['workers']} workers")
    left.legend(fontsize=8)
    middle.bar(
        [str(b["adapters"]) for b in builds],
        [b["requests"] for b in builds],
        label="requests",
        color="tab:blue",
    )
    middle.bar(
        [str(b["adapters"]) for b in builds], [b["answered_429"] for b in builds], label="answered 429", color="tab:red"
    )
    middle.set(xlabel="adapters", ylabel="requests", title="Build: requests, 429s")
    middle.legend(fontsize=8)
    if "kill" not in result:
        right.set_axis_off()
        figure.tight_layout()
        figure.savefig(path, dpi=120)
        return
    shares = {
        "resume after kill\n(seconds)": result["kill"]["resume_share_of_build_seconds"],
        "resume after kill\n(requests)": result["kill"]["resume_share_of_build_requests"],
        "update, 1% changed\n(seconds)": result["update"]["share_of_build_seconds"],
        "update, 1% changed\n(requests)": result["update"]["share_of_build_requests"],
    }
    right.barh(list(shares), [100 * v for v in shares.values()], color="tab:green")
    right.set(xlabel="% of a full build", title=f"Resume and update at N = {result['kill']['adapters']:,}")
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
        print(
            f"select_adapter(index=) at N = {r['adapters']}{written}: cold {r['cold']['seconds']:.2f} s / "
            f"{r['cold']['requests']} requests, warm {r['warm']['seconds']:.2f} s / {r['warm']['requests']} requests"
        )
    if "kill" not in result:
        return
    kill, update = result["kill"], result["update"]
    print(
        f"\nkill and resume at N = {kill['adapters']}: killed after {kill['killed_after_seconds']:.1f} s with "
        f"{kill['repos_journaled_at_kill']} repos journaled; resume {kill['resume']['seconds']:.1f} s, "
        f"{kill['resume']['requests']} requests ({kill['resume_share_of_build_seconds']:.0%} / "
        f"{kill['resume_share_of_build_requests']:.0%} of a build); {kill['rows']} rows, "
        f"{kill['duplicate_rows']} twice, same rows as the uninterrupted build: {kill['same_rows_as_uninterrupted']}"
    )
    print(
        f"update at N = {update['adapters']}, {update['changed']} changed: {update['repos_read']} repos read, "
        f"{update['seconds']:.1f} s, {update['requests']} requests ({update['share_of_build_seconds']:.1%} of the "
        f"build's seconds, {update['share_of_build_requests']:.1%} of its requests; reading the changed adapters "
        f"{update['share_of_build_requests_reading_changed']:.1%})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000], help="adapters built through the wire")
    parser.add_argument(
        "--kill-size", type=int, help="N of the kill / resume and update runs (default: the smallest; 0: none)"
    )
    parser.add_argument("--extrapolate", type=int, nargs="*", default=[10000], help="sizes to extrapolate to")
    parser.add_argument(
        "--rank-size", type=int, default=10000, help="rank also at this N, from an index written from the rows (0: not)"
    )
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    faults = QUICK_FAULTS if args.quick else FAULTS
    if args.quick:
        args.sizes, args.kill_size, args.extrapolate, args.rank_size = [60, 120], 120, [1000], 240
    kill_size = min(args.sizes) if args.kill_size is None else args.kill_size
    torch.set_num_threads(1)
    maker = Signatures()
    target = maker.make(TARGET_DOMAIN, "bench/target")
    result: dict = {
        "machine": machine_info(),
        "faults": {**faults.__dict__, "latency": list(faults.latency)},
        "workers": WORKERS,
        "load_average_at_start": os.getloadavg(),
        "build": [],
        "rank": [],
    }
    fresh_hub()
    signatures: list = []
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # not a warning per 429 answered
    with tempfile.TemporaryDirectory(prefix="fisherhub-index-wire-") as tmp:
        work = Path(tmp)
        for n in sorted(set(args.sizes)):
            SERVER.faults = Faults()
            started = time.perf_counter()
            add_adapters(maker, signatures, n)
            print(f"N = {n}: {n} adapters written into the store in {time.perf_counter() - started:.1f} s", flush=True)
            SERVER.faults = faults
            result["build"].append(build_run(n, work))
            print(
                f"  build: {result['build'][-1]['seconds']:.1f} s, {result['build'][-1]['requests']} requests",
                flush=True,
            )
            result["rank"].append(rank_run(n, target, result["build"][-1]["index"], work))
            if n == kill_size:
                full = result["build"][-1]
                result["kill"] = kill_and_resume(n, work, full)
                print(f"  kill and resume: {result['kill']['resume']['seconds']:.1f} s", flush=True)
                result["update"] = update_run(n, maker, signatures, work, full)
                print(f"  update: {result['update']['seconds']:.1f} s", flush=True)
        if args.rank_size and args.rank_size not in args.sizes:
            SERVER.faults = Faults()
            add_adapters(maker, signatures, args.rank_size)
            index = f"bench/wire-rows-{args.rank_size}"
            write_index(signatures[: args.rank_size], [repo_name(i) for i in range(args.rank_size)], index, work)
            SERVER.faults = faults
            result["rank"].append({**rank_run(args.rank_size, target, f"datasets/{index}", work), "built": False})
            print(f"  rank at {args.rank_size} (the index written from the rows): done", flush=True)
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


if __name__ == "__main__":
    main()
