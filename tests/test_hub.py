"""fisherhub.hub and the push / list / pull commands, through the real `huggingface_hub` client against the
local Hub server (fisherhub.testing.hub_server, started by conftest.py)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy
import pytest
import torch
import yaml
from fisherhub.testing.oracles import synthetic_task
from huggingface_hub import CommitOperationAdd, DatasetCard, ModelCard, RepoCard
from safetensors.numpy import save

from fisherhub.core.batch import HeadBatch
import fisherhub.hub.push as hub_push
from fisherhub import (
    InputError,
    Signature,
    SignatureFileError,
    SketchSpec,
    SketchState,
)
from fisherhub.cli.commands import list_signatures as list_command
from fisherhub.cli.commands import pull as pull_command
from fisherhub.cli.commands import push as push_command
from fisherhub.hub import (
    SIGNATURE_TAG,
    AmbiguousSignatureError,
    CardError,
    ConcurrentPushError,
    RepoNotFoundError,
    SignatureNotFoundError,
    SignatureRef,
    download_signature,
    find_adapters,
    find_signed_datasets,
    list_signatures,
    load_signature,
    push_signature,
)
from fisherhub.hub.cards import CARD_KEY, SECTION_BEGIN, SECTION_END

DATA = "datasets/org/data"  # the dataset_repo fixture's repo, as a reference

# offline pulls in a fresh process (HF_HUB_OFFLINE is read at import): argv = ref, output, ref, output, ...;
# prints {ref: "ok" or "<error type>: <message>"}
OFFLINE_PULLS = """
import json, sys
from test_hub import cli
results = {}
for ref, output in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        results[ref] = "ok" if cli("pull", ref, "-o", output) == 0 else "failed"
    except Exception as exc:
        results[ref] = f"{type(exc).__name__}: {exc}"
print(json.dumps(results))
"""


def cli(*argv: str) -> int:
    """Run push, list or pull as ``fisherhub`` does (its output through ``printable_streams``); errors propagate."""
    from fisherhub.safe_text import printable_streams

    parser = argparse.ArgumentParser(prog="fisherhub")
    subparsers = parser.add_subparsers()
    for command in (push_command, list_command, pull_command):
        command.register(subparsers)
    args = parser.parse_args(argv)
    with printable_streams():
        return args.func(args)


def make_signature(
    base_model: str = "org/base", dataset: str = "org/data", *, n: int = 200, seed: int = 0, **metadata: str
) -> Signature:
    """A small signature of a synthetic task; the head checksum stands for the base model (so each base model
    has its own sketch id)."""
    spec = SketchSpec(d=8, vocab_size=16, m=64).with_fingerprint(head_checksum=f"head-of-{base_model}")
    activations, errors = synthetic_task(n, 8, 16, seed=seed)
    state = SketchState(spec).update(HeadBatch(activations=activations, doc_index=torch.arange(n), errors=errors))
    return state.finalize({"base_model": base_model, "dataset": dataset, **metadata})


def read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def card_of(hub, repo_id: str, repo_type: str = "dataset", revision: str = "main") -> RepoCard:
    return RepoCard(hub.files(repo_id, repo_type, revision)["README.md"].decode())


def set_files(hub, repo_id: str, repo_type: str, files: dict[str, bytes]) -> None:
    """Commit straight into the server's state (for content the client refuses to upload, like a broken card)."""
    repo = hub.repo(repo_id, repo_type)
    head = repo.refs["refs/heads/main"]
    repo.refs["refs/heads/main"] = repo.add_commit(head, {**repo.commits[head].files, **files}, "direct edit")


def with_header(data: bytes, **changes: str) -> bytes:
    """The safetensors file ``data`` with ``__metadata__`` entries changed and the tensors as they were."""
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    header["__metadata__"].update(changes)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    return len(encoded).to_bytes(8, "little") + encoded + data[8 + length :]


@pytest.fixture
def dataset_repo(hub, hf_api, hf_hub_cache) -> str:
    hf_api.create_repo("org/data", repo_type="dataset")
    DatasetCard("---\nlicense: mit\n---\n# Org data\n\nWhat this dataset is.\n").push_to_hub(
        "org/data", repo_type="dataset"
    )
    return "org/data"


