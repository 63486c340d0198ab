"""Faults a careless or hostile user hits (issue 15): each test asserts the exact outcome, a refusal with
its message or the identical signature after a resume."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_causal_lm, tiny_tokenizer

from fisherhub.core.errors import InputError
from fisherhub.data import DataArgs
from fisherhub.sketcher import SketchArgs, sketch

TEXTS = [f"doc {i}: " + ("the quick brown fox " if i % 3 else "lazy dogs sleep ") * (1 + i % 4) for i in range(40)]


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A folder with a tiny Qwen2 (untied head) and its tokenizer in ``model/``, and ``docs.jsonl``."""
    folder = tmp_path_factory.mktemp("faults")
    model, tokenizer = tiny_causal_lm("qwen2", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    write_jsonl(folder / "docs.jsonl", TEXTS)
    return folder


def run_args(folder: Path, name: str, **overrides) -> SketchArgs:
    options = {
        "data": DataArgs(str(folder / "docs.jsonl")), "model": str(folder / "model"), "m": 64, "batch_size": 4,
        "output": str(folder / f"{name}.safetensors"), "checkpoint": str(folder / f"{name}-checkpoint"),
        "checkpoint_every": 2, "progress": False, "cpu": True,
    }
    return SketchArgs(**{**options, **overrides})


def assert_same_signature(a, b) -> None:
    for name in ("joint", "activation", "error", "split_norms"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert (a.num_tokens, a.num_documents, a.sketch_id) == (b.num_tokens, b.num_documents, b.sketch_id)


# -- 1: resume after the last checkpoint ----------------------------------------------------------------
def test_case1_resume_after_the_final_checkpoint_gives_the_same_signature(tiny):
    """A run killed after its final checkpoint (all 40 documents done) but before the output is written."""
    args = run_args(tiny, "final")
    complete = sketch(args)
    Path(args.output).unlink()  # as if killed between the final checkpoint and writing the output
    record = json.loads((Path(args.checkpoint) / "rank0-of1.json").read_text())
    assert record["next_index"] == len(TEXTS)
    resumed = sketch(dataclasses.replace(args, resume=True))
    assert_same_signature(resumed, complete)
    assert Path(args.output).is_file()
