"""Discovery and ranking of many adapters of one base model on the local Hub server: requests and time.

For each size N (default 100, 300, 1,000) the in-process Hub server (``benchmarks.local_hub``, emptied for
each size; the real ``huggingface_hub`` client talking to it over HTTP) holds N signed LoRA adapter repos of one base model,
laid out as ``fisherhub push`` writes them (adapter_config.json, card, ``.fisher_signatures/`` file and
index; the files are produced by ``push_signature`` into a local folder and copied into the server's state,
so that building 1,000 repos does not dominate the run). A share of them (``--stripped``) then had their
card rewritten without the signature tag and block, as a later ``push_to_hub`` does; another share of the
base model's adapters carries no signature at all. Each adapter's signature is a synthetic task from one of
10 domains (m = 4,096, so files have their real size); the target is drawn from domain 3, and the share
of the top decile that is from domain 3 checks that the ranking is right.

Timed, with an empty cache: ``find_adapters`` alone, and ``select_adapter(target, base_model=BASE)`` (the
discovery, one signature download per candidate, the ranking). Requests are counted at the server, by kind.
Writes benchmarks/results/discovery.{json,png}.

    python -m benchmarks.discovery            # sizes 100, 300, 1000 (≈ 2 min on 2 shared cores)
    python -m benchmarks.discovery --quick    # sizes 10, 20 (writes to the temp dir)
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from benchmarks.local_hub import SERVER, fresh_cache  # noqa: E402  (before anything imports huggingface_hub)
from fisherhub.testing.hub_server import HubServer, Repo  # noqa: E402

import torch  # noqa: E402
from benchmarks.synthetic import add_output_arguments, machine_info, write_results  # noqa: E402
from tqdm import tqdm  # noqa: E402

from fisherhub.core.batch import HeadBatch  # noqa: E402
from fisherhub import SketchSpec, SketchState  # noqa: E402
from fisherhub.hub import INDEX_PATH, find_adapters, push_signature  # noqa: E402
from fisherhub.selection import select_adapter  # noqa: E402

BASE = "bench/base-model"
DOMAINS, TARGET_DOMAIN = 10, 3
D, VOCAB, M, TOKENS, OWN_TOKENS = 64, 1024, 4096, 512, 64
ADAPTER_CONFIG = b'{"base_model_name_or_path": "bench/base-model", "peft_type": "LORA", "r": 8}'
STRIPPED_CARD = f"---\nbase_model: {BASE}\nlibrary_name: peft\ntags: [lora, trl]\n---\n# Model trained with TRL\n"


class Tasks:
    """Synthetic next-token tasks: activations around a domain centre, targets sampled from a fixed head. A
    task of a domain is the domain's shared part (``TOKENS`` tokens, sketched once) plus its own ``OWN_TOKENS``
    tokens (states merge: the signature is that of the union)."""

    def __init__(self, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.centres = 2.0 * torch.randn(DOMAINS, D, generator=generator)
        self.head = torch.randn(VOCAB, D, generator=generator) / D**0.5
        self.spec = SketchSpec(d=D, vocab_size=VOCAB, m=M, seed=0).with_fingerprint(head_checksum="benchmark-head")
        self.shared = [
            self.state(domain, TOKENS, seed=seed * 7919 + domain, first_document=0) for domain in range(DOMAINS)
        ]

    def state(self, domain: int, tokens: int, seed: int, first_document: int) -> SketchState:
        generator = torch.Generator().manual_seed(seed)
        activations = self.centres[domain] + torch.randn(tokens, D, generator=generator)
        logits = activations @ self.head.T
        targets = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(1)
        documents = first_document + torch.arange(tokens) // 4
        return SketchState(self.spec).update(
            HeadBatch(activations=activations, doc_index=documents, logits=logits, targets=targets)
        )

    def signature(self, domain: int, seed: int, dataset: str):
        own = self.state(domain, OWN_TOKENS, seed=seed, first_document=TOKENS // 4)
        return (self.shared[domain].copy() + own).finalize({"base_model": BASE, "dataset": dataset})


def add_repo(server: HubServer, repo_id: str, files: dict[str, bytes]) -> None:
    repo = Repo("model", repo_id)
    repo.refs["refs/heads/main"] = repo.add_commit(repo.refs["refs/heads/main"], files, "adapter with signature")
    server.repos[("model", repo_id)] = repo


def build_world(server: HubServer, tasks: Tasks, adapters: int, stripped: float, unsigned: float, work: Path) -> dict:
    """``adapters`` signed adapter repos (a ``stripped`` share with a rewritten card) and ``unsigned`` × as
    many adapters without signatures; returns the repo ids by kind."""
    server.reset()
    kinds: dict[str, list[str]] = {"tagged": [], "stripped": [], "unsigned": []}
    for i in tqdm(range(adapters), desc=f"building {adapters} adapters", leave=False):
        folder = work / f"lora-{i}"
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_bytes(ADAPTER_CONFIG)
        push_signature(tasks.signature(i % DOMAINS, seed=i + 1, dataset=f"bench/domain-{i % DOMAINS}-part-{i}"), folder)
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        kind = "stripped" if i < round(stripped * adapters) else "tagged"
        if kind == "stripped":
            files["README.md"] = STRIPPED_CARD.encode()
        repo_id = f"bench/lora-{i:04d}"
        add_repo(server, repo_id, files)
        kinds[kind].append(repo_id)
    for i in range(round(unsigned * adapters)):
        repo_id = f"bench/unsigned-{i:04d}"
        add_repo(server, repo_id, {"adapter_config.json": ADAPTER_CONFIG, "README.md": STRIPPED_CARD.encode()})
        kinds["unsigned"].append(repo_id)
    return kinds


def request_kind(method: str, path: str) -> str:
    if path == "/api/models":
        return "listing"
    if "/resolve/" in path:
        file = path.split("/resolve/", 1)[1].split("/", 1)[1]
        kind = "index" if file == INDEX_PATH else "signature file" if file.startswith(".fisher_signatures/") else file
        return f"{method} {kind}"
    return f"{method} {path}"


def run_size(tasks: Tasks, adapters: int, stripped: float, unsigned: float, target, work: Path) -> dict:
    kinds = build_world(SERVER, tasks, adapters, stripped, unsigned, work / "folders")
    fresh_cache(work / "cache-discovery")
    SERVER.requests.clear()
    started = time.perf_counter()
    found = find_adapters(BASE)
    discovery_seconds = time.perf_counter() - started
    discovery_requests = len(SERVER.requests)

    fresh_cache(work / "cache-select")
    SERVER.requests.clear()
    started = time.perf_counter()
    selection = select_adapter(target, base_model=BASE)
    select_seconds = time.perf_counter() - started
    requests = list(SERVER.requests)
    by_kind = collections.Counter(request_kind(method, path) for method, path, _ in requests)
    per_repo = collections.Counter("/".join(path.split("/")[1:3]) for _, path, _ in requests if "/resolve/" in path)
    per_candidate = {kind: sorted({per_repo[r] for r in repos}) for kind, repos in kinds.items()}
    top = [row.candidate for row in selection.ranking[: adapters // DOMAINS]]
    target_domain = {f"bench/lora-{i:04d}" for i in range(adapters) if i % DOMAINS == TARGET_DOMAIN}
    return {
        "adapters": adapters,
        "tagged": len(kinds["tagged"]),
        "stripped": len(kinds["stripped"]),
        "unsigned": len(kinds["unsigned"]),
        "found": len(found),
        "ranked": len(selection.ranking),
        "skipped": len(selection.skipped),
        "discovery_requests": discovery_requests,
        "discovery_seconds": discovery_seconds,
        "select_requests": len(requests),
        "select_seconds": select_seconds,
        "requests_by_kind": dict(sorted(by_kind.items())),
        "requests_per_candidate": per_candidate,
        "top_share_of_target_domain": len(target_domain & set(top)) / max(len(top), 1),
    }


def plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    runs = result["runs"]
    sizes = [run["adapters"] for run in runs]
    figure = Figure(figsize=(10, 4))
    left, right = figure.subplots(1, 2)
    left.plot(sizes, [run["select_requests"] for run in runs], "o-", label="select_adapter (all requests)")
    left.plot(sizes, [run["discovery_requests"] for run in runs], "s-", label="find_adapters (listings)")
    for per, style in ((2, ":"), (4, "--")):
        left.plot(sizes, [per * n for n in sizes], style, color="grey", label=f"{per} per candidate")
    left.set(
        xscale="log",
        yscale="log",
        xlabel="signed adapters of the base model",
        ylabel="HTTP requests",
        title="Requests at the server",
    )
    left.legend(fontsize=8)
    right.plot(sizes, [run["select_seconds"] for run in runs], "o-", label="select_adapter")
    right.plot(sizes, [run["discovery_seconds"] for run in runs], "s-", label="find_adapters")
    right.set(
        xscale="log",
        yscale="log",
        xlabel="signed adapters of the base model",
        ylabel="seconds",
        title="Wall time (local server, empty cache)",
    )
    right.legend(fontsize=8)
    figure.suptitle(
        f"{result['stripped_share']:.0%} of the cards stripped by a later push_to_hub; "
        f"{result['unsigned_share']:.0%} more adapters unsigned",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000], help="signed adapters per run")
    parser.add_argument("--stripped", type=float, default=0.3, help="share of signed adapters whose card lost the tag")
    parser.add_argument("--unsigned", type=float, default=0.2, help="unsigned adapters, as a share of the signed ones")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    sizes = [10, 20] if args.quick else args.sizes
    torch.set_num_threads(args.threads)
    tasks = Tasks()
    target = tasks.state(TARGET_DOMAIN, TOKENS, seed=10**6, first_document=0).finalize({"base_model": BASE})
    runs = []
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="fisherhub-discovery-run-") as work:
            runs.append(run_size(tasks, size, args.stripped, args.unsigned, target, Path(work)))
    header = (
        "adapters",
        "tagged",
        "stripped",
        "unsigned",
        "ranked",
        "listings",
        "req/tagged",
        "req/stripped",
        "requests",
        "discover s",
        "select s",
        "top-decile right",
    )
    print("  ".join(f"{h:>12}" for h in header))
    for run in runs:
        cells = (
            run["adapters"],
            run["tagged"],
            run["stripped"],
            run["unsigned"],
            run["ranked"],
            run["requests_by_kind"].get("listing", 0),
            ",".join(map(str, run["requests_per_candidate"]["tagged"])),
            ",".join(map(str, run["requests_per_candidate"]["stripped"])),
            run["select_requests"],
            f"{run['discovery_seconds']:.2f}",
            f"{run['select_seconds']:.2f}",
            f"{run['top_share_of_target_domain']:.2f}",
        )
        print("  ".join(f"{c:>12}" for c in cells))
    result = {
        "machine": machine_info(),
        "threads": args.threads,
        "stripped_share": args.stripped,
        "unsigned_share": args.unsigned,
        "m": M,
        "runs": runs,
    }
    write_results("discovery", result, lambda path: plot(result, path), args)


if __name__ == "__main__":
    main()