def test_push_to_dataset_repo_list_and_pull_byte_identical(hub, hf_api, dataset_repo, tmp_path):
    signature = make_signature(dataset_config="default", dataset_split="train")
    commits = hub.commit_count(dataset_repo, "dataset")
    result = push_signature(signature, DATA)
    path = f".fisher_signatures/org--base__org--data-default-train__{signature.sketch_id}.safetensors"
    assert result.committed and result.ref == SignatureRef(dataset_repo, "dataset", result.ref.revision, path)
    assert hub.commit_count(dataset_repo, "dataset") == commits + 1  # file and card in one commit
    assert hub.files(dataset_repo, "dataset")[path] == signature.to_bytes()
    assert result.ref.revision == hf_api.dataset_info(dataset_repo).sha and result.pr_url is None

    card = card_of(hub, dataset_repo)
    assert card.data.license == "mit" and SIGNATURE_TAG in card.data.tags
    assert card.data[CARD_KEY] == [
        {
            "path": path,
            "base_model": "org/base",
            "sketch_id": signature.sketch_id,
            "tokens": 200,
            "documents": 200,
            "dataset": "org/data",
            "dataset_config": "default",
            "dataset_split": "train",
        }
    ]
    assert card.text.startswith("# Org data\n\nWhat this dataset is.\n")
    section = card.text[card.text.index(SECTION_BEGIN) : card.text.index(SECTION_END)]
    assert "## Fisher signatures" in section and "This dataset carries 1 FisherSketch signature\n" in section
    row = f"| [`{path.split('/')[-1]}`]({path}) | [org/base](/org/base) | `{signature.sketch_id}` | [org/data](/datasets/org/data) (default, train) | 200 | 200 |"
    assert row in section.splitlines()
    assert 'load_signature("datasets/org/data", base_model="org/base")' in section
    card.validate(repo_type="dataset")  # the server's YAML check

    hub.requests.clear()
    [info] = list_signatures(DATA)
    assert (info.path, info.sketch_id, info.base_model, info.dataset) == (
        path,
        signature.sketch_id,
        "org/base",
        "org/data",
    )
    assert (info.num_tokens, info.num_documents, info.listed, info.problem) == (200, 200, True, None)
    assert info.size == len(signature.to_bytes()) and info.ref.revision == result.ref.revision
    file_reads = [r for r in hub.requests if r[1].endswith(path)]
    assert file_reads and all(r[2] and r[2].startswith("bytes=") for r in file_reads)  # header only

    expected = signature.to_bytes()
    for ref in ("datasets/org/data", str(result.ref), result.ref.short(), f"datasets/org/data@main:{path}"):
        assert load_signature(ref).to_bytes() == expected, ref
    assert read(download_signature("datasets/org/data", base_model="org/base")) == expected
    assert cli("pull", "datasets/org/data", "-o", str(tmp_path)) == 0
    assert read(str(tmp_path / path.split("/")[-1])) == expected
    assert cli("pull", str(result.ref), "-o", str(tmp_path / "copy.safetensors")) == 0
    assert read(str(tmp_path / "copy.safetensors")) == expected


def test_push_to_adapter_repo_and_discovery(hub, hf_api, hf_hub_cache):
    hf_api.create_repo("org/adapter")
    hf_api.create_commit(
        "org/adapter",
        [
            CommitOperationAdd("adapter_config.json", b'{"base_model_name_or_path": "org/base"}'),
            CommitOperationAdd("README.md", b"---\nbase_model: org/base\nlibrary_name: peft\n---\n# LoRA adapter\n"),
        ],
        commit_message="adapter",
    )
    hf_api.create_repo("org/other-adapter")
    ModelCard("---\nbase_model: org/other\n---\n").push_to_hub("org/other-adapter")
    signature = make_signature(dataset="org/train-data")
    result = push_signature(signature, "org/adapter", repo_type="model")
    assert result.committed and result.ref.repo_type == "model"

    card = card_of(hub, "org/adapter", "model")
    assert card.data.base_model == "org/base" and card.data.library_name == "peft"
    assert card.data[CARD_KEY][0]["dataset"] == "org/train-data"
    assert card.text.startswith("# LoRA adapter\n") and "This adapter carries 1 FisherSketch signature" in card.text
    assert 'load_signature("org/adapter", base_model="org/base")' in card.text
    assert load_signature("org/adapter").to_bytes() == signature.to_bytes()
    assert [i.path for i in list_signatures("org/adapter", "model")] == [result.ref.path]
    assert [a.ref.repo_id for a in find_adapters("org/base")] == ["org/adapter"] and find_adapters("org/nothing") == []

    for repo_id, base_model in (("org/d1", "org/base"), ("org/d2", "org/other"), ("org/unsigned", None)):
        hf_api.create_repo(repo_id, repo_type="dataset")
        if base_model:
            push_signature(make_signature(base_model, repo_id), repo_id, "dataset")
    hf_api.create_repo("org/tagged-by-hand", repo_type="dataset")  # the tag without a matching block
    DatasetCard(f"---\ntags: [{SIGNATURE_TAG}]\n---\n").push_to_hub("org/tagged-by-hand", repo_type="dataset")
    assert find_signed_datasets("org/base") == ["org/d1"]
    assert find_signed_datasets("org/other") == ["org/d2"]
    d1_sketch = make_signature("org/base").sketch_id
    assert find_signed_datasets("org/base", sketch_id=d1_sketch) == ["org/d1"]
    assert find_signed_datasets("org/base", sketch_id="0" * 12) == []


