"""The local Hub server (fisherhub.testing.hub_server) driven through the real `huggingface_hub` client."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    DatasetCard,
    HfApi,
    ModelCard,
    constants,
    hf_hub_download,
    snapshot_download,
)
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

SHA = re.compile(r"[0-9a-f]{40}")


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def add(path: str, data: bytes | str) -> CommitOperationAdd:
    return CommitOperationAdd(path_in_repo=path, path_or_fileobj=data.encode() if isinstance(data, str) else data)


def test_environment_points_at_local_server(hub):
    assert constants.ENDPOINT == hub.endpoint
    assert os.environ["HF_HOME"] != os.path.expanduser("~/.cache/huggingface")
    assert HfApi().whoami()["name"] == hub.user


def test_create_repo_and_repo_info(hub, hf_api):
    url = hf_api.create_repo("org/model-a")
    assert url == f"{hub.endpoint}/org/model-a" and url.repo_id == "org/model-a"
    with pytest.raises(HfHubHTTPError) as exc:
        hf_api.create_repo("org/model-a")
    assert exc.value.response.status_code == 409
    assert hf_api.create_repo("org/model-a", exist_ok=True) == url
    ds_url = hf_api.create_repo("org/data-a", repo_type="dataset", private=True)
    assert ds_url == f"{hub.endpoint}/datasets/org/data-a"
    assert hf_api.create_repo("plain", repo_type="space", space_sdk="static").repo_id == f"{hub.user}/plain"

    info = hf_api.model_info("org/model-a", files_metadata=True)
    assert SHA.fullmatch(info.sha) and [s.rfilename for s in info.siblings] == [".gitattributes"]
    assert info.siblings[0].size > 0 and SHA.fullmatch(info.siblings[0].blob_id)
    assert hf_api.dataset_info("org/data-a").private is True
    assert hub.commit_count("org/model-a") == 1  # the Hub's "initial commit"
    assert hf_api.repo_exists("org/data-a", repo_type="dataset")
    assert not hf_api.repo_exists("org/data-a")  # wrong type
    with pytest.raises(RepositoryNotFoundError):
        hf_api.model_info("org/missing")
    with pytest.raises(RevisionNotFoundError):
        hf_api.model_info("org/model-a", revision="nope")


def test_commit_download_and_listing(hub, hf_api, hf_hub_cache):
    hf_api.create_repo("org/ds", repo_type="dataset")
    info = hf_api.create_commit(
        "org/ds",
        [add("a.txt", "alpha"), add("dir/sub/b.bin", b"\x00\x01" * 10)],
        commit_message="add files",
        repo_type="dataset",
    )
    assert SHA.fullmatch(info.oid) and info.commit_url.endswith(f"/datasets/org/ds/commit/{info.oid}")
    assert info.pr_url is None
    assert sorted(hf_api.list_repo_files("org/ds", repo_type="dataset")) == [".gitattributes", "a.txt", "dir/sub/b.bin"]
    top = {e.path: type(e).__name__ for e in hf_api.list_repo_tree("org/ds", repo_type="dataset")}
    assert top == {".gitattributes": "RepoFile", "a.txt": "RepoFile", "dir": "RepoFolder"}
    sub = [e.path for e in hf_api.list_repo_tree("org/ds", "dir", recursive=True, repo_type="dataset")]
    assert sorted(sub) == ["dir/sub", "dir/sub/b.bin"]

    path = hf_hub_download("org/ds", "dir/sub/b.bin", repo_type="dataset")
    assert path.startswith(hf_hub_cache) and read(path) == b"\x00\x01" * 10
    assert f"/snapshots/{info.oid}/" in path
    assert hf_api.file_exists("org/ds", "a.txt", repo_type="dataset")
    assert not hf_api.file_exists("org/ds", "nope.txt", repo_type="dataset")
    assert not hf_api.file_exists("org/ds", "a.txt", repo_type="dataset", revision="nobranch")
    assert not hf_api.file_exists("org/missing", "a.txt", repo_type="dataset")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("org/ds", "nope.txt", repo_type="dataset")

    commits = hf_api.list_repo_commits("org/ds", repo_type="dataset")
    assert [c.title for c in commits] == ["add files", "initial commit"]
    hf_api.create_commit("org/ds", [CommitOperationDelete("dir/")], commit_message="rm dir", repo_type="dataset")
    assert sorted(hub.files("org/ds", "dataset")) == [".gitattributes", "a.txt"]
    with pytest.raises(EntryNotFoundError):
        hf_api.create_commit("org/ds", [CommitOperationDelete("zzz.txt")], commit_message="x", repo_type="dataset")
    # an older commit stays readable by its id
    assert hub.files("org/ds", "dataset", revision=info.oid)["dir/sub/b.bin"] == b"\x00\x01" * 10


def test_parent_commit_conflict_is_412(hub, hf_api):
    hf_api.create_repo("org/m")
    first = hf_api.create_commit("org/m", [add("x.txt", "1")], commit_message="one")
    hf_api.create_commit("org/m", [add("x.txt", "2")], commit_message="two", parent_commit=first.oid)
    with pytest.raises(HfHubHTTPError) as exc:
        hf_api.create_commit("org/m", [add("x.txt", "3")], commit_message="three", parent_commit=first.oid)
    assert exc.value.response.status_code == 412
    assert "A commit has happened since" in str(exc.value)
    head = hf_api.model_info("org/m").sha
    hf_api.create_commit("org/m", [add("x.txt", "3")], commit_message="three", parent_commit=head[:7])
    assert hub.files("org/m")["x.txt"] == b"3" and hub.commit_count("org/m") == 4


def test_create_pr_gives_pr_ref(hub, hf_api):
    hf_api.create_repo("org/m")
    main_before = hf_api.model_info("org/m").sha
    info = hf_api.create_commit("org/m", [add("new.txt", "pr content")], commit_message="proposal", create_pr=True)
    assert info.pr_num == 1 and info.pr_revision == "refs/pr/1" and info.pr_url.endswith("/org/m/discussions/1")
    assert hf_api.model_info("org/m").sha == main_before
    assert not hf_api.file_exists("org/m", "new.txt")
    assert hf_api.file_exists("org/m", "new.txt", revision="refs/pr/1")
    assert read(hf_hub_download("org/m", "new.txt", revision="refs/pr/1")) == b"pr content"
    assert hub.repo("org/m").refs == {"refs/heads/main": main_before, "refs/pr/1": info.oid}
    # a commit to the PR ref updates the PR; a second PR gets the next number
    hf_api.create_commit("org/m", [add("more.txt", "x")], commit_message="more", revision="refs/pr/1")
    assert sorted(hub.files("org/m", revision="refs/pr/1")) == [".gitattributes", "more.txt", "new.txt"]
    assert hf_api.create_commit("org/m", [add("b.txt", "b")], commit_message="b", create_pr=True).pr_num == 2


def test_identical_push_makes_no_commit(hub, hf_api):
    hf_api.create_repo("org/m")
    payload = b"same bytes"
    first = hf_api.upload_file(path_or_fileobj=payload, path_in_repo="sig/one.bin", repo_id="org/m")
    count = hub.commit_count("org/m")
    # preupload answers the remote blob sha as `oid`; the client drops unchanged files and, with nothing
    # left, makes no request to /commit and returns the current head.
    hub.requests.clear()
    second = hf_api.upload_file(path_or_fileobj=payload, path_in_repo="sig/one.bin", repo_id="org/m")
    assert second.oid == first.oid and hub.commit_count("org/m") == count
    assert [r[:2] for r in hub.requests if r[0] == "POST"] == [("POST", "/api/models/org/m/preupload/main")]
    # the same short-cut ignores create_pr (no PR is opened) and a stale parent_commit (no 412)
    stale = hub.repo("org/m").history(first.oid)[-1].oid
    third = hf_api.create_commit(
        "org/m", [add("sig/one.bin", payload)], commit_message="again", create_pr=True, parent_commit=stale
    )
    assert third.oid == first.oid and third.pr_url is None and hub.commit_count("org/m") == count
    # a commit with one changed file among unchanged ones goes through
    mixed = hf_api.create_commit("org/m", [add("sig/one.bin", payload), add("two.bin", b"2")], commit_message="m")
    assert mixed.oid != first.oid and hub.commit_count("org/m") == count + 1


def test_cards_tags_and_discovery(hub, hf_api):
    hf_api.create_repo("org/base")
    hf_api.create_repo("org/adapter")
    hf_api.create_repo("org/finetune")
    hf_api.upload_file(path_or_fileobj=b"{}", path_in_repo="adapter_config.json", repo_id="org/adapter")
    for repo in ("org/adapter", "org/finetune"):
        card = ModelCard(f"---\nbase_model: org/base\nlibrary_name: peft\ntags:\n- fisher-signature\n---\n# {repo}\n")
        card.push_to_hub(repo, commit_message="card")
    loaded = ModelCard.load("org/adapter")
    assert loaded.data.base_model == "org/base" and "# org/adapter" in loaded.text
    info = hf_api.model_info("org/adapter")
    assert info.card_data.base_model == "org/base"
    assert {"fisher-signature", "peft", "base_model:org/base", "base_model:adapter:org/base"} <= set(info.tags)
    assert "base_model:finetune:org/base" in hf_api.model_info("org/finetune").tags

    found = list(hf_api.list_models(filter="base_model:adapter:org/base"))
    assert [m.id for m in found] == ["org/adapter"] and found[0].card_data is None
    with_cards = list(hf_api.list_models(filter=["fisher-signature", "base_model:org/base"], cardData=True))
    assert sorted(m.id for m in with_cards) == ["org/adapter", "org/finetune"]
    assert with_cards[0].card_data.base_model == "org/base"
    assert [m.id for m in hf_api.list_models(search="fine")] == ["org/finetune"]
    assert len(list(hf_api.list_models(limit=2))) == 2

    hf_api.create_repo("alice/d1", repo_type="dataset")
    hf_api.create_repo("bob/d2", repo_type="dataset")
    DatasetCard("---\nlicense: mit\ntags: [text]\n---\nDocs\n").push_to_hub("alice/d1", repo_type="dataset")
    assert [d.id for d in hf_api.list_datasets(author="alice")] == ["alice/d1"]
    assert [d.id for d in hf_api.list_datasets(filter="license:mit")] == ["alice/d1"]
    assert DatasetCard.load("alice/d1").data.license == "mit"
    # a card update through a PR, with the parent pinned
    head = hf_api.dataset_info("alice/d1").sha
    pushed = DatasetCard("---\nlicense: mit\n---\nNew\n").push_to_hub(
        "alice/d1", repo_type="dataset", create_pr=True, parent_commit=head
    )
    assert pushed.pr_revision == "refs/pr/1" and pushed.pr_url.endswith("/datasets/alice/d1/discussions/1")
    assert "New" in hub.files("alice/d1", "dataset", "refs/pr/1")["README.md"].decode()
    with pytest.raises(ValueError, match="Invalid metadata"):
        hf_api.create_commit("org/base", [add("README.md", "---\n[unclosed\n---\n")], commit_message="bad")


def test_safetensors_header_read_with_range_requests(hub, hf_api):
    import numpy as np
    from safetensors.numpy import save

    data = save({"joint": np.arange(64, dtype=np.float32), "n": np.zeros(3, dtype=np.float64)}, metadata={"m": "64"})
    data += b"\x00" * 200_000  # a file larger than the client's first Range read
    hf_api.create_repo("org/m")
    hf_api.upload_file(path_or_fileobj=data, path_in_repo="model.safetensors", repo_id="org/m")
    hf_api.upload_file(path_or_fileobj=data, path_in_repo=".fisher_signatures/s.safetensors", repo_id="org/m")
    hub.requests.clear()
    meta = hf_api.parse_safetensors_file_metadata("org/m", ".fisher_signatures/s.safetensors")
    assert meta.metadata == {"m": "64"} and meta.tensors["joint"].shape == [64]
    assert meta.tensors["n"].dtype == "F64"
    gets = [r for r in hub.requests if r[0] == "GET"]
    assert gets and all(r[2] and r[2].startswith("bytes=") for r in gets)
    assert hf_api.get_safetensors_metadata("org/m").weight_map == {
        "joint": "model.safetensors",
        "n": "model.safetensors",
    }

    from huggingface_hub.utils import get_session

    url = f"{hub.endpoint}/org/m/resolve/main/model.safetensors"
    r = get_session().get(url, headers={"Range": "bytes=0-7"})
    assert r.status_code == 206 and r.content == data[:8] and r.headers["Content-Range"] == f"bytes 0-7/{len(data)}"
    assert SHA.fullmatch(r.headers["X-Repo-Commit"])
    assert get_session().get(url, headers={"Range": "bytes=-4"}).content == data[-4:]
    assert get_session().get(url, headers={"Range": f"bytes={len(data)}-"}).status_code == 416
    head = get_session().head(url)
    assert int(head.headers["Content-Length"]) == len(data) and head.headers["ETag"].strip('"') != ""


def test_snapshot_then_offline_read_in_subprocess(hub, hf_api, hf_hub_cache):
    hf_api.create_repo("org/d", repo_type="dataset")
    ops = [add(f".fisher_signatures/s{i}.txt", f"sig {i}") for i in range(12)] + [add("README.md", "---\na: 1\n---\n")]
    hf_api.create_commit("org/d", ops, commit_message="many", repo_type="dataset")
    folder = snapshot_download("org/d", repo_type="dataset")  # 8 download threads against the server
    assert sorted(os.listdir(os.path.join(folder, ".fisher_signatures"))) == sorted(f"s{i}.txt" for i in range(12))

    script = (
        "from huggingface_hub import hf_hub_download, snapshot_download, constants\n"
        "assert constants.HF_HUB_OFFLINE\n"
        "p = hf_hub_download('org/d', '.fisher_signatures/s3.txt', repo_type='dataset')\n"
        "s = snapshot_download('org/d', repo_type='dataset')\n"
        "print(open(p).read(), s)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": hf_hub_cache, "HF_ENDPOINT": "http://127.0.0.1:9"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["sig", "3", folder]


def test_server_answers_400_for_unsupported_and_never_5xx(hub):
    from huggingface_hub.utils import get_session

    r = get_session().get(f"{hub.endpoint}/api/spaces/org/x/runtime")
    assert r.status_code == 400 and "does not support" in r.json()["error"]
    r = get_session().post(f"{hub.endpoint}/api/repos/create", json={"name": "x"})  # no token
    assert r.status_code == 401
    r = get_session().post(
        f"{hub.endpoint}/api/models/org/none/commit/main", content=b"not json", headers={"Authorization": "Bearer t"}
    )
    assert r.status_code == 400
    assert json.loads(get_session().post(f"{hub.endpoint}/api/validate-yaml", json={"content": "x"}).text)["warnings"]


def serve(root, *options: str) -> tuple[subprocess.Popen, dict[str, str]]:
    """``fisherhub hub serve --root ROOT --port 0`` started in a subprocess; (it, the environment it printed)."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fisherhub",
            "hub",
            "serve",
            "--port",
            "0",
            *(["--root", str(root)] if root else []),
            *options,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    printed = {}
    for line in process.stdout:
        if line.startswith("export "):
            name, value = line.removeprefix("export ").strip().split("=", 1)
            printed[name] = value
        if line.startswith("Ctrl-C stops it"):
            return process, printed
    raise AssertionError(f"the server ended before it served: {process.stderr.read()}")


