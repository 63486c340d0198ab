"""The signature index against per-repo discovery on the local Hub server with 50 ms injected per request
(``--latency``).

The in-process Hub server of ``benchmarks.local_hub`` (fisherhub.testing.hub_server, emptied at the start; the
real ``huggingface_hub`` and ``datasets`` clients talk to it over HTTP) holds N signed LoRA adapters of one base
model, laid out as ``fisherhub push`` writes them. Signatures are synthetic (m = 4,096, d = 576 with a reflection, as a SmolLM-sized model gives): 10
domains, each adapter its domain's centre plus its own noise of varied size; the target is from domain 3.

Measured:
- **build**: ``build_index`` at N = 1,000 and 2,000, sequential (``workers=1``) and with the pool;
- **rank**: ``select_adapter(target, index=...)`` from a cold and a warm cache at N = 1,000, 2,000 and 10,000
  (the 10,000-row index is written from the rows the build makes, at the repos' commits, without reading
  10,000 repos through the server: building it is extrapolated from 1,000 and 2,000; the repos beyond the
  2,000 built have a card without the signature block, which nothing here reads); requests, bytes
  downloaded (what the cache holds afterwards), the top-1 and top-10 against the exact ranking of all N
  signatures, and whether the final table equals ``select_adapter`` of the shortlisted candidates;
- **per-repo**: today's ``select_adapter(target, base_model=...)`` (discovery + one signature per adapter)
  at N = 1,000, sequential and with the pool (10,000: extrapolated);
- **layouts**: float32 vs float16, all three sketches vs the joint one only, at N = 10,000: bytes per row
  and the top-1 / top-10 of the index ranking against the exact one.

    nice -n 19 python -m benchmarks.index            # ≈ 15 min on 2 shared cores
    python -m benchmarks.index --quick               # N = 40, 80, 160 at 10 ms per request (writes to the temp dir)
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from benchmarks.local_hub import HF_HOME, SERVER, fresh_cache, fresh_hub  # noqa: E402  (before huggingface_hub)
from fisherhub.testing.hub_server import HubServer, Repo  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
from huggingface_hub import constants  # noqa: E402

from benchmarks.synthetic import add_output_arguments, machine_info, write_results  # noqa: E402
from fisherhub import Signature, SketchSpec  # noqa: E402
from fisherhub.core.features import SKETCHES  # noqa: E402
from fisherhub.hub import INDEX_PATH, push_signature, signature_path  # noqa: E402
from fisherhub.hub.listing import entry_for, render_listing  # noqa: E402
from fisherhub.hub.refs import SignatureRef, is_signature_file  # noqa: E402
from fisherhub.hub.signature_index.build import RepoResult, WorkFolder, build_index  # noqa: E402
from fisherhub.hub.signature_index.layout import Layout  # noqa: E402
from fisherhub.hub.signature_index.rows import read_rows  # noqa: E402
from fisherhub.hub.signature_index.schema import row_schema, signature_row  # noqa: E402
from fisherhub.hub.signature_index.store import push_index  # noqa: E402
from fisherhub.selection import select_adapter  # noqa: E402
from fisherhub.selection.index_ranking import SHORTLIST, row_scores  # noqa: E402

BASE = "bench/base-model"
DOMAINS, TARGET_DOMAIN = 10, 3
M, D, VOCAB = 4096, 576, 49152
LATENCY = 0.05
WORKERS = 16
ADAPTER_CONFIG = b'{"base_model_name_or_path": "bench/base-model", "peft_type": "LORA", "r": 8}'
PLAIN_CARD = f"---\nbase_model: {BASE}\nlibrary_name: peft\ntags: [fisher-signatures]\n---\n".encode()
LAYOUTS = {
    "float32, all three": Layout("float32", SKETCHES),
    "float16, all three": Layout("float16", SKETCHES),
    "float32, joint only": Layout("float32", ("joint",)),
    "float16, joint only": Layout("float16", ("joint",)),
}


class Signatures:
    """Synthetic signatures of one base model: per sketch, μ = shared + domain centre + own noise (the noise's
    size varies by adapter, so alignments within a domain spread out); split norms ‖μ‖²(1 − r), r ∈ [1%, 10%]."""

    def __init__(self, seed: int = 0, spec: SketchSpec | None = None):
        """``spec``: the signatures' spec (of m = ``M``), e.g. a real model's, so that a target given as data can
        be sketched like them; default a SmolLM-sized one (d = ``D``) of no model."""
        self.generator = torch.Generator().manual_seed(seed)
        g = self.generator
        self.shared = torch.randn(3, M, generator=g)
        self.centres = torch.randn(DOMAINS, 3, M, generator=g)
        pilot = torch.randn(D, generator=g)
        self.spec = spec or (
            SketchSpec(d=D, vocab_size=VOCAB, m=M, seed=0).with_fingerprint("benchmark-head").with_reflection(pilot)
        )
        if self.spec.m != M:
            raise ValueError(f"the signatures are of m = {M}, not {self.spec.m}")

    def make(self, domain: int, dataset: str) -> Signature:
        g = self.generator
        noise = 0.3 + 1.2 * torch.rand(1, generator=g)
        means = (self.shared + self.centres[domain] + noise * torch.randn(3, M, generator=g)) / M**0.5
        shrink = 1 - (0.01 + 0.09 * torch.rand(3, generator=g, dtype=torch.float64))
        documents = int(torch.randint(50, 5000, (1,), generator=g))
        return Signature(
            self.spec,
            means[0].clone(),
            means[1].clone(),
            means[2].clone(),
            means.double().square().sum(1) * shrink,
            documents * 100,
            documents,
            {"base_model": BASE, "dataset": dataset},
        )


def pushed_files(signature: Signature, folder: Path) -> dict[str, bytes]:
    """The files of an adapter repo as ``fisherhub push`` writes them (into a folder, read back)."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_bytes(ADAPTER_CONFIG)
    push_signature(signature, folder)
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    shutil.rmtree(folder)
    return files


