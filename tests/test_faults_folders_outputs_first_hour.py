"""The second fault battery (issue 25): local folders, outputs, resume, comparisons, the Python API and the first
hour of a new user. Each test asserts the exact outcome: a refusal with its message, or the result kept whole."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
from test_faults import write_jsonl

from fisherhub import Signature, alignment
from fisherhub.cli import main
from fisherhub.core.errors import IncompatibleSignaturesError, InputError
from fisherhub.hub.refs import SIGNATURE_FOLDER
from fisherhub.pipeline.loop import sketch_texts
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

TEXTS = [f"doc {i}: " + ("the quick brown fox " if i % 3 else "lazy dogs sleep ") * (1 + i % 4) for i in range(40)]
M = 64


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """``model/`` (a tiny Qwen2 and its tokenizer, loaded by path as a user's folder is) and ``docs.jsonl``."""
    folder = tmp_path_factory.mktemp("battery2")
    tiny_causal_lm("qwen2", tie_word_embeddings=False, vocab_size=64).save_pretrained(folder / "model")
    tiny_tokenizer(64).save_pretrained(folder / "model")
    write_jsonl(folder / "docs.jsonl", TEXTS)
    return folder


def loaded(tiny: Path):
    """The model and tokenizer of ``tiny/model``, loaded from the folder as a user's are."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny / "model"), AutoTokenizer.from_pretrained(tiny / "model")


@pytest.fixture(scope="module")
def signature(tiny) -> Signature:
    return sketch_texts(TEXTS, *loaded(tiny), m=M, metadata={"base_model": "tester/tiny"})


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def sketch_argv(tiny: Path, output: Path | str, *extra: str, model: Path | str | None = None) -> list[str]:
    return [
        "sketch",
        "--dataset",
        str(tiny / "docs.jsonl"),
        "--model",
        str(model or tiny / "model"),
        "-m",
        str(M),
        "--no-progress",
        "--cpu",
        "--batch-size",
        "8",
        "-o",
        str(output),
        *extra,
    ]


@contextlib.contextmanager
def read_only(folder: Path):
    """``folder`` made unwritable, for root too (the immutable flag; root ignores permission bits)."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(folder)], check=True)
    else:
        folder.chmod(0o555)
    try:
        yield folder
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o755)


def stray_temporaries(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.rglob("*") if path.name.endswith(".tmp"))


# -- local folders ----------------------------------------------------------------------------------------
def test_two_pushers_into_one_folder_keep_every_index_entry(tiny, tmp_path, monkeypatch):
    """Each pusher reads the index and writes it back; without a lock both read it before either writes, and the
    index forgets one signature (here the reads are slowed down so that they always overlap)."""
    from fisherhub.hub import push as push_module
    from fisherhub.hub.listing import INDEX_PATH, parse_index

    read = push_module.folder_entries

    def slow_read(folder):
        entries = read(folder)
        time.sleep(0.5)
        return entries

    monkeypatch.setattr(push_module, "folder_entries", slow_read)
    signatures = [  # of other documents each (a push replaces a signature of the same data under another name)
        sketch_texts(TEXTS[k:], *loaded(tiny), m=M, metadata={"base_model": "tester/tiny", "dataset": f"org/data-{k}"})
        for k in range(2)
    ]
    errors = []

    def push(k):
        try:
            push_module.push_signature(signatures[k], tmp_path)
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=push, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    entries = parse_index((tmp_path / INDEX_PATH).read_bytes(), str(tmp_path))
    assert sorted(entry["dataset"] for entry in entries) == ["org/data-0", "org/data-1"]
    assert len(list((tmp_path / SIGNATURE_FOLDER).glob("*.safetensors"))) == 2