def stop(process: subprocess.Popen) -> str:
    process.terminate()
    _, error = process.communicate(timeout=30)
    assert process.returncode == 0, error
    return error


def test_hub_serve_prints_the_environment_and_keeps_its_repos_across_restarts(tmp_path):
    """Issue 32: no command ran the local Hub (random port, state in memory). ``fisherhub hub serve`` listens on
    127.0.0.1 only, prints the environment to export, and with ``--root`` keeps its repos across a restart; a
    second server on the same folder is refused."""
    root = tmp_path / "local-hub"
    process, printed = serve(root)
    try:
        assert set(printed) == {
            "HF_ENDPOINT",
            "HF_TOKEN",
            "HF_HUB_CACHE",
            "HF_HUB_DISABLE_XET",
            "HF_HUB_DISABLE_TELEMETRY",
        }
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", printed["HF_ENDPOINT"]) and printed["HF_HUB_CACHE"].startswith(
            str(root)
        )
        api = HfApi(endpoint=printed["HF_ENDPOINT"], token=printed["HF_TOKEN"])
        assert api.whoami()["name"] == "me"
        api.create_repo("me/kept", repo_type="dataset")
        api.create_commit("me/kept", [add("data.jsonl", '{"text": "a"}\n')], commit_message="data", repo_type="dataset")
        head = api.dataset_info("me/kept").sha
        twice = subprocess.run(
            [sys.executable, "-m", "fisherhub", "hub", "serve", "--port", "0", "--root", str(root)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert twice.returncode == 1 and f"--root {root}: another local Hub keeps its state in {root}" in twice.stderr
    finally:
        said = stop(process)
    assert said.strip() == f"local Hub stopped; its repos are in {root}"
    process, printed = serve(root)
    try:
        api = HfApi(endpoint=printed["HF_ENDPOINT"], token=printed["HF_TOKEN"])
        assert api.dataset_info("me/kept").sha == head
        assert api.list_repo_files("me/kept", repo_type="dataset") == [".gitattributes", "data.jsonl"]
        with pytest.raises(RepositoryNotFoundError):
            api.model_info("gpt3")  # an id without a namespace, as the Hub answers one it does not have
    finally:
        stop(process)
    help_text = subprocess.run(
        [sys.executable, "-m", "fisherhub", "hub", "serve", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    assert "A development tool, not the Hub" in help_text and "127.0.0.1 only" in help_text