def test_two_base_models_coexist_and_a_repush_replaces_only_its_entry(hub, dataset_repo):
    first, second = make_signature("org/base"), make_signature("org/other-base", seed=1)
    assert first.sketch_id != second.sketch_id
    path_first = push_signature(first, DATA).ref.path
    path_second = push_signature(second, DATA).ref.path
    entries = card_of(hub, dataset_repo).data[CARD_KEY]
    assert [e["path"] for e in entries] == [path_first, path_second]
    assert sorted(i.base_model for i in list_signatures(DATA)) == ["org/base", "org/other-base"]
    assert card_of(hub, dataset_repo).text.count("| [`") == 2  # both rows in the section

    with pytest.raises(AmbiguousSignatureError, match="2 signatures match") as exc:
        load_signature("datasets/org/data")
    assert path_first in str(exc.value) and path_second in str(exc.value)
    assert load_signature("datasets/org/data", base_model="org/other-base").to_bytes() == second.to_bytes()
    assert load_signature("datasets/org/data", sketch_id=first.sketch_id).to_bytes() == first.to_bytes()

    updated = make_signature("org/base", n=300, seed=2)  # same base model, data and sketch id: same file
    assert push_signature(updated, DATA).ref.path == path_first
    entries = card_of(hub, dataset_repo).data[CARD_KEY]
    assert [(e["path"], e["tokens"]) for e in entries] == [(path_first, 300), (path_second, 200)]
    assert hub.files(dataset_repo, "dataset")[path_second] == second.to_bytes()
    assert load_signature("datasets/org/data", base_model="org/base").to_bytes() == updated.to_bytes()


def test_repush_makes_no_commit(hub, dataset_repo):
    signature = make_signature()
    first = push_signature(signature, DATA)
    commits = hub.commit_count(dataset_repo, "dataset")
    hub.requests.clear()
    again = push_signature(signature, DATA)
    assert not again.committed and again.ref == first.ref and again.commit_url is None
    assert hub.commit_count(dataset_repo, "dataset") == commits
    assert not [r for r in hub.requests if r[0] == "POST"]  # decided before calling create_commit
    as_pr = push_signature(signature, DATA, create_pr=True)
    assert not as_pr.committed and as_pr.pr_url is None and hub.repo(dataset_repo, "dataset").prs == 0
    # the same file with a card that lost its entry is not "already there": the card is fixed
    hub_card = hub.files(dataset_repo, "dataset")["README.md"].decode()
    set_files(hub, dataset_repo, "dataset", {"README.md": hub_card.replace(f"{CARD_KEY}:", "old_block:").encode()})
    assert push_signature(signature, DATA).committed
    assert card_of(hub, dataset_repo).data[CARD_KEY][0]["path"] == first.ref.path


def test_concurrent_push_is_detected(hub, hf_api, dataset_repo, monkeypatch):
    read_card = hub_push.download_card

    def read_then_someone_pushes(repo, token=None):
        text = read_card(repo, token)
        hf_api.upload_file(
            path_or_fileobj=b"theirs", path_in_repo="theirs.txt", repo_id=dataset_repo, repo_type="dataset"
        )
        return text

    monkeypatch.setattr(hub_push, "download_card", read_then_someone_pushes)
    signature = make_signature()
    with pytest.raises(ConcurrentPushError, match="someone pushed .* Push again"):
        push_signature(signature, DATA)
    files = hub.files(dataset_repo, "dataset")
    assert "theirs.txt" in files and not any(p.startswith(".fisher_signatures/") for p in files)
    monkeypatch.setattr(hub_push, "download_card", read_card)
    assert push_signature(signature, DATA).committed
    assert {"theirs.txt", "README.md"} <= set(hub.files(dataset_repo, "dataset"))

    stale = hub.repo(dataset_repo, "dataset").history(hf_api.dataset_info(dataset_repo).sha)[1].oid
    with pytest.raises(ConcurrentPushError):
        push_signature(make_signature(seed=3, n=150), DATA, parent_commit=stale)