def test_push_refuses_a_symlinked_signature_folder_and_writes_nothing_outside(signature, tmp_path, capsys):
    outside, folder = tmp_path / "outside", tmp_path / "folder"
    outside.mkdir()
    folder.mkdir()
    (outside / "index.json").write_text('{"not": "ours"}')
    (folder / SIGNATURE_FOLDER).symlink_to(outside)
    signature_file = tmp_path / "sig.safetensors"
    signature.save(signature_file)
    code, _, error = run_cli(["push", str(signature_file), str(folder)], capsys)
    assert code == 1
    assert (
        f"error: {folder / SIGNATURE_FOLDER} is a symbolic link (to {outside}): push writes only inside {folder}"
        in error
    )
    assert sorted(path.name for path in outside.iterdir()) == ["index.json"]
    assert (outside / "index.json").read_text() == '{"not": "ours"}' and not (folder / "README.md").exists()


def test_push_names_a_file_in_the_way_of_the_signature_folder(signature, tmp_path):
    from fisherhub.hub import push_signature

    (tmp_path / SIGNATURE_FOLDER).write_text("a file")
    with pytest.raises(
        InputError, match=re.escape(f"{tmp_path / SIGNATURE_FOLDER} is a file, not a folder: move it away")
    ):
        push_signature(signature, tmp_path)


def test_push_into_a_read_only_folder_is_one_clear_error(signature, tmp_path, capsys):
    folder = tmp_path / "adapter"
    folder.mkdir()
    signature_file = tmp_path / "sig.safetensors"
    signature.save(signature_file)
    with read_only(folder):
        code, _, error = run_cli(["push", str(signature_file), str(folder)], capsys)
    assert code == 1
    assert re.search(
        rf"error: cannot write {re.escape(str(folder))}\S* \(.+\): make it writable, or push into another "
        "folder",
        error,
    ), error
    assert list(folder.iterdir()) == []


# -- outputs: checked before the model loads, one policy, one line when the disk is full -------------------
def test_sketch_to_a_folder_is_refused_before_the_model_loads(tiny, tmp_path, capsys):
    """The model path does not exist: an output check after the model load would report the model instead."""
    code, _, error = run_cli(sketch_argv(tiny, tmp_path, model=tmp_path / "no-model"), capsys)
    assert code == 1
    assert (
        f"error: --output {tmp_path} is a folder: give the path of a file in it, e.g. {tmp_path / 'signature.safetensors'}"
        in error
    )
    assert stray_temporaries(tmp_path) == []


def test_sketch_into_a_read_only_folder_is_refused_before_the_model_loads(tiny, tmp_path, capsys):
    folder = tmp_path / "out"
    folder.mkdir()
    with read_only(folder):
        code, _, error = run_cli(sketch_argv(tiny, folder / "sig.safetensors", model=tmp_path / "no-model"), capsys)
    assert code == 1
    assert f"error: --output {folder / 'sig.safetensors'}: cannot write into {folder} (permission denied)" in error


def test_sketch_keeps_an_existing_output_unless_overwrite(tiny, tmp_path, capsys):
    output = tmp_path / "sig.safetensors"
    output.write_bytes(b"an earlier signature")
    code, _, error = run_cli(sketch_argv(tiny, output, model=tmp_path / "no-model"), capsys)
    assert code == 1 and output.read_bytes() == b"an earlier signature"
    assert f"error: --output {output} exists: pass --overwrite to replace it, or give another path" in error
    code, _, error = run_cli([*sketch_argv(tiny, output), "--overwrite"], capsys)
    assert code == 0, error
    assert Signature.load(output).num_documents == len(TEXTS)


def test_a_full_disk_at_the_end_is_one_line_keeps_the_old_output_and_the_checkpoint(
    tiny, tmp_path, capsys, monkeypatch
):
    output, checkpoint = tmp_path / "sig.safetensors", tmp_path / "checkpoint"
    output.write_bytes(b"the previous output")
    replace = os.replace

    def full_disk(source, destination, *args, **kwargs):
        if os.fspath(destination) == str(output):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return replace(source, destination, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full_disk)
    code, _, error = run_cli([*sketch_argv(tiny, output, "--checkpoint", str(checkpoint)), "--overwrite"], capsys)
    assert code == 1
    assert (
        f"error: the signature was sketched but not written (cannot write {output} (No space left on device)); the "
        f"checkpoint in {checkpoint} is kept: free some space, then rerun with --resume to write it"
    ) in error
    assert output.read_bytes() == b"the previous output" and stray_temporaries(tmp_path) == []
    assert (checkpoint / "rank0-of1.json").is_file()
    monkeypatch.undo()
    code, _, error = run_cli(
        [*sketch_argv(tiny, output, "--checkpoint", str(checkpoint), "--resume"), "--overwrite"], capsys
    )
    assert code == 0, error
    assert Signature.load(output).num_documents == len(TEXTS)