def plain_files(signature: Signature) -> dict[str, bytes]:
    """The same signature file and ``fisher_signatures/index.json``, with a card that has no signature block
    (rendering 10,000 cards costs minutes of CPU; ranking from the index never reads a card)."""
    path = signature_path(signature)
    return {
        "adapter_config.json": ADAPTER_CONFIG,
        "README.md": PLAIN_CARD,
        path: signature.to_bytes(),
        INDEX_PATH: render_listing([entry_for(signature, path)]),
    }


def build_world(server: HubServer, signatures: list[Signature], work: Path, pushed: int) -> list[str]:
    """One adapter repo per signature, added to the repos already there; the first ``pushed`` laid out by
    ``fisherhub push`` (``pushed_files``), the others by ``plain_files``. Returns the repo ids."""
    repo_ids = [f"bench/lora-{i:05d}" for i in range(len(signatures))]
    for i, signature in enumerate(signatures):
        if ("model", repo_ids[i]) in server.repos:
            continue
        files = pushed_files(signature, work / f"lora-{i}") if i < pushed else plain_files(signature)
        repo = Repo("model", repo_ids[i])
        repo.refs["refs/heads/main"] = repo.add_commit(repo.refs["refs/heads/main"], files, "adapter with signature")
        server.repos[("model", repo_ids[i])] = repo
    return repo_ids


def cache_bytes(cache: Path) -> int:
    return sum(p.stat().st_size for p in (cache).rglob("*") if p.is_file() and "blobs" in p.parts)


def timed(fn):
    SERVER.requests.clear()
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started, len(SERVER.requests)


def request_kinds() -> dict[str, int]:
    def kind(method: str, path: str) -> str:
        if path in ("/api/models", "/api/datasets"):
            return "listing"
        if "/resolve/" in path:
            file = path.split("/resolve/", 1)[1].split("/", 1)[1]
            return f"{method} " + (
                "signature file"
                if file.endswith(".safetensors")
                else "index shard"
                if file.endswith(".parquet")
                else file
            )
        return f"{method} {'/'.join(path.split('/')[:3])}"

    return dict(collections.Counter(kind(m, p) for m, p, _ in SERVER.requests))


def exact_order(signatures: list[Signature], target: Signature) -> list[int]:
    """All N ranked by the exact A (float64 from the signatures' own tensors, as ``alignment`` computes it)."""
    joint = torch.stack([s.joint.double() for s in signatures])
    norms = torch.tensor([float(s.split_norms[0]) for s in signatures], dtype=torch.float64)
    scores = joint @ target.joint.double() / torch.sqrt(norms * float(target.split_norms[0]))
    return torch.argsort(scores, descending=True).tolist()