def test_create_pr_opens_a_pull_request(hub, hf_api, dataset_repo):
    main = hf_api.dataset_info(dataset_repo).sha
    signature = make_signature()
    result = push_signature(signature, DATA, create_pr=True)
    assert result.committed and result.pr_url.endswith("/datasets/org/data/discussions/1")
    assert hf_api.dataset_info(dataset_repo).sha == main  # main unchanged
    assert result.ref.path in hub.files(dataset_repo, "dataset", "refs/pr/1")
    assert card_of(hub, dataset_repo, revision="refs/pr/1").data[CARD_KEY][0]["path"] == result.ref.path
    assert load_signature("datasets/org/data", revision="refs/pr/1").to_bytes() == signature.to_bytes()
    assert load_signature(str(result.ref)).to_bytes() == signature.to_bytes()
    with pytest.raises(SignatureNotFoundError, match="lists no signature"):
        load_signature("datasets/org/data")  # not on main until the PR is merged


def test_offline_pull_from_the_cache(hub, dataset_repo, hf_hub_cache, tmp_path):
    signature = make_signature()
    result = push_signature(signature, DATA)
    load_signature(str(result.ref))  # cached: pinned
    load_signature("datasets/org/data")  # cached: the card and refs/main
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]),
    }
    assert env["HF_HUB_CACHE"] == hf_hub_cache and env["HF_HOME"]
    pulls = {str(result.ref): "pinned", "datasets/org/data": "main", "datasets/org/never-fetched": "none"}
    argv = [arg for ref, name in pulls.items() for arg in (ref, str(tmp_path / name))]
    out = subprocess.run(
        [sys.executable, "-c", OFFLINE_PULLS, *argv], check=False, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout.splitlines()[-1])
    assert results[str(result.ref)] == results["datasets/org/data"] == "ok"
    assert read(str(tmp_path / "pinned")) == read(str(tmp_path / "main")) == signature.to_bytes()
    assert results["datasets/org/never-fetched"].startswith("OfflineCacheError: hf://datasets/org/never-fetched")
    assert "HF_HUB_OFFLINE is set" in results["datasets/org/never-fetched"]
    assert not (tmp_path / "none").exists()


def test_cli_push_and_list(hub, dataset_repo, tmp_path, capsys):
    signature = make_signature()
    signature.save(tmp_path / "sig.safetensors")
    assert cli("push", str(tmp_path / "sig.safetensors"), "org/data", "--repo-type", "dataset") == 0
    assert "pushed datasets/org/data@" in capsys.readouterr().out
    assert cli("push", str(tmp_path / "sig.safetensors"), "datasets/org/data") == 0
    assert "nothing to commit" in capsys.readouterr().out
    assert cli("list", "hf://datasets/org/data") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("datasets/org/data@") and lines[0].endswith(": 1 signature file")
    assert lines[1].split() == ["path", "base", "model", "sketch", "id", "dataset", "tokens", "listed", "problem"]
    assert lines[2].split() == [
        list_signatures(DATA)[0].path,
        "org/base",
        signature.sketch_id,
        "org/data",
        "200",
        "yes",
    ]
    with pytest.raises(InputError, match="not a repo reference"):
        cli("list", "datasets/org/data:.fisher_signatures/x.safetensors")


def test_missing_repo_revision_and_file(hub, hf_api, dataset_repo):
    signature = make_signature()
    with pytest.raises(RepoNotFoundError, match="repository not found.*create_repo"):
        push_signature(signature, "org/missing")
    with pytest.raises(RepoNotFoundError, match="datasets/"):
        list_signatures("org/data")  # a bare id is a model repo; this one exists only as a dataset
    with pytest.raises(RepoNotFoundError):
        load_signature("datasets/org/missing")
    with pytest.raises(RepoNotFoundError, match="revision not found"):
        load_signature("datasets/org/data@no-such-branch")
    push_signature(signature, DATA)
    with pytest.raises(SignatureNotFoundError, match="no file '.fisher_signatures/nope.safetensors'"):
        load_signature("datasets/org/data:.fisher_signatures/nope.safetensors")
    with pytest.raises(SignatureNotFoundError, match="lists no signature with base_model=org/else.*org--base__"):
        load_signature("datasets/org/data", base_model="org/else")
    hf_api.create_repo("org/no-card", repo_type="dataset")
    with pytest.raises(
        SignatureNotFoundError, match="lists no signatures .no .fisher_signatures/index.json and no card block"
    ):
        load_signature("datasets/org/no-card")