def test_compare_prints_its_tables_and_keeps_an_existing_png(signature, tmp_path, capsys):
    first, second = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    signature.save(first)
    dataclasses.replace(signature, metadata={**signature.metadata, "dataset": "other"}).save(second)
    heatmap = tmp_path / "alignment.png"
    heatmap.write_bytes(b"an earlier figure")
    code, out, error = run_cli(["compare", str(first), str(second), "--heatmap", str(heatmap)], capsys)
    assert code == 1 and heatmap.read_bytes() == b"an earlier figure"
    assert "Fisher alignment A" in out and "Decomposition" in out
    assert (
        f"error: --heatmap {heatmap} exists: pass --overwrite to replace it, or give another path (nothing was written there)"
        in error
    )


def test_every_output_writing_help_states_the_one_policy(capsys):
    for command in ("sketch", "demo", "compare"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--overwrite" in capsys.readouterr().out, command
    with pytest.raises(SystemExit):
        main(["--help"])
    printed = " ".join(capsys.readouterr().out.split())
    assert "An output file that exists is never replaced unless the command is given --overwrite" in printed


def test_demo_keeps_an_earlier_demo_unless_overwrite(tmp_path, capsys):
    output = tmp_path / "demo"
    output.mkdir()
    (output / "dna.safetensors").write_bytes(b"an earlier demo")
    code, _, error = run_cli(
        ["demo", "--model", str(tmp_path / "no-model"), "--domains", "dna", "--output-dir", str(output)], capsys
    )
    assert code == 1 and (output / "dna.safetensors").read_bytes() == b"an earlier demo"
    assert f"error: --output-dir {output / 'dna.safetensors'} exists: pass --overwrite" in error


# -- resume ---------------------------------------------------------------------------------------------
def test_resume_from_a_mistyped_checkpoint_folder_is_refused(tiny, tmp_path, capsys):
    from fisherhub.options import DataArgs, SketchArgs
    from fisherhub.pipeline.loop import sketch

    typo = tmp_path / "chekpoint"
    code, _, error = run_cli(
        sketch_argv(
            tiny, tmp_path / "sig.safetensors", "--checkpoint", str(typo), "--resume", model=tmp_path / "no-model"
        ),
        capsys,
    )
    assert code == 1
    assert (
        f"error: --resume: {typo} holds no checkpoint (no such folder, from {os.getcwd()}): check the --checkpoint "
        "path, or drop --resume to start from the first document"
    ) in error
    typo.mkdir()
    args = SketchArgs(
        data=DataArgs(str(tiny / "docs.jsonl")),
        model=str(tiny / "model"),
        m=M,
        checkpoint=str(typo),
        resume=True,
        progress=False,
        cpu=True,
    )
    with pytest.raises(InputError, match=r"holds no checkpoint \(no rank\*-of\*\.json checkpoint record in it"):
        sketch(args)


# -- a FIFO among the signature files --------------------------------------------------------------------
def test_a_fifo_named_safetensors_does_not_hang_selection(signature, tmp_path):
    from fisherhub.selection import select_adapter

    adapter = tmp_path / "adapter"
    (adapter / SIGNATURE_FOLDER).mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": signature.metadata["base_model"]})
    )
    signature.save(adapter / SIGNATURE_FOLDER / "good.safetensors")
    fifo = adapter / SIGNATURE_FOLDER / "blocked.safetensors"
    os.mkfifo(fifo)
    result = {}
    thread = threading.Thread(target=lambda: result.update(selection=select_adapter(signature, [adapter])), daemon=True)
    thread.start()
    thread.join(timeout=120)
    hung = thread.is_alive()
    if hung:  # release the reader, so that the test ends
        with open(fifo, "wb"):
            pass
        thread.join(timeout=60)
    assert not hung, "select_adapter blocked reading a FIFO"
    [row] = result["selection"].ranking
    assert row.signature_source == str(adapter / SIGNATURE_FOLDER / "good.safetensors")