def index_rows(signatures: list[Signature], repo_ids: list[str], layout: Layout) -> list[dict]:
    """The rows the build makes of these repos (at their commits), without reading them through the server."""
    rows = []
    for signature, repo_id in zip(signatures, repo_ids):
        commit = SERVER.repos[("model", repo_id)].refs["refs/heads/main"]
        path = next(p for p in SERVER.repos[("model", repo_id)].commits[commit].files if is_signature_file(p))
        rows.append(signature_row(signature, SignatureRef(repo_id, "model", commit, path), "published", layout))
    return rows


def write_index(signatures, repo_ids, name: str, work: Path) -> None:
    folder = WorkFolder(work / f"work-{name.replace('/', '-')}", BASE, Layout())
    rows = index_rows(signatures, repo_ids, Layout())
    results = [RepoResult(r["repo_id"], "model", r["commit"], [r], []) for r in rows]
    for first in range(0, len(results), 256):
        folder.add(results[first : first + 256])
    push_index(folder.table(), SignatureRef(name, "dataset"), BASE, Layout(), folder.entries())


def rank_run(n: int, signatures, repo_ids, target, index: str, work: Path, latency: float) -> dict:
    exact = exact_order(signatures, target)
    exact_names = [repo_ids[i] for i in exact]
    SERVER.latency = latency
    out = {"adapters": n}
    for phase in ("cold", "warm"):
        cache = fresh_cache(work) if phase == "cold" else Path(constants.HF_HUB_CACHE)
        selection, seconds, requests = timed(lambda: select_adapter(target, index=index, shortlist=SHORTLIST))
        out[phase] = {"seconds": seconds, "requests": requests, "requests_by_kind": request_kinds()}
        if phase == "cold":
            out[phase]["downloaded_bytes"] = cache_bytes(cache)
    final = [row.candidate.split("@")[0] for row in selection.ranking]
    shortlisted = [row.candidate for row in selection.ranking]
    SERVER.latency = 0.0
    out["top1_equal"] = final[0] == exact_names[0]
    out["top10_equal"] = set(final[:10]) == set(exact_names[:10])
    out["top10_order_equal"] = final[:10] == exact_names[:10]
    # the same candidates in the order the index shortlisted them, ranked from their own files
    from fisherhub.hub.signature_index.store import load_index
    from fisherhub.selection.index_ranking import rank_index
    from fisherhub.selection.target import Target

    names = rank_index(load_index(index), Target([target]), BASE).candidates(SHORTLIST)
    out["table_equals_direct"] = select_adapter(target, names).table() == selection.table()
    assert sorted(names) == sorted(shortlisted)
    return out


def layouts_run(signatures, repo_ids, target, work: Path) -> list[dict]:
    exact = exact_order(signatures, target)
    out = []
    for name, layout in LAYOUTS.items():
        table = pa.Table.from_pylist(index_rows(signatures, repo_ids, layout), schema=row_schema())
        path = work / "layout.parquet"
        pq.write_table(table, path)
        size = path.stat().st_size
        started = time.perf_counter()
        rows = read_rows(pq.read_table(path), BASE, name)
        scores = row_scores(rows, target, "joint")
        seconds = time.perf_counter() - started
        order = np.argsort(-scores, kind="stable").tolist()
        exact_scores = exact_order_scores(signatures, target)
        out.append(
            {
                "layout": name,
                "bytes_per_row": size / len(signatures),
                "bytes": size,
                "top1_equal": order[0] == exact[0],
                "top10_equal": set(order[:10]) == set(exact[:10]),
                "top20_contains_top10": set(exact[:10]) <= set(order[:20]),
                "max_abs_score_error": float(np.max(np.abs(scores - exact_scores))),
                "read_and_rank_seconds": seconds,
            }
        )
    return out


def exact_order_scores(signatures, target) -> np.ndarray:
    joint = torch.stack([s.joint.double() for s in signatures])
    norms = torch.tensor([float(s.split_norms[0]) for s in signatures], dtype=torch.float64)
    return (joint @ target.joint.double() / torch.sqrt(norms * float(target.split_norms[0]))).numpy()


def per_repo_run(n: int, target, workers: int, latency: float) -> dict:
    SERVER.latency = latency
    fresh_cache(HF_HOME)
    _, seconds, requests = timed(lambda: select_adapter(target, base_model=BASE, workers=workers))
    SERVER.latency = 0.0
    return {
        "adapters": n,
        "workers": workers,
        "seconds": seconds,
        "requests": requests,
        "requests_by_kind": request_kinds(),
    }