def test_remote_files_that_are_not_valid_signatures(hub, hf_api, dataset_repo):
    good = make_signature().to_bytes()
    bad_files = {
        "truncated": (good[: len(good) // 2], "not a readable safetensors signature"),
        "future": (with_header(good, format_version="99"), "format version '99' is not supported"),
        "edited": (with_header(good, sketch_id="000000000000"), "checksum mismatch"),
        "other": (save({"w": numpy.zeros(2, "float32")}), "not a fisherhub signature"),
    }
    hf_api.create_commit(
        dataset_repo,
        [CommitOperationAdd(f".fisher_signatures/{name}.safetensors", data) for name, (data, _) in bad_files.items()],
        commit_message="bad files",
        repo_type="dataset",
    )
    for name, (_, message) in bad_files.items():
        path = f".fisher_signatures/{name}.safetensors"
        with pytest.raises(SignatureFileError, match=message) as exc:
            load_signature(f"datasets/org/data:{path}")
        assert str(exc.value).startswith(f"hf://datasets/org/data/{path}:")  # names the repo and the file
    problems = {info.path.split("/")[-1]: info.problem for info in list_signatures(DATA)}
    assert problems["future.safetensors"].startswith("format version '99'")
    assert problems["other.safetensors"] == "not a fisherhub signature"
    assert problems["edited.safetensors"] is None  # a header read cannot check the checksum; loading does
    assert not any(info.listed for info in list_signatures(DATA))

    gone = push_signature(make_signature(), DATA).ref.path  # listed in the card, then its file deleted
    hf_api.delete_file(gone, dataset_repo, repo_type="dataset")
    [missing] = [info for info in list_signatures(DATA) if info.listed]
    assert (missing.path, missing.problem) == (gone, "listed in the index but the file is missing")
    with pytest.raises(SignatureNotFoundError, match=f"no file '{gone}'"):
        load_signature("datasets/org/data")


def test_malformed_card_is_refused_or_repaired_never_destroyed(hub, hf_api, dataset_repo):
    broken = "---\nlicense: mit\ntags: [unclosed\n---\n# Kept body\n\nText.\n"
    set_files(hub, dataset_repo, "dataset", {"README.md": broken.encode()})
    commits = hub.commit_count(dataset_repo, "dataset")
    signature = make_signature()
    with pytest.raises(CardError, match="malformed YAML header.*repair_card=True"):
        push_signature(signature, DATA)
    assert hub.files(dataset_repo, "dataset")["README.md"].decode() == broken
    assert hub.commit_count(dataset_repo, "dataset") == commits
    with pytest.raises(CardError):
        load_signature("datasets/org/data")  # cannot choose from a card it cannot read

    result = push_signature(signature, DATA, repair_card=True)
    repaired = hub.files(dataset_repo, "dataset")["README.md"].decode()
    card = RepoCard(repaired)
    assert card.data[CARD_KEY][0]["path"] == result.ref.path
    assert "```yaml\nlicense: mit\ntags: [unclosed\n```" in card.text  # the old header, verbatim
    assert "# Kept body\n\nText.\n" in card.text and SECTION_BEGIN in card.text
    assert load_signature("datasets/org/data").to_bytes() == signature.to_bytes()

    # a valid header whose signature block is not a list: the other keys stay
    hf_api.create_commit(
        dataset_repo,
        [CommitOperationAdd("README.md", f"---\nlicense: mit\n{CARD_KEY}: oops\n---\nBody\n".encode())],
        commit_message="hand edit",
        repo_type="dataset",
    )
    with pytest.raises(CardError, match="must be a list of mappings"):
        push_signature(signature, DATA)
    push_signature(signature, DATA, repair_card=True)
    card = card_of(hub, dataset_repo)
    assert card.data.license == "mit" and len(card.data[CARD_KEY]) == 1
    assert f"{CARD_KEY}: oops" in card.text and "Body\n" in card.text
    assert yaml.safe_load(hub.files(dataset_repo, "dataset")["README.md"].decode().split("---")[1])[CARD_KEY]


def test_bad_arguments(hub, dataset_repo, tmp_path):
    with pytest.raises(InputError, match="base_model"):
        push_signature(make_signature(base_model=""), DATA)
    with pytest.raises(InputError, match="repo_type"):
        push_signature(make_signature(), "spaces/org/data")
    with pytest.raises(SignatureFileError, match="not a Hub reference"):
        load_signature(str(tmp_path / "missing.safetensors"))
    with pytest.raises(InputError, match="revision"):
        load_signature("datasets/org/data@main", revision="other")
    with pytest.raises(InputError, match="names a file"):
        load_signature("datasets/org/data:.fisher_signatures/x.safetensors", base_model="org/base")
    make_signature().save(tmp_path / "local.safetensors")
    assert load_signature(tmp_path / "local.safetensors").sketch_id == make_signature().sketch_id
    with pytest.raises(InputError, match="local file"):
        load_signature(tmp_path / "local.safetensors", revision="main")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("datasets/org/name", SignatureRef("org/name", "dataset")),
        (
            "org/adapter@v1:.fisher_signatures/a.safetensors",
            SignatureRef("org/adapter", "model", "v1", ".fisher_signatures/a.safetensors"),
        ),
        ("models/org/adapter", SignatureRef("org/adapter", "model")),
        ("org/name", SignatureRef("org/name", "model")),  # bare: a model repo, as in hf:// URIs
        (
            "datasets/org/name@refs/pr/1:x.safetensors",
            SignatureRef("org/name", "dataset", "refs/pr/1", "x.safetensors"),
        ),
        (
            "hf://datasets/org/name@refs%2Fpr%2F1/.fisher_signatures/a.safetensors",
            SignatureRef("org/name", "dataset", "refs/pr/1", ".fisher_signatures/a.safetensors"),
        ),
        (
            "hf://datasets/org/name@refs/pr/1/.fisher_signatures/a.safetensors",  # unquoted refs/pr/N
            SignatureRef("org/name", "dataset", "refs/pr/1", ".fisher_signatures/a.safetensors"),
        ),
        (
            "hf://org/adapter@feature%2Fx/a.safetensors",
            SignatureRef("org/adapter", "model", "feature/x", "a.safetensors"),
        ),
        (
            "hf://spaces/org/demo/.fisher_signatures/a.safetensors",
            SignatureRef("org/demo", "space", None, ".fisher_signatures/a.safetensors"),
        ),
        ("spaces/org/demo@main", SignatureRef("org/demo", "space", "main")),
        ("hf://org/adapter/a.safetensors", SignatureRef("org/adapter", "model", None, "a.safetensors")),
        (
            "https://huggingface.co/datasets/org/name/blob/main/.fisher_signatures/a.safetensors",
            SignatureRef("org/name", "dataset", "main", ".fisher_signatures/a.safetensors"),
        ),
        (
            "https://huggingface.co/org/adapter/resolve/refs%2Fpr%2F2/.fisher_signatures/a.safetensors",
            SignatureRef("org/adapter", "model", "refs/pr/2", ".fisher_signatures/a.safetensors"),
        ),
        ("https://huggingface.co/datasets/org/name", SignatureRef("org/name", "dataset")),
        ("just-a-name", None),
        ("a/b/c.safetensors", None),
    ],
)
def test_reference_forms(text, expected):
    ref = SignatureRef.parse(text)
    assert ref == expected
    if ref is not None:
        assert SignatureRef.parse(str(ref)) == ref and SignatureRef.parse(ref.short()) == ref