# -- comparisons and the Python API ----------------------------------------------------------------------
def test_different_hidden_sizes_name_the_fields_that_differ(tmp_path, capsys):
    import evaluate

    from fisherhub.metric import metric_path

    tokenizer = tiny_tokenizer(64)
    narrow, wide = (
        sketch_texts(TEXTS, tiny_causal_lm("qwen2", tie_word_embeddings=False, hidden_size=size), tokenizer, m=M)
        for size in (32, 64)
    )
    with pytest.raises(IncompatibleSignaturesError, match=r"differing fields: .*d: 32 vs 64"):
        alignment(narrow, wide)
    narrow.save(tmp_path / "narrow.safetensors")
    wide.save(tmp_path / "wide.safetensors")
    refs = [str(tmp_path / "narrow.safetensors"), str(tmp_path / "wide.safetensors")]
    code, _, error = run_cli(["compare", *refs, "--heatmap", ""], capsys)
    assert code == 1 and re.search(
        r"error: cannot compare signatures with different sketch ids; differing fields: .*d: 32 vs 64", error
    )
    metric = evaluate.load(metric_path(), keep_in_memory=True)
    with pytest.raises(IncompatibleSignaturesError, match=r"d: 32 vs 64"):
        metric.compute(predictions=refs[:1], references=refs[1:])


def test_a_signature_of_sketch_texts_records_its_base_model_and_pushes(tiny, tmp_path, capsys):
    signature = sketch_texts(TEXTS, *loaded(tiny), m=M)  # as the README's snippet does: no metadata
    signature_file = tmp_path / "texts.safetensors"
    signature.save(signature_file)
    folder = tmp_path / "dataset-folder"
    folder.mkdir()
    code, _, error = run_cli(["push", str(signature_file), str(folder)], capsys)
    assert code == 0, error
    assert signature.metadata["base_model"] == str(tiny / "model")
    from fisherhub.hub.listing import INDEX_PATH, parse_index

    [entry] = parse_index((folder / INDEX_PATH).read_bytes(), str(folder))
    assert entry["base_model"] == "model"  # the folder's name: no local path is published


def test_a_signature_without_a_known_base_model_is_refused_by_push_not_a_key_error(tmp_path, hub, capsys):
    from huggingface_hub import HfApi

    unknown = sketch_texts(TEXTS, tiny_causal_lm("qwen2", tie_word_embeddings=False), tiny_tokenizer(64), m=M)
    assert "base_model" not in unknown.metadata  # a model built from a config: nothing names it
    signature_file = tmp_path / "unknown.safetensors"
    unknown.save(signature_file)
    HfApi().create_repo("tester/adapter")
    HfApi().upload_file(path_or_fileobj=b"{}", path_in_repo="adapter_config.json", repo_id="tester/adapter")
    adapter_folder = tmp_path / "adapter"
    adapter_folder.mkdir()
    (adapter_folder / "adapter_config.json").write_text("{}")
    for repo in ("tester/adapter", str(adapter_folder)):
        code, _, error = run_cli(["push", str(signature_file), repo], capsys)
        assert code == 1 and "error: the signature has no base_model in its metadata" in error, error