def build_run(n: int, workers: int, work: Path, latency: float) -> dict:
    SERVER.latency = latency
    fresh_cache(work)
    index = f"datasets/bench/index-{n}-w{workers}"
    (_, summary), seconds, requests = timed(
        lambda: build_index(BASE, index, work=work / f"build-{n}-{workers}", workers=workers)
    )
    SERVER.latency = 0.0
    return {
        "adapters": n,
        "workers": workers,
        "seconds": seconds,
        "requests": requests,
        "rows": summary.rows,
        "requests_by_kind": request_kinds(),
        "index": index,
    }


def plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(13, 4))
    left, middle, right = figure.subplots(1, 3)
    ranks = result["rank"]
    sizes = [r["adapters"] for r in ranks]
    left.plot(sizes, [r["cold"]["requests"] for r in ranks], "o-", label="index, cold cache")
    left.plot(sizes, [r["warm"]["requests"] for r in ranks], "s-", label="index, warm cache")
    per_repo = result["per_repo_requests"]
    left.plot([p["adapters"] for p in per_repo], [p["requests"] for p in per_repo], "^--", label="per-repo discovery")
    left.set(xscale="log", yscale="log", xlabel="adapters of the base model", ylabel="HTTP requests", title="Requests")
    left.legend(fontsize=8)
    middle.plot(sizes, [r["cold"]["seconds"] for r in ranks], "o-", label="index, cold cache")
    middle.plot(sizes, [r["warm"]["seconds"] for r in ranks], "s-", label="index, warm cache")
    middle.plot(
        [p["adapters"] for p in per_repo],
        [p["seconds"] for p in per_repo],
        "^--",
        label=f"per-repo, sequential (beyond {min(p['adapters'] for p in per_repo if p['measured']):,}: extrapolated)",
    )
    middle.set(
        xscale="log",
        yscale="log",
        xlabel="adapters of the base model",
        ylabel="seconds",
        title=f"Ranking at {result['latency_s'] * 1000:.0f} ms per request",
    )
    middle.legend(fontsize=8)
    layouts = result["layouts"]
    right.barh([row["layout"] for row in layouts], [row["bytes_per_row"] / 1024 for row in layouts], color="tab:blue")
    for y, layout in enumerate(layouts):
        right.text(
            layout["bytes_per_row"] / 1024,
            y,
            f"  top-10 {'=' if layout['top10_equal'] else '≠'}",
            va="center",
            fontsize=8,
        )
    right.set(xlabel="KiB per row (Parquet)", title=f"Row layouts, m = {M}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-sizes", type=int, nargs="+", default=[1000, 2000])
    parser.add_argument("--rank-sizes", type=int, nargs="+", default=[1000, 2000, 10000])
    parser.add_argument("--sequential-size", type=int, default=1000, help="N of the sequential build and per-repo run")
    parser.add_argument("--latency", type=float, default=LATENCY, help="seconds the server sleeps before every answer")
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.build_sizes, args.rank_sizes, args.sequential_size, args.latency = [40, 80], [40, 80, 160], 40, 0.01
    torch.set_num_threads(1)
    maker = Signatures()
    largest = max(args.rank_sizes + args.build_sizes)
    signatures = [maker.make(i % DOMAINS, f"bench/domain-{i % DOMAINS}-part-{i}") for i in range(largest)]
    target = maker.make(TARGET_DOMAIN, "bench/target")
    result = {
        "machine": machine_info(),
        "latency_s": args.latency,
        "workers": WORKERS,
        "m": M,
        "d": D,
        "shortlist": SHORTLIST,
        "build": [],
        "rank": [],
        "per_repo": [],
        "layouts": [],
    }
    fresh_hub()
    with tempfile.TemporaryDirectory(prefix="fisherhub-index-run-") as tmp:
        work = Path(tmp)
        for n in sorted(set(args.rank_sizes) | set(args.build_sizes)):
            print(f"N = {n}: building the world", flush=True)
            repo_ids = build_world(SERVER, signatures[:n], work / f"folders-{n}", max(args.build_sizes))
            if n in args.build_sizes:
                for workers in ([1] if n == args.sequential_size else []) + [WORKERS]:
                    result["build"].append(build_run(n, workers, work, args.latency))
                    print(f"  build, {workers} workers: {result['build'][-1]['seconds']:.1f} s", flush=True)
                index = result["build"][-1]["index"]
            else:
                index = f"datasets/bench/index-{n}"
                write_index(signatures[:n], repo_ids, index.removeprefix("datasets/"), work)
            if n in args.rank_sizes:
                result["rank"].append(rank_run(n, signatures[:n], repo_ids, target, index, work, args.latency))
                print(
                    f"  rank: cold {result['rank'][-1]['cold']['seconds']:.2f} s, warm "
                    f"{result['rank'][-1]['warm']['seconds']:.2f} s",
                    flush=True,
                )
            if n == args.sequential_size:
                for workers in (1, WORKERS):
                    result["per_repo"].append(per_repo_run(n, target, workers, args.latency))
                    print(f"  per-repo, {workers} workers: {result['per_repo'][-1]['seconds']:.1f} s", flush=True)
            if n == max(args.rank_sizes):
                result["layouts"] = layouts_run(signatures[:n], repo_ids, target, work)
    result["per_repo_requests"] = per_repo_extrapolation(result, args.rank_sizes)
    print_tables(result)
    write_results("index", result, lambda path: plot(result, path), args)