@pytest.mark.parametrize(
    "text, message",
    [
        ("hf://datasets/org/name/../../etc/passwd", "without '..'"),
        ("datasets/org/name:.fisher_signatures/../README.md", "without '..'"),
        ("org/adapter@main:/abs.safetensors", "must be relative"),
        ("hf://buckets/org/bucket/a.safetensors", "not in a bucket"),
        ("https://huggingface.co/org/adapter/discussions/1", "not a signature reference"),
        ("hf://model/org/x", "not a signature reference"),  # singular prefix: the client's own message
    ],
)
def test_bad_references_are_refused_with_the_reason(text, message):
    with pytest.raises(InputError, match=message):
        SignatureRef.parse(text)
    with pytest.raises(InputError, match=message):
        load_signature(text)


def test_web_url_of_the_local_endpoint_and_pr_ref_load(hub, hf_api, dataset_repo):
    signature = make_signature()
    result = push_signature(signature, DATA, create_pr=True)
    path = result.ref.path
    for ref in (
        f"{hub.endpoint}/datasets/org/data/blob/refs%2Fpr%2F1/{path}",
        f"hf://datasets/org/data@refs/pr/1/{path}",
        f"datasets/org/data@refs/pr/1:{path}",
    ):
        assert load_signature(ref).to_bytes() == signature.to_bytes(), ref