def test_few_documents_warn_with_how_many_are_needed_and_a_bare_string_is_refused(tiny, tmp_path, capsys):
    model, tokenizer = tiny_causal_lm("qwen2", tie_word_embeddings=False), tiny_tokenizer(64)
    with pytest.raises(
        InputError,
        match=r"got one string of 23 characters, which would be sketched as that many "
        r"one-character documents: pass \[text\]",
    ):
        sketch_texts("a single text, not many", model, tokenizer, m=M)
    data = write_jsonl(tmp_path / "few.jsonl", TEXTS[:6])
    code, _, error = run_cli(
        [
            "sketch",
            "--dataset",
            str(data),
            "--model",
            str(tiny / "model"),
            "-m",
            str(M),
            "--no-progress",
            "--cpu",
            "-o",
            str(tmp_path / "few.safetensors"),
        ],
        capsys,
    )
    assert code == 0
    [line] = [line for line in error.splitlines() if "documents" in line]
    assert line.startswith("warning: this signature has 6 documents") and "sketch at least 20 documents" in line
    from fisherhub.core.errors import TooFewDocumentsWarning

    with pytest.warns(
        TooFewDocumentsWarning, match=r"has 6 documents \(\d+ scored tokens\): below 20 .*sketch at least 20 documents"
    ):
        sketch_texts(TEXTS[:6], model, tokenizer, m=M)


def test_metric_refuses_an_entry_that_is_neither_a_reference_nor_texts():
    import evaluate

    from fisherhub.metric import metric_path

    metric = evaluate.load(metric_path(), keep_in_memory=True)
    with pytest.raises(
        InputError,
        match=r"`predictions`\[0\] is NoneType None: each entry is a signature reference "
        r"\(a string\) or a list of texts",
    ):
        metric.compute(predictions=[None], references=["x.safetensors"])


