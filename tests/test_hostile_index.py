"""The index and the files strangers' repos hand us, under hostile input (issue 37, items 3 to 5): ``index build
--push`` into a dataset repo that holds someone's data is refused (its files and ``load_dataset`` unchanged) unless
forced; every JSON and YAML a repo or folder gives us goes through one bounded reader (``core.bounded``), so a
state file nested 200,000 deep, an adapter config, index, card, row or signature spec nested too deep, too large,
or a YAML alias bomb is a clear error naming the file, or that candidate or row skipped with it, never a
``RecursionError``; a regular file as ``--work`` is a clear error and is kept."""

from __future__ import annotations

import json
import re

import datasets  # here, not in a test: its log handler would keep that test's captured stderr
import pytest
from test_hub import make_signature, set_files
from test_signature_index import BASE, INDEX, add_adapter

from fisherhub.cli import main
from fisherhub.core.bounded import MAX_DEPTH
from fisherhub.core.errors import InputError, SignatureFileError
from fisherhub.hub.errors import CardError
from fisherhub.hub.refs import SIGNATURE_FOLDER, SignatureRef
from fisherhub.hub.signature_index import STATE_PATH, Layout, build_index, read_rows, signature_row
from fisherhub.selection import select_adapter
from fisherhub.testing.hub_repos import create_jsonl_dataset

DEEP = b"[" * 200_000 + b"]" * 200_000  # 400 kB: far past Python's recursion limit
DEEPISH = "[" * 10_000 + "]" * 10_000  # 20 kB: within any file's size bound, still past the recursion limit
NESTED = f"nested more than {MAX_DEPTH} deep: not read"
ROWS = [{"text": f"someone's document {i}", "label": i % 3} for i in range(12)]


@pytest.fixture
def adapters(hub, hf_api, hf_hub_cache):
    return [add_adapter(hf_api, f"lora-{i}", i) for i in range(3)]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


# -- item 3: a dataset repo that holds someone's data is not turned into an index --------------------------------
def test_build_refuses_a_repo_that_holds_data_and_leaves_it_as_it_was(adapters, hub, hf_api, tmp_path, capsys):
    create_jsonl_dataset(hf_api, "someone/data", ROWS)
    files, commits = hub.files("someone/data", "dataset"), hub.commit_count("someone/data", "dataset")
    refused = (
        r"datasets/someone/data is not a signature index \(no fisherhub_index\.json\) and holds train\.jsonl: "
        r"pushing the index would add Parquet shards under data/ and change what load_dataset\('someone/data'\) "
        r"returns\. Nothing was pushed\. Push to a new or empty dataset repo, or pass --force"
    )
    with pytest.raises(InputError, match=refused):
        build_index(BASE, "datasets/someone/data", work=tmp_path / "api")
    code, _, err = run(
        ["index", "build", BASE, "--push", "datasets/someone/data", "--work", str(tmp_path / "cli")], capsys
    )
    assert code == 1 and err.startswith("error: datasets/someone/data is not a signature index")
    assert hub.files("someone/data", "dataset") == files and hub.commit_count("someone/data", "dataset") == commits
    loaded = datasets.load_dataset("someone/data", split="train", download_mode="force_redownload")
    assert loaded.to_list() == ROWS
    assert not (tmp_path / "api").exists()  # refused before anything was read or written
    # a new repo, an empty one and an index are pushed into; a forced push into the data repo too
    hf_api.create_repo("someone/empty", repo_type="dataset")
    for name in ("datasets/someone/new", "datasets/someone/empty", "datasets/someone/new"):
        assert build_index(BASE, name, work=tmp_path / name.replace("/", "-"))[1].rows == 3
    code, out, _ = run(
        ["index", "build", BASE, "--push", "datasets/someone/data", "--work", str(tmp_path / "f"), "--force"], capsys
    )
    assert code == 0 and "pushed datasets/someone/data@" in out
    assert any(path.startswith("data/") for path in hub.files("someone/data", "dataset"))