def test_signatures_in_a_space_are_read_by_reference(hub, hf_api, hf_hub_cache):
    signature = make_signature()
    hf_api.create_repo("org/demo", repo_type="space", space_sdk="static")
    hf_api.upload_file(
        path_or_fileobj=signature.to_bytes(),
        path_in_repo=".fisher_signatures/a.safetensors",
        repo_id="org/demo",
        repo_type="space",
    )
    for ref in (
        "hf://spaces/org/demo/.fisher_signatures/a.safetensors",
        "spaces/org/demo:.fisher_signatures/a.safetensors",
        f"{hub.endpoint}/spaces/org/demo/blob/main/.fisher_signatures/a.safetensors",
    ):
        assert load_signature(ref).to_bytes() == signature.to_bytes(), ref
    [info] = list_signatures("hf://spaces/org/demo")
    assert (info.path, info.listed, info.sketch_id) == (".fisher_signatures/a.safetensors", False, signature.sketch_id)
    with pytest.raises(InputError, match="repo_type must be one of"):
        push_signature(signature, "spaces/org/demo")


def test_the_cache_is_read_through_huggingface_hub_for_what_was_fetched(hub, hf_api, dataset_repo, hf_hub_cache):
    """``cached_snapshot`` (what ``HF_HUB_OFFLINE=1`` reads): the commit main was last seen at, only the files
    fetched at it, each through ``try_to_load_from_cache``; also when the cache holds the commit's full file
    listing (a partial ``snapshot_download``)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError

    from fisherhub.hub.errors import OfflineCacheError
    from fisherhub.hub.refs import repo_ref
    from fisherhub.hub.snapshot import cached_snapshot

    signature = make_signature()
    path = push_signature(signature, DATA).ref.path
    ref = repo_ref(DATA)
    with pytest.raises(OfflineCacheError, match="holds nothing of this repo at main"):
        cached_snapshot(repo_ref("datasets/org/never-fetched"))
    load_signature(DATA)
    snapshot = cached_snapshot(ref)
    assert snapshot.ref.revision == hf_api.repo_info(dataset_repo, repo_type="dataset").sha
    assert path in snapshot.files and not snapshot.complete
    assert snapshot.cached_file(path).read_bytes() == signature.to_bytes()
    assert snapshot.cached_file("fisher_signatures/never-fetched.safetensors") is None
    assert [entry["path"] for entry in snapshot.entries()] == [path]

    snapshot_download(dataset_repo, repo_type="dataset", allow_patterns=["README.md"])  # caches the commit's tree
    with pytest.raises(IncompleteSnapshotError):  # which names files never fetched
        snapshot_download(dataset_repo, repo_type="dataset", local_files_only=True)
    assert set(cached_snapshot(ref).files) == {*snapshot.files, "README.md"}
    with pytest.raises(OfflineCacheError):
        cached_snapshot(repo_ref(DATA, revision="no-such-branch"))


def card_snippet(card_text: str) -> str:
    """The ``load_signature(...)`` call of a card's generated section."""
    [call] = [line for line in card_text.splitlines() if "= load_signature(" in line and "<org>" not in line]
    return call.split("=", 1)[1].strip()


