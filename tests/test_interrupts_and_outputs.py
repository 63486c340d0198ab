"""Interrupts and leftovers: Ctrl-C during ``fisherhub sketch`` prints the command that resumes (no traceback),
a complete run removes its checkpoint files, ``compare`` does not overwrite its outputs unasked, the demo says
where its output goes (and .gitignore ignores it)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch
from fisherhub.testing.tiny_models import saved_tiny_model

from fisherhub import Signature
from fisherhub.pipeline import loop as pipeline_sketch
from fisherhub.cli import main

REPO = Path(__file__).resolve().parents[1]
TEXTS = [f"document {i}: the quick brown fox jumps over {i % 7} lazy dogs." for i in range(24)]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return saved_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama", tie_word_embeddings=False, vocab_size=96)


@pytest.fixture
def sketch_command(model_folder, tmp_path):
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": text}) + "\n" for text in TEXTS))
    return [
        "sketch",
        "--dataset",
        str(data),
        "--model",
        str(model_folder),
        "-m",
        "256",
        "--batch-size",
        "1",
        "--no-progress",
        "--cpu",
    ]


def interrupt_after(monkeypatch, batches: int) -> None:
    """Ctrl-C (KeyboardInterrupt) in the middle of the sketching loop, after ``batches`` batches."""
    original, calls = pipeline_sketch.sketch_batch, []

    def sketch_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) > batches:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(pipeline_sketch, "sketch_batch", sketch_batch)


def test_ctrl_c_prints_the_resume_command_which_resumes(sketch_command, tmp_path, monkeypatch, capsys):
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "resumed.safetensors"
    command = [*sketch_command, "--checkpoint", str(checkpoint), "--checkpoint-every", "2", "-o", str(output)]
    interrupt_after(monkeypatch, batches=7)
    assert main(command) == 130
    printed = capsys.readouterr().err
    lines = [line for line in printed.splitlines() if line.startswith("interrupted: ")]
    assert len(lines) == 1 and "Traceback" not in printed and not output.exists()
    assert json.loads((checkpoint / "rank0-of1.json").read_text())["batches"] == 6
    prefix, resume = lines[0].split(" with: ")
    assert str(checkpoint) in prefix
    words = shlex.split(resume)
    assert words[:2] == ["fisherhub", "sketch"] and words[-1] == "--resume"

    monkeypatch.undo()
    assert main(words[1:]) == 0
    assert not checkpoint.exists()  # a complete run removes its checkpoint
    assert main([*sketch_command, "-o", str(tmp_path / "whole.safetensors")]) == 0
    resumed, whole = Signature.load(output), Signature.load(tmp_path / "whole.safetensors")
    assert resumed.num_documents == whole.num_documents == len(TEXTS)
    torch.testing.assert_close(resumed.joint, whole.joint)


def test_ctrl_c_without_a_checkpoint_says_how_to_make_a_run_resumable(sketch_command, tmp_path, monkeypatch, capsys):
    interrupt_after(monkeypatch, batches=3)
    assert main([*sketch_command, "-o", str(tmp_path / "never.safetensors")]) == 130
    printed = capsys.readouterr().err
    (line,) = [line for line in printed.splitlines() if line.startswith("interrupted: ")]
    assert "no --checkpoint was given" in line and "--checkpoint DIR" in line and "Traceback" not in printed


def test_complete_runs_remove_their_checkpoint_files_only(sketch_command, tmp_path):
    shared, kept = tmp_path / "shared", tmp_path / "kept"
    shared.mkdir()
    (shared / "notes.txt").write_text("the user's file")
    common = [*sketch_command, "--checkpoint-every", "3"]
    assert main([*common, "--checkpoint", str(shared), "-o", str(tmp_path / "a.safetensors")]) == 0
    assert sorted(path.name for path in shared.iterdir()) == ["notes.txt"]
    assert main([*common, "--checkpoint", str(kept), "--keep-checkpoint", "-o", str(tmp_path / "b.safetensors")]) == 0
    assert (kept / "rank0-of1.json").is_file()


def test_compare_does_not_overwrite_unless_asked(tmp_path, capsys, sketch_command):
    refs = []
    for name, texts in (("one", TEXTS[:12]), ("two", TEXTS[12:])):
        signature = tmp_path / f"{name}.safetensors"
        data = tmp_path / f"{name}.jsonl"
        data.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
        command = [*sketch_command, "-o", str(signature)]
        command[command.index("--dataset") + 1] = str(data)
        assert main(command) == 0
        refs.append(str(signature))
    heatmap = tmp_path / "alignment.png"
    heatmap.write_bytes(b"an earlier figure")
    capsys.readouterr()
    assert main(["compare", *refs, "--heatmap", str(heatmap)]) == 1
    assert "--overwrite" in capsys.readouterr().err and heatmap.read_bytes() == b"an earlier figure"
    assert main(["compare", *refs, "--heatmap", str(heatmap), "--overwrite"]) == 0
    assert heatmap.read_bytes()[:4] == b"\x89PNG"


def test_demo_says_where_its_output_goes_and_git_ignores_it(model_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "demo",
                "--model",
                str(model_folder),
                "--domains",
                "dna",
                "smiles",
                "--max-documents",
                "6",
                "--max-length",
                "32",
                "-m",
                "256",
            ]
        )
        == 0
    )
    printed = " ".join(capsys.readouterr().out.split())
    assert f"output: {tmp_path / 'fisherhub-demo'}/" in printed
    assert (tmp_path / "fisherhub-demo" / "alignment.png").is_file()
    assert "fisherhub-demo/" in (REPO / ".gitignore").read_text().splitlines()