# -- item 4: a state file nested 200,000 deep --------------------------------------------------------------------
def test_a_state_file_nested_200000_deep_is_a_clear_error(adapters, hub, tmp_path, capsys):
    build_index(BASE, INDEX, work=tmp_path / "work")
    set_files(hub, "tester/base-index", "dataset", {STATE_PATH: DEEP})
    target = make_signature(BASE, "org/target", seed=4)
    message = f"datasets/tester/base-index: {STATE_PATH} is {NESTED}"
    with pytest.raises(InputError, match=message):
        select_adapter(target, index="tester/base-index")
    target.save(tmp_path / "target.safetensors")
    code, _, err = run(["select", str(tmp_path / "target.safetensors"), "--index", "tester/base-index"], capsys)
    assert code == 1 and f"error: {message}" in err
    code, _, err = run(["index", "show", "tester/base-index"], capsys)
    assert code == 1 and f"error: {message}" in err


def test_a_state_file_that_is_too_large_or_malformed_is_a_clear_error(adapters, hub, tmp_path, monkeypatch):
    import fisherhub.hub.signature_index.store as signature_index  # where load_index reads its bound

    build_index(BASE, INDEX, work=tmp_path / "work")
    state = json.loads(hub.files("tester/base-index", "dataset")[STATE_PATH])
    set_files(hub, "tester/base-index", "dataset", {STATE_PATH: json.dumps({**state, "repos": [1, 2]}).encode()})
    with pytest.raises(InputError, match=rf"{STATE_PATH} repo entry 0 is not a mapping with a repo_id"):
        signature_index.load_index(INDEX)
    monkeypatch.setattr(signature_index, "MAX_STATE_BYTES", 100)
    hub.requests.clear()
    with pytest.raises(InputError, match=rf"{STATE_PATH} is \d+ bytes, larger than the 100 such a file may have"):
        signature_index.load_index(INDEX)
    assert not [path for _, path, _ in hub.requests if path.endswith(STATE_PATH)]  # refused before the download


# -- item 4: every other JSON and YAML a repo or folder hands us -----------------------------------------------------
def adapter_folder(tmp_path, name: str, signature, **files: str):
    folder = tmp_path / name
    (folder / ".fisher_signatures").mkdir(parents=True)
    signature.save(folder / ".fisher_signatures" / "training-data.safetensors")
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": BASE}))
    for path, text in files.items():
        (folder / path.replace("__", "/")).write_text(text)
    return folder


