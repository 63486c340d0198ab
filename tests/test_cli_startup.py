"""What a new user meets first: help without torch, a help text and default for every option, cheap checks
before the model loads, and a head resolved once per model."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys

import pytest
import torch
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

import fisherhub
from fisherhub.cli import build_parser, main
from fisherhub.lm import head as head_module
from fisherhub.lm import loading


def test_help_and_argument_errors_import_neither_torch_nor_transformers_nor_gradio():
    script = (
        "import sys\nfrom fisherhub.cli import main\n"
        "for argv in (['--help'], ['sketch', '--help'], ['sketch', '--dataset', 'x.jsonl', '-m', 'many'],\n"
        "             ['sketch', '--dataset', 'no/such/file.jsonl'], ['index', 'space', '--help'], ['metric-space', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "print('HEAVY', sorted(m for m in ('torch', 'transformers', 'datasets', 'huggingface_hub', 'gradio') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
    assert "--max-documents" in result.stdout and "invalid int value: 'many'" in result.stderr
    assert "--dataset 'no/such/file.jsonl': no such data file" in result.stderr


def _subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (subparsers,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(subparsers.choices)


@pytest.mark.parametrize("command", sorted(_subcommand_parsers()))
def test_every_option_has_a_help_text(command):
    parser = _subcommand_parsers()[command]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help and action.help.strip(), f"{command} {action.option_strings or action.dest} has no help"
        assert "``" not in action.help, f"{command} {action.option_strings}: raw markup in help"
    text = parser.format_help()
    if command == "sketch":
        for shown in ("(default: train)", "(default: 4096)", "(default: 8)", "(default: text)", "(default: 512)"):
            assert shown in text, shown


def test_sketch_option_errors_name_the_flag(tmp_path, capsys):
    data = tmp_path / "docs.jsonl"
    data.write_text(json.dumps({"text": "hello there"}) + "\n")
    assert main(["sketch", "--dataset", str(data), "--max-documents", "0"]) == 1
    assert "--max-documents must be a positive integer" in capsys.readouterr().err


def test_a_missing_data_file_is_reported_before_the_model_loads(tmp_path, monkeypatch, capsys):
    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the data was checked")

    monkeypatch.setattr(loading, "load_model_and_tokenizer", no_model)
    assert main(["sketch", "--dataset", str(tmp_path / "missing.jsonl"), "--no-progress"]) == 1
    assert "missing.jsonl" in capsys.readouterr().err
    data = tmp_path / "docs.jsonl"
    data.write_text(json.dumps({"body": "hello there"}) + "\n")
    assert main(["sketch", "--dataset", str(data), "--no-progress"]) == 1
    assert "text column 'text' not found" in capsys.readouterr().err


def test_the_head_is_resolved_once_per_model_and_again_after_its_weights_change(monkeypatch):
    calls = []
    checksum = head_module.tensor_checksum
    monkeypatch.setattr(head_module, "tensor_checksum", lambda *a: calls.append(1) or checksum(*a))
    model, tokenizer = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)
    texts = [f"document number {i} says hello" for i in range(6)]
    first = fisherhub.sketch_texts(texts, model, tokenizer, m=64)
    second = fisherhub.sketch_texts(texts, model, tokenizer, m=64)
    assert len(calls) == 1 and first.sketch_id == second.sketch_id
    with torch.no_grad():
        model.get_output_embeddings().weight[0, 0] += 1.0
    assert fisherhub.HeadModel.of(model).head_checksum != first.spec.model_fingerprint.head_checksum
    assert len(calls) == 2


def test_the_resume_command_of_a_network_sketch_repeats_its_modules_and_adapters(tmp_path):
    from fisherhub.cli.commands.sketch import _how_to_resume, sketch_args

    checkpoint = tmp_path / "c"
    checkpoint.mkdir()
    (checkpoint / "rank0-of1.json").write_text("{}")  # a checkpoint was written: the command resumes from it
    namespace = build_parser().parse_args(
        [
            "sketch",
            "--dataset",
            "d",
            "--adapter",
            "a",
            "--adapter",
            "b",
            "--kernel",
            "block",
            "--checkpoint",
            str(checkpoint),
        ]
    )
    assert sketch_args(namespace).adapters == ["a", "b"]
    words = shlex.split(_how_to_resume(namespace).split(" with: ")[1])
    assert words[words.index("--adapter") :][:4] == ["--adapter", "a", "--adapter", "b"]
    assert "--kernel" in words and words[-1] == "--resume"
    again = sketch_args(build_parser().parse_args(words[1:]))
    assert (again.adapters, again.kernel, again.checkpoint) == (["a", "b"], "block", str(checkpoint))
    modules = sketch_args(build_parser().parse_args(["sketch", "--dataset", "d", "--modules", "q_proj, v_proj"]))
    assert modules.modules == ["q_proj", "v_proj"] and modules.is_network