def per_repo_extrapolation(result: dict, sizes: list[int]) -> list[dict]:
    """Requests and seconds of the sequential per-repo ranking at each size: measured at one size, elsewhere
    its listings plus its measured requests per adapter, at its measured seconds per request."""
    sequential = next(p for p in result["per_repo"] if p["workers"] == 1)
    n, listings = sequential["adapters"], sequential["requests_by_kind"].get("listing", 0)
    per_adapter, per_request = (sequential["requests"] - listings) / n, sequential["seconds"] / sequential["requests"]
    out = []
    for size in sorted({n, *sizes}):
        requests = sequential["requests"] if size == n else round(listings + per_adapter * size)
        out.append({"adapters": size, "requests": requests, "seconds": requests * per_request, "measured": size == n})
    return out


def print_tables(result: dict) -> None:
    print(
        f"\nranking at {result['latency_s'] * 1000:.0f} ms per request (shortlist {result['shortlist']}, m = {result['m']})"
    )
    header = (
        "adapters",
        "cold s",
        "cold req",
        "cold MB",
        "warm s",
        "warm req",
        "top-1",
        "top-10",
        "= direct",
        "per-repo req",
        "per-repo s",
    )
    print("  ".join(f"{h:>12}" for h in header))
    per_repo = {p["adapters"]: p for p in result["per_repo_requests"]}
    for run in result["rank"]:
        p = per_repo[run["adapters"]]
        cells = (
            run["adapters"],
            f"{run['cold']['seconds']:.2f}",
            run["cold"]["requests"],
            f"{run['cold']['downloaded_bytes'] / 1e6:.1f}",
            f"{run['warm']['seconds']:.2f}",
            run["warm"]["requests"],
            run["top1_equal"],
            run["top10_equal"],
            run["table_equals_direct"],
            p["requests"],
            f"{p['seconds']:.0f}{'' if p['measured'] else ' (extrap.)'}",
        )
        print("  ".join(f"{c!s:>12}" for c in cells))
    print("\nbuilding the index and ranking named candidates per repo: sequential vs the pool")
    for run in result["build"]:
        print(
            f"  build N = {run['adapters']:>6}, {run['workers']:>2} workers: {run['seconds']:8.1f} s, {run['requests']} requests"
        )
    for run in result["per_repo"]:
        print(
            f"  per-repo select N = {run['adapters']:>6}, {run['workers']:>2} workers: {run['seconds']:8.1f} s, "
            f"{run['requests']} requests"
        )
    print("\nrow layouts (N = largest rank size)")
    for layout in result["layouts"]:
        print(
            f"  {layout['layout']:>22}: {layout['bytes_per_row'] / 1024:6.1f} KiB/row, top-1 {layout['top1_equal']}, "
            f"top-10 {layout['top10_equal']}, exact top-10 in top-20 {layout['top20_contains_top10']}, "
            f"max |ΔA| {layout['max_abs_score_error']:.1e}, read + rank {layout['read_and_rank_seconds']:.2f} s"
        )


if __name__ == "__main__":
    main()
