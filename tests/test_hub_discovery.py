"""Discovery of signed adapters at scale (tags, the fallback for stripped cards, requests per candidate) and
offline listing / ranking from the cache after one online run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from huggingface_hub import CommitOperationAdd, HfApi, ModelCard
from test_hub import DATA, dataset_repo, make_signature  # noqa: F401  (a fixture)

from fisherhub.hub import INDEX_PATH, find_adapters, list_signatures, push_signature
from fisherhub.selection import select_adapter
from fisherhub.selection.candidates import NO_SIGNATURE

BASE = "org/base"

# in a fresh process (HF_HUB_OFFLINE is read at import): list and rank as the online run did; argv = target
# file, adapters...; prints {"listing": [...], "ranking": [...], "never_fetched": "<error type>: <message>"}
OFFLINE_RUN = """
import json, sys
from fisherhub.hub import list_signatures
from fisherhub.selection import select_adapter
target, adapters = sys.argv[1], sys.argv[2:]
out = {"listing": [[i.path, i.sketch_id, i.base_model, i.listed] for i in list_signatures("datasets/org/data")]}
selection = select_adapter(target, adapters, base_model="org/base")
out["ranking"] = [[row.candidate, round(row.score, 12), row.adapter.revision] for row in selection.ranking]
try:
    list_signatures("datasets/org/never-fetched")
except Exception as exc:
    out["never_fetched"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def make_adapter(api: HfApi, name: str, seed: int, *, strip_card: bool = False) -> str:
    """An adapter repo of BASE with a signature pushed by fisherhub; ``strip_card``: then a card rewrite
    as ``push_to_hub`` does it (no signature tag, no block)."""
    repo_id = f"org/{name}"
    api.create_repo(repo_id)
    api.create_commit(
        repo_id,
        [
            CommitOperationAdd("adapter_config.json", json.dumps({"base_model_name_or_path": BASE}).encode()),
            CommitOperationAdd("README.md", f"---\nbase_model: {BASE}\nlibrary_name: peft\n---\n# {name}\n".encode()),
        ],
        commit_message="adapter",
    )
    push_signature(make_signature(BASE, f"org/data-{seed}", seed=seed), repo_id)
    if strip_card:
        ModelCard(f"---\nbase_model: {BASE}\nlibrary_name: peft\ntags: [lora, trl]\n---\n# {name}\n").push_to_hub(
            repo_id
        )
    return repo_id


def test_discovery_with_stripped_tags_and_requests_per_candidate(hub, hf_api, hf_hub_cache):
    tagged = [make_adapter(hf_api, f"tagged-{i}", i) for i in range(4)]
    stripped = [make_adapter(hf_api, f"stripped-{i}", 10 + i, strip_card=True) for i in range(3)]
    hf_api.create_repo("org/unsigned")  # an adapter of BASE without signatures: skipped, with the reason
    hf_api.create_commit(
        "org/unsigned",
        [
            CommitOperationAdd("adapter_config.json", b"{}"),
            CommitOperationAdd("README.md", f"---\nbase_model: {BASE}\n---\n".encode()),
        ],
        commit_message="adapter",
    )
    assert all("fisher-signatures" not in hf_api.model_info(r).tags for r in stripped)

    hub.requests.clear()
    found = find_adapters(BASE)
    assert sorted(a.ref.repo_id for a in found) == sorted(tagged + stripped)
    assert [r[1] for r in hub.requests] == ["/api/models", "/api/models"]  # the two listings, nothing per repo
    assert sorted(a.ref.repo_id for a in find_adapters(BASE, untagged=False)) == sorted(tagged)
    assert all(a.ref.revision == hf_api.model_info(a.ref.repo_id).sha for a in found)  # pinned as listed

    target = make_signature(BASE, "org/target", seed=2)
    hub.requests.clear()
    selection = select_adapter(target, base_model=BASE)
    assert sorted(row.candidate for row in selection.ranking) == sorted(tagged + stripped)
    assert [(s.candidate, s.reason) for s in selection.skipped] == [("org/unsigned", NO_SIGNATURE)]
    listings = [path for _, path, _ in hub.requests if path == "/api/models"]
    per_repo: dict[str, list[tuple[str, str]]] = {}
    for method, path, _ in hub.requests:
        if path != "/api/models":  # every other request is a file read: /org/name/resolve/<commit>/<path>
            repo_id, (_, file) = "/".join(path.split("/")[1:3]), path.split("/resolve/")[1].split("/", 1)
            per_repo.setdefault(repo_id, []).append((method, file))
    assert len(listings) == 2 and set(per_repo) == set(tagged + stripped)
    for repo_id, reads in per_repo.items():  # each adapter's config, read with peft.PeftConfig (its type), once
        assert [read for read in reads if read[1] == "adapter_config.json"] == [
            ("HEAD", "adapter_config.json"),
            ("GET", "adapter_config.json"),
        ]
        per_repo[repo_id] = [read for read in reads if read[1] != "adapter_config.json"]
    # the signature file: its size (HEAD, so that an oversized one is never downloaded), then its download (HEAD + GET)
    for repo_id in tagged:  # the listing's card block names the file: only the file's requests
        [(size, file), (head, same), (get, again)] = per_repo[repo_id]
        assert (size, head, get) == ("HEAD", "HEAD", "GET") and file == same == again
        assert file.startswith(".fisher_signatures/") and file != INDEX_PATH
    for repo_id in stripped:  # the listed card has no block: the index first, then the file
        [index_head, index_get, (size, file), (head, same), (get, again)] = per_repo[repo_id]
        assert (index_head, index_get) == (("HEAD", INDEX_PATH), ("GET", INDEX_PATH))
        assert (size, head, get) == ("HEAD", "HEAD", "GET") and file == same == again and file != INDEX_PATH


def test_offline_listing_and_ranking_after_one_online_run(hub, hf_api, dataset_repo, hf_hub_cache, tmp_path):
    push_signature(make_signature(BASE), DATA)
    push_signature(make_signature("org/other-base", seed=5), DATA)
    adapters = [make_adapter(hf_api, f"lora-{i}", i, strip_card=i == 2) for i in range(3)]
    target = make_signature(BASE, "org/target", seed=1)
    target.save(tmp_path / "target.safetensors")

    online_listing = [[i.path, i.sketch_id, i.base_model, i.listed] for i in list_signatures(DATA)]
    online = select_adapter(str(tmp_path / "target.safetensors"), adapters, base_model=BASE)
    online_ranking = [[row.candidate, round(row.score, 12), row.adapter.revision] for row in online.ranking]
    assert sorted(row[0] for row in online_ranking) == adapters
    assert [row[2] for row in online_ranking] == [hf_api.model_info(row[0]).sha for row in online_ranking]  # pinned

    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", OFFLINE_RUN, str(tmp_path / "target.safetensors"), *adapters],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    offline = json.loads(out.stdout.splitlines()[-1])
    assert offline["listing"] == online_listing and len(online_listing) == 2
    assert offline["ranking"] == online_ranking  # the same candidates, scores and pinned commits
    assert offline["never_fetched"].startswith(
        "OfflineCacheError: hf://datasets/org/never-fetched: HF_HUB_OFFLINE is set"
    )
    assert (
        "holds nothing of this repo" in offline["never_fetched"]
        and "not in the local cache" not in offline["never_fetched"]
    )