def alias_bomb(levels: int) -> str:
    """A card whose YAML header of some 300 bytes expands to 10 ** (levels + 1) values."""
    lines = [f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcdefgh", "bcdefghi")][:levels]
    return "---\nbase_model: org/base\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(lines) + "---\n# card\n"


@pytest.mark.parametrize(
    "files, reason",
    [
        ({"adapter_config.json": DEEP.decode()}, f"adapter_config.json is {NESTED}"),
        ({"adapter_config.json": json.dumps({"r": 8, "pad": "x" * 2**20})}, "adapter_config.json is 1,048,5"),
        ({"README.md": "---\n" + "a: " * 3000 + "1\n---\n"}, "README.md has a malformed YAML header"),
        ({"README.md": "---\ndatasets: " + "[" * 5000 + "]" * 5000 + "\n---\n"}, f"the header is {NESTED}"),
        ({"README.md": alias_bomb(8)}, "its YAML has more than"),
        ({"README.md": "---\na: &a [*a]\n---\n"}, "its YAML refers to itself"),
    ],
    ids=[
        "config-deep",
        "config-large",
        "card-deep-block",
        "card-deep-flow",
        "card-alias-bomb",
        "card-cycle",
    ],
)
def test_a_hostile_file_in_an_adapter_folder_skips_it_naming_the_file(tmp_path, files, reason):
    target = make_signature(BASE, "org/target", seed=4)
    honest = adapter_folder(tmp_path, "honest", make_signature(BASE, "org/a", seed=1))
    hostile = adapter_folder(tmp_path, "hostile", make_signature(BASE, "org/b", seed=2), **files)
    selection = select_adapter(target, [str(honest), str(hostile)])
    assert [row.candidate for row in selection.ranking] == [str(honest)]
    reasons = {s.candidate: s.reason for s in selection.skipped}
    assert reason in reasons[str(hostile)], reasons


def test_a_hostile_card_or_index_on_the_hub_is_a_clear_error(hub, hf_api, hf_hub_cache):
    from fisherhub.hub import load_signature, push_signature

    hf_api.create_repo("org/bomb", repo_type="dataset")
    push_signature(make_signature(BASE, "org/d", seed=1), "datasets/org/bomb")
    index = f"{SIGNATURE_FOLDER}/index.json"
    set_files(hub, "org/bomb", "dataset", {index: DEEP})
    with pytest.raises(CardError, match=rf"datasets/org/bomb@[0-9a-f]{{40}}: {index} is {NESTED}"):
        load_signature("datasets/org/bomb")
    repo = hub.repo("org/bomb", "dataset")
    head = repo.refs["refs/heads/main"]
    files = {**repo.commits[head].files, "README.md": alias_bomb(4).encode()}  # 10^5 values: the server lists them
    del files[index]
    repo.refs["refs/heads/main"] = repo.add_commit(head, files, "a card whose aliases expand")
    with pytest.raises(CardError, match=r"README\.md has a malformed YAML header \(the header: its YAML has more than"):
        load_signature("datasets/org/bomb")


def test_an_index_file_nested_too_deep_in_a_folder_is_a_clear_error(tmp_path):
    from fisherhub.hub import list_signatures

    folder = adapter_folder(tmp_path, "hostile", make_signature(BASE, "org/b", seed=2))
    (folder / SIGNATURE_FOLDER / "index.json").write_text(DEEPISH)
    with pytest.raises(
        CardError, match=rf"hostile: {SIGNATURE_FOLDER}/index\.json is {NESTED}; push a signature again"
    ):
        list_signatures(folder)


def test_a_row_whose_metadata_or_spec_is_nested_too_deep_is_skipped():
    good = make_signature(BASE, "org/a", seed=1)
    ref = SignatureRef("org/a", "model", "a" * 40, f"{SIGNATURE_FOLDER}/a.safetensors")
    row = signature_row(good, ref, "published", Layout())
    import pyarrow as pa

    from fisherhub.hub.signature_index import row_schema

    rows = [
        row,
        {**row, "metadata": DEEPISH},
        {**row, "spec": DEEPISH, "sketch_id": "x"},
        {**row, "metadata": "[1]"},
    ]
    read = read_rows(pa.Table.from_pylist(rows, schema=row_schema()), BASE, "test")
    assert len(read) == 1
    reasons = [s.reason for s in read.skipped]
    assert reasons[0] == f"index row: its metadata is {NESTED}"
    assert reasons[1] == f"index row: malformed spec (its spec is {NESTED})"
    assert reasons[2] == "index row: its metadata is a JSON list, not an object"


def test_a_signature_whose_spec_is_nested_too_deep_is_refused():
    from test_signature_fuzz import forged

    from fisherhub import Signature

    with pytest.raises(SignatureFileError, match=f"<bytes>: its spec is {NESTED}"):
        Signature.from_bytes(forged(make_signature(BASE, "org/a", seed=1), spec=DEEP.decode()))


def test_a_signature_header_nested_too_deep_on_the_hub_is_a_problem_of_that_file(adapters, hub, tmp_path):
    """The client parses a Hub file's safetensors header with ``json``, unbounded: the file is refused, the rest
    of the repo listed and the build goes on."""
    import struct

    from fisherhub.hub import list_signatures

    header = b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}"
    set_files(
        hub, adapters[0], "model", {f"{SIGNATURE_FOLDER}/evil.safetensors": struct.pack("<Q", len(header)) + header}
    )
    problems = {info.path: info.problem for info in list_signatures(adapters[0])}
    assert problems[f"{SIGNATURE_FOLDER}/evil.safetensors"] == (
        "not a readable safetensors file (its header is not a JSON mapping a safetensors reader accepts)"
    )
    assert list(problems.values()).count(None) == 1
    assert build_index(BASE, INDEX, work=tmp_path / "work")[1].problems == 1


# -- item 5: a regular file as the work folder -----------------------------------------------------------------
def test_a_file_as_the_work_folder_is_a_clear_error_and_is_kept(adapters, hub, tmp_path, capsys):
    work = tmp_path / "notes.txt"
    work.write_text("my notes\n")
    message = f"the work folder {work} cannot be made: {work} is a file, not a folder (it is left as it is)"
    with pytest.raises(InputError, match=re.escape(message)):
        build_index(BASE, INDEX, work=work)
    code, _, err = run(["index", "build", BASE, "--push", INDEX, "--work", str(work)], capsys)
    assert code == 1 and f"error: {message}" in err and "NotADirectoryError" not in err
    code, _, err = run(["index", "build", BASE, "--push", INDEX, "--work", str(work / "below")], capsys)
    assert code == 1 and f"{work} is a file, not a folder" in err
    assert work.read_text() == "my notes\n"
    assert ("dataset", "tester/base-index") not in hub.repos  # nothing was pushed
