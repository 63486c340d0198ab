"""The sketching loop: accelerate processes, checkpoint / resume, in-process helpers, bad input."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch
from sketch_helpers import LAUNCH_TWO_CPU_PROCESSES, run_args, run_script, single_thread
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

from fisherhub import Signature, SketchState, alignment
from fisherhub.options import DataArgs
from fisherhub.core.errors import InputError
from fisherhub.lm import spec_for_model
from fisherhub.pipeline.loop import CRASH_AFTER_BATCHES_ENV, sketch, sketch_dataset, sketch_texts

TEXTS = [f"task {i}: " + ("the quick brown fox " if i % 3 else "lazy dogs sleep ") * (1 + i % 4) for i in range(24)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Qwen2 (untied head) and its tokenizer, saved to a folder, and a jsonl dataset."""
    folder = tmp_path_factory.mktemp("tiny")
    model, tokenizer = tiny_causal_lm("qwen2", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    data = folder / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": text}) + "\n" for text in TEXTS))
    return model, tokenizer, folder


def rank_states(folder: str) -> list[SketchState]:
    records = sorted(Path(folder).glob("rank*.json"))
    return [SketchState.load(Path(folder) / json.loads(r.read_text())["state_file"]) for r in records]


def test_two_processes_give_the_one_process_signature(tiny):
    _, _, folder = tiny
    one_process = run_args(folder, "one")
    with single_thread():
        reference = sketch(one_process)
    two_processes = run_args(folder, "two")
    result = run_script(LAUNCH_TWO_CPU_PROCESSES, two_processes)
    assert result.returncode == 0, result.stderr[-3000:]
    (one,), (first, second) = rank_states(one_process.checkpoint), rank_states(two_processes.checkpoint)
    assert first.num_tokens > 0 and second.num_tokens > 0  # both processes did work
    merged = first + second
    assert torch.equal(merged.token_counts, one.token_counts) and torch.equal(
        merged.document_counts, one.document_counts
    )
    assert float((merged.sums - one.sums).abs().max() / one.sums.abs().max()) < 1e-9
    signature = type(reference).load(two_processes.output)
    assert (signature.num_tokens, signature.num_documents) == (reference.num_tokens, reference.num_documents)
    assert reference.num_documents == len(TEXTS)
    assert float(((signature.split_norms - reference.split_norms) / reference.split_norms).abs().max()) < 1e-9
    torch.testing.assert_close(signature.joint, reference.joint, rtol=1e-6, atol=1e-7)


def test_kill_then_resume_equals_an_uninterrupted_run(tiny):
    _, _, folder = tiny
    interrupted = run_args(folder, "interrupted")
    result = run_script([], interrupted, env={CRASH_AFTER_BATCHES_ENV: "5"})
    assert result.returncode == -9, result.stderr[-3000:]  # SIGKILL after batch 5, last checkpoint at batch 4
    record = json.loads(next(Path(interrupted.checkpoint).glob("rank0-of1.json")).read_text())
    assert record["batches"] == 4 and not Path(interrupted.output).exists()
    with single_thread():
        resumed = sketch(dataclasses.replace(interrupted, resume=True))
        uninterrupted = sketch(run_args(folder, "uninterrupted"))
    for name in ("joint", "activation", "error", "split_norms"):
        assert torch.equal(getattr(resumed, name), getattr(uninterrupted, name)), name
    assert (resumed.num_tokens, resumed.num_documents) == (uninterrupted.num_tokens, uninterrupted.num_documents)


#: a network signature (SPEC §2b) of the attention's q and v projections, per document (exact)
NETWORK = {"modules": "q_proj,v_proj", "granularity": "sequence"}
SIGNATURE_TENSORS = ("joint", "activation", "error", "split_norms")


def test_network_sketch_through_the_cli_with_two_processes_is_bit_equal_to_one_process(tiny):
    _, _, folder = tiny
    one_process, two_processes = run_args(folder, "network-one", **NETWORK), run_args(folder, "network-two", **NETWORK)
    for prefix, args in (([], one_process), (LAUNCH_TWO_CPU_PROCESSES, two_processes)):
        result = run_script(prefix, args)
        assert result.returncode == 0, result.stderr[-3000:]
    first, second = rank_states(two_processes.checkpoint)
    assert first.num_tokens > 0 and second.num_tokens > 0  # both processes did work
    one, two = Signature.load(one_process.output), Signature.load(two_processes.output)
    assert [name for name, _, _ in one.spec.modules] == [
        f"model.layers.{layer}.self_attn.{name}" for layer in range(2) for name in ("q_proj", "v_proj")
    ]
    assert one.sketch_id == two.sketch_id and (one.num_documents, one.num_tokens) == (two.num_documents, two.num_tokens)
    assert one.num_documents == len(TEXTS)
    for name in SIGNATURE_TENSORS:
        assert torch.equal(getattr(one, name), getattr(two, name)), name


def test_network_sketch_killed_then_resumed_equals_an_uninterrupted_run(tiny):
    _, _, folder = tiny
    interrupted = run_args(folder, "network-interrupted", **NETWORK)
    result = run_script([], interrupted, env={CRASH_AFTER_BATCHES_ENV: "5"})
    assert result.returncode == -9, result.stderr[-3000:]  # SIGKILL after batch 5, last checkpoint at batch 4
    record = json.loads(next(Path(interrupted.checkpoint).glob("rank0-of1.json")).read_text())
    assert record["batches"] == 4 and not Path(interrupted.output).exists()
    (saved,) = rank_states(interrupted.checkpoint)
    assert saved.spec.modules is not None and saved.num_documents == 4
    with single_thread():
        resumed = sketch(dataclasses.replace(interrupted, resume=True))
        uninterrupted = sketch(run_args(folder, "network-uninterrupted", **NETWORK))
    for name in SIGNATURE_TENSORS:
        assert torch.equal(getattr(resumed, name), getattr(uninterrupted, name)), name
    assert (resumed.num_tokens, resumed.num_documents) == (uninterrupted.num_tokens, uninterrupted.num_documents)


def test_adapter_modules_give_the_network_signature_of_their_target_modules(tiny, tmp_path):
    import peft

    model, tokenizer, folder = tiny
    peft.LoraConfig(target_modules=["q_proj", "v_proj"]).save_pretrained(tmp_path / "adapter")
    from_adapter = sketch(
        run_args(folder, "network-adapter", adapters=[str(tmp_path / "adapter")], checkpoint=None, m=64)
    )
    from_names = sketch_texts(TEXTS, model, tokenizer, modules=["q_proj", "v_proj"], m=64)
    assert from_adapter.sketch_id == from_names.sketch_id != spec_for_model(model, tokenizer, m=64).sketch_id
    assert from_adapter.spec.modules == from_names.spec.modules
    with pytest.raises(InputError, match="give one of the two"):
        run_args(folder, "both", adapters=[str(tmp_path / "adapter")], modules="q_proj")
    with pytest.raises(InputError, match="drop --fisher true"):
        run_args(folder, "true-fisher", modules="all-linear", fisher="true")
    with pytest.raises(InputError, match="--kernel block is for network signatures"):
        run_args(folder, "block-head", kernel="block")


def test_resume_refuses_a_checkpoint_of_another_run(tiny):
    _, _, folder = tiny
    first = run_args(folder, "mismatch")
    sketch(first)
    with pytest.raises(InputError, match=r"different run \(differs in \['max_documents'\]\)"):
        sketch(dataclasses.replace(first, resume=True, data=DataArgs(first.data.dataset, max_documents=5)))


def test_in_process_helpers_and_provenance(tiny):
    model, tokenizer, folder = tiny
    spec = spec_for_model(model, tokenizer, m=256)
    from_texts = sketch_texts(TEXTS, model, tokenizer, spec, batch_size=5, metadata={"base_model": "tiny"})
    streamed = sketch_dataset(
        str(folder / "docs.jsonl"), model, tokenizer, from_texts, data=DataArgs(None, streaming=True), batch_size=5
    )
    assert streamed.sketch_id == from_texts.sketch_id
    assert torch.equal(streamed.joint, from_texts.joint) and streamed.num_tokens == from_texts.num_tokens
    assert from_texts.metadata["base_model"] == "tiny" and from_texts.metadata["text_column"] == "text"
    assert streamed.metadata["dataset"].endswith("docs.jsonl")
    rebatched = sketch_texts(TEXTS, model, tokenizer, spec, batch_size=3)
    assert alignment(rebatched, from_texts).fisher == pytest.approx(1.0, abs=1e-5)
    args = run_args(folder, "provenance", checkpoint=None)
    metadata = sketch(args).metadata
    assert metadata["base_model"] == args.model and metadata["dataset"] == args.data.dataset
    assert metadata["dataset_split"] == "train"


def test_max_tokens_limits_the_signature(tiny):
    model, tokenizer, _ = tiny
    dataset = datasets.Dataset.from_dict({"text": TEXTS})
    full = sketch_dataset(dataset, model, tokenizer, m=64, reflection=False)
    limited = sketch_dataset(dataset, model, tokenizer, full, data=DataArgs(None, max_tokens=full.num_tokens // 2))
    assert full.num_tokens // 2 <= limited.num_tokens < full.num_tokens
    assert limited.num_documents < full.num_documents


def test_bad_inputs_raise_clear_errors(tiny):
    model, tokenizer, folder = tiny
    with pytest.raises(InputError, match=r"text column 'text' not found.*\['body'\]"):
        sketch_dataset(datasets.Dataset.from_dict({"body": TEXTS}), model, tokenizer, m=64, reflection=False)
    with pytest.raises(InputError, match="is empty"):
        sketch_dataset(datasets.Dataset.from_dict({"text": []}), model, tokenizer, m=64, reflection=False)
    with pytest.raises(InputError, match="shorter than 2 tokens"):
        sketch_texts(["", "", ""], model, tokenizer, m=64, reflection=False)
    with pytest.raises(InputError, match="use the tokenizer that belongs to the base model"):
        sketch_texts(TEXTS, tiny_causal_lm("llama", tie_word_embeddings=True, vocab_size=32), tokenizer, m=64)
    other = sketch_texts(
        TEXTS, tiny_causal_lm("qwen2", False, vocab_size=64, seed=1), tokenizer, m=64, reflection=False
    )
    with pytest.raises(InputError, match="another base model"):
        sketch_texts(TEXTS, model, tokenizer, other)
    other.save(folder / "other.safetensors")
    with pytest.raises(InputError, match="another base model"):
        sketch(run_args(folder, "like-other", like=str(folder / "other.safetensors"), checkpoint=None))
    with pytest.raises(InputError, match="resume needs the checkpoint folder"):
        run_args(folder, "resume", checkpoint=None, resume=True)


PROGRESS_BAR_RUN = """
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer
from fisherhub.pipeline import sketch_texts
sketch_texts(["a b c", "d e f"], tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64), m=64,
             progress=True)
"""


@pytest.mark.parametrize("disabled", [None, "1"])
def test_the_progress_bar_honours_hf_hub_disable_progress_bars(disabled):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    if disabled:
        env["HF_HUB_DISABLE_PROGRESS_BARS"] = disabled
    run = subprocess.run([sys.executable, "-c", PROGRESS_BAR_RUN], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert ("sketching: 100%" in run.stderr) == (disabled is None), run.stderr