def test_a_repush_of_the_same_data_replaces_the_older_file_and_says_so(hub, dataset_repo, tmp_path, capsys):
    """Issue 32: the same data sketched from a local file, then from its Hub dataset, was two signatures of one base
    model and sketch id, and `pull REPO`, `--sketch-id` and the card's snippet all failed with "2 signatures match".
    The second push replaces the first (equal sketches and counts), in the same commit, and says so."""
    from_file = make_signature(dataset="train.jsonl")
    from_hub = Signature(**{**from_file.__dict__, "metadata": {**from_file.metadata, "dataset": "org/data"}})
    first = push_signature(from_file, DATA)
    from_hub.save(tmp_path / "from-hub.safetensors")
    assert cli("push", str(tmp_path / "from-hub.safetensors"), DATA) == 0
    said = capsys.readouterr().out
    assert f"replaced {first.ref.path}: a signature of the same data (equal sketches)" in said
    files = hub.files(dataset_repo, "dataset")
    assert first.ref.path not in files and [i.dataset for i in list_signatures(DATA)] == ["org/data"]
    assert hub.commit_count(dataset_repo, "dataset") == 4  # initial, card, first push, the replacing push
    for loaded in (
        load_signature(DATA),
        load_signature(DATA, sketch_id=from_file.sketch_id),
        eval(card_snippet(card_of(hub, dataset_repo).text), {"load_signature": load_signature}),
    ):
        assert loaded.joint.equal(from_file.joint)
    assert cli("pull", DATA, "--sketch-id", from_file.sketch_id, "-o", str(tmp_path / "pulled.safetensors")) == 0
    # the same data sketched again with more documents: the same file, replaced, and said so
    more = make_signature(n=240)
    result = push_signature(more, DATA)
    assert result.replaced == {
        result.ref.path: "an older signature of the same base model, data and sketch id (200 documents, 200 tokens)"
    }
    # other data of the same base model is kept: then the choice needs the dataset, and the error says so
    push_signature(make_signature(dataset="org/other-data", seed=3), DATA)
    with pytest.raises(AmbiguousSignatureError) as exc:
        load_signature(DATA, base_model="org/base")
    message = str(exc.value)
    assert "2 signatures match base_model=org/base; choose one: " in message
    assert (
        "dataset=org/data (--dataset org/data)" in message
        and "dataset=org/other-data (--dataset org/other-data)" in message
    )
    assert load_signature(DATA, dataset="org/other-data").num_documents == 200
    assert cli("pull", DATA, "--dataset", "org/data", "-o", str(tmp_path / "chosen.safetensors")) == 0
    assert Signature.load(tmp_path / "chosen.safetensors").num_documents == 240
    snippet = card_snippet(card_of(hub, dataset_repo).text)  # the card's own snippet chooses one, and loads it
    assert snippet.startswith('load_signature("datasets/org/data", base_model="org/base", dataset=')
    assert eval(snippet, {"load_signature": load_signature}).metadata["dataset"] in snippet


def test_two_signatures_that_no_field_tells_apart_are_chosen_by_path(hub, dataset_repo):
    """Two lists of texts (no dataset named) under one base model: only their paths tell them apart, and the error
    and the card's snippet use the path."""
    first, second = make_signature(dataset="", seed=1), make_signature(dataset="", seed=2)
    paths = [push_signature(signature, DATA).ref.path for signature in (first, second)]
    with pytest.raises(AmbiguousSignatureError) as exc:
        load_signature(DATA)
    assert all(f"{path}: by its path, datasets/org/data:{path}" in str(exc.value) for path in paths)
    snippet = card_snippet(card_of(hub, dataset_repo).text)
    assert snippet == f'load_signature("datasets/org/data:{paths[0]}")'
    assert eval(snippet, {"load_signature": load_signature}).joint.equal(first.joint)


def test_a_signature_of_another_base_model_is_refused_by_an_adapter_unless_forced(hub, hf_api, tmp_path, capsys):
    """Issue 32: ``fisherhub push`` of a signature of another base model into an adapter repo was accepted, and the
    repo then advertised it. Refused, naming both base models (on the Hub and in a local adapter folder), unless
    forced."""
    from fisherhub.cli import run_command
    from fisherhub.hub.errors import OtherBaseModelError
    from fisherhub.testing.hub_repos import create_adapter

    create_adapter(hf_api, "org/adapter", "org/base")
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text('{"base_model_name_or_path": "/home/me/models/base"}')
    other = make_signature("org/tinymodel")
    other.save(tmp_path / "other.safetensors")
    for where in ("org/adapter", str(folder)):
        with pytest.raises(
            OtherBaseModelError,
            match=r"is an adapter of '(org|/home/me/models)/base', but the signature was sketched under 'org/tinymodel'",
        ):
            push_signature(other, where)
    parser = argparse.ArgumentParser(prog="fisherhub")
    push_command.register(parser.add_subparsers())
    assert run_command(parser, ["push", str(tmp_path / "other.safetensors"), "org/adapter"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: hf://models/org/adapter is an adapter of 'org/base'") and "--force" in error
    assert ".fisher_signatures/index.json" not in hub.files("org/adapter")
    assert run_command(parser, ["push", str(tmp_path / "other.safetensors"), "org/adapter", "--force"]) == 0
    assert push_signature(make_signature("org/base"), "org/adapter").committed  # its own base model: accepted
    assert push_signature(make_signature("base"), str(folder)).file  # a local base model, by its folder's name