# -- the first hour ------------------------------------------------------------------------------------
def test_version_mistyped_flags_help_and_help_markup(capsys):
    from fisherhub.core.version import library_version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"fisherhub {library_version()}\n"
    with pytest.raises(SystemExit) as exit_:
        main(["sketch", "--datset", "d.jsonl"])  # argparse would first say that --dataset is missing
    assert exit_.value.code == 2
    assert (
        "fisherhub sketch: error: unrecognized argument --datset (did you mean --dataset?)" in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        main(["compare", "a", "b", "--heatmpa", "x.png"])
    assert "unrecognized argument --heatmpa (did you mean --heatmap?)" in capsys.readouterr().err
    for command in ("sketch", "demo", "compare", "select", "install-metric"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "``" not in capsys.readouterr().out, command


def test_help_of_the_package_is_one_page_with_an_example():
    import pydoc

    import fisherhub

    page = pydoc.render_doc(fisherhub, renderer=pydoc.plaintext)
    assert len(page.splitlines()) < 80
    assert "fh.sketch_texts(" in page and "fh.alignment(" in page
    assert "fisherhub.__all__" in page


def test_a_mistyped_hub_model_id_fails_at_the_first_request(hub, tmp_path):
    from fisherhub.lm.loading import load_model_and_tokenizer

    hub.requests.clear()
    with pytest.raises(
        InputError,
        match=r"model 'tester/no-such-model': no such folder .*the Hub has no model repo of "
        r"that id",
    ):
        load_model_and_tokenizer("tester/no-such-model")
    assert len(hub.requests) == 1, hub.requests


def test_a_model_id_that_is_no_model_is_named_at_the_first_request(hub, hf_api):
    """Issue 32: ``--model gpt3`` with the local Hub up said "couldn't connect" to a reachable server. An id without
    a namespace the Hub lacks, an adapter repo and a repo without ``config.json``: each said at once, one request."""
    from fisherhub.lm.loading import load_model_and_tokenizer
    from fisherhub.testing.hub_repos import create_adapter

    create_adapter(hf_api, "tester/lora", "tester/base")
    hf_api.create_repo("tester/not-a-model")
    for name, said in (
        ("gpt3", r"model 'gpt3': no such folder .*the Hub has no model repo of that id \(http://127\.0\.0\.1:\d+\)"),
        ("tester/lora", r"model 'tester/lora' is a PEFT adapter of tester/base, not a model: .*--model tester/base"),
        (
            "tester/not-a-model",
            r"model 'tester/not-a-model': the Hub repo has no config.json, so it is no transformers",
        ),
    ):
        hub.requests.clear()
        with pytest.raises(InputError, match=said):
            load_model_and_tokenizer(name)
        assert len(hub.requests) == 1, (name, hub.requests)


def _unreachable(monkeypatch) -> str:
    """The Hub's endpoint moved to a loopback port nothing listens on (connection refused); returns it."""
    import socket

    from huggingface_hub import constants

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{free.getsockname()[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", dead)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", dead + "/{repo_id}/resolve/{revision}/{filename}")
    return dead


def test_an_unreachable_hub_is_said_at_once_or_the_cached_model_loads(
    hub, hf_api, tiny, hf_hub_cache, monkeypatch, caplog
):
    """Issue 32: with no network a model id took ~50 s of printed retries (5 per file, backoff to 8 s) before the
    error. Now one failed request says the Hub cannot be reached, or loads the copy the cache holds, without a
    retry (the bound is loose: 20 s against the ~50 s of retries)."""
    from fisherhub.lm.loading import load_model_and_tokenizer

    hf_api.create_repo("tester/tiny")
    hf_api.upload_folder(repo_id="tester/tiny", folder_path=str(tiny / "model"))
    load_model_and_tokenizer("tester/tiny")  # online: now in the cache
    dead = _unreachable(monkeypatch)
    caplog.set_level("INFO")
    start = time.perf_counter()
    with pytest.raises(
        InputError,
        match=rf"model 'tester/never-fetched': the Hub \({re.escape(dead)}\) cannot be reached .* holds no copy",
    ):
        load_model_and_tokenizer("tester/never-fetched")
    model, _ = load_model_and_tokenizer("tester/tiny")
    elapsed = time.perf_counter() - start
    assert model.config.vocab_size == 64 and elapsed < 20, elapsed
    messages = [record.getMessage() for record in caplog.records]
    assert not [m for m in messages if "Retrying" in m], messages
    assert [m for m in messages if m.startswith(f"the Hub ({dead}) cannot be reached") and "from the local cache" in m]


def test_compare_says_same_data_for_two_sketches_of_the_same_documents(signature, tmp_path, capsys):
    """Another summation order (N processes) changes the float32 means in their last bits: the same data."""
    rounded = dataclasses.replace(signature, joint=signature.joint * (1 + 1e-7), metadata=dict(signature.metadata))
    assert not torch.equal(rounded.joint, signature.joint)
    signature.save(tmp_path / "one.safetensors")
    rounded.save(tmp_path / "two.safetensors")
    code, out, _ = run_cli(
        ["compare", str(tmp_path / "one.safetensors"), str(tmp_path / "two.safetensors"), "--heatmap", ""], capsys
    )
    assert code == 0 and "same data" in out
    assert "note: one and two are sketches of the same data (equal up to float rounding" in " ".join(out.split())
    result = alignment(signature, rounded)
    assert (result.fisher, result.stderr) == (1.0, 0.0)
    from fisherhub.core.alignment import SAME_DATA_TOLERANCE, same_data

    assert same_data(signature, rounded)
    assert not same_data(
        signature, dataclasses.replace(signature, joint=signature.joint * (1 + 10 * SAME_DATA_TOLERANCE))
    )


def test_ctrl_c_before_the_first_checkpoint_says_to_start_again_not_to_resume(tiny, tmp_path, monkeypatch, capsys):
    """``--resume`` now needs a checkpoint, so the interrupted run's advice must not be a command that is refused."""
    from test_interrupts_and_outputs import interrupt_after

    checkpoint = tmp_path / "checkpoint"
    interrupt_after(monkeypatch, batches=1)
    code, _, error = run_cli(sketch_argv(tiny, tmp_path / "sig.safetensors", "--checkpoint", str(checkpoint)), capsys)
    assert code == 130
    [line] = [line for line in error.splitlines() if line.startswith("interrupted: ")]
    assert line.startswith(
        f"interrupted: no checkpoint was written to {checkpoint} yet (one every --checkpoint-every "
        "batches); start again with: fisherhub sketch "
    )
    assert "--resume" not in line
