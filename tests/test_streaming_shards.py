"""Streams on N processes (issue 16): each process reads only its shards (the assignment of
``datasets.distributed.split_dataset_by_node``), the global document index and so the signature are those
of one process, and a resumed stream continues from ``IterableDataset.state_dict()`` without reading the
rows before the checkpoint again."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch
import sketch_helpers
from sketch_helpers import LAUNCH_TWO_CPU_PROCESSES, run_script, single_thread
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

from fisherhub import SketchState
from fisherhub.data.stream import DocumentStream
from fisherhub.options import DataArgs, SketchArgs
from fisherhub.pipeline.loop import CRASH_AFTER_BATCHES_ENV, sketch

SHARD_SIZES = (10, 7, 11, 9)  # odd sizes: a shard's rows do not start at an even global index
TEXTS = [f"row {i}: " + ("the quick brown fox " if i % 3 else "lazy dogs sleep ") * (1 + i % 4) for i in range(37)]


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """Four jsonl shards of ``TEXTS`` (in order) and a tiny model folder."""
    folder = tmp_path_factory.mktemp("shards")
    start = 0
    for shard, size in enumerate(SHARD_SIZES):
        rows = TEXTS[start : start + size]
        (folder / f"part-{shard}.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for text in rows))
        start += size
    model, tokenizer = tiny_causal_lm("qwen2", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    return folder


def stream_args(folder: Path) -> DataArgs:
    return DataArgs(str(folder / "part-*.jsonl"), streaming=True)


def global_indices(shards: list[int]) -> list[int]:
    offsets = [sum(SHARD_SIZES[:shard]) for shard in range(len(SHARD_SIZES) + 1)]
    return [index for shard in shards for index in range(offsets[shard], offsets[shard + 1])]


def test_each_process_reads_only_its_shards_with_global_indices(shards, tmp_path):
    tokenizer = tiny_tokenizer(64)
    folder = tmp_path / "data"
    folder.mkdir()
    for path in shards.glob("part-*.jsonl"):
        (folder / path.name).write_bytes(path.read_bytes())
    whole = list(DocumentStream(stream_args(folder), tokenizer).documents())
    assert [d.index for d in whole] == list(range(len(TEXTS)))
    streams = [DocumentStream(stream_args(folder), tokenizer, rank, 2) for rank in (0, 1)]
    assert all(stream.reads_own_shards for stream in streams)
    assert [list(stream.own_shards()) for stream in streams] == [[0, 2], [1, 3]]
    own_sizes = [stream.count_own_shards() for stream in streams]
    assert own_sizes == [[10, 11], [7, 9]]
    for stream in streams:
        stream.shard_sizes = list(SHARD_SIZES)
    for shard in (1, 3):  # process 1's shards become unreadable: process 0 must never open them
        (folder / f"part-{shard}.jsonl").write_bytes(b"\xff not json\n")
    first = list(streams[0].documents())
    assert [d.index for d in first] == global_indices([0, 2])
    assert first == [d for d in whole if d.index in set(global_indices([0, 2]))]


def run_args(folder: Path, name: str, **overrides) -> SketchArgs:
    """The shards streamed, a checkpoint every 4 batches."""
    return sketch_helpers.run_args(folder, name, **{"data": stream_args(folder), "checkpoint_every": 4, **overrides})


def records(folder: str) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(Path(folder).glob("rank*.json"))]


def test_two_processes_by_shards_give_the_one_process_sums(shards):
    with single_thread():
        reference = sketch(run_args(shards, "one"))
    two = run_args(shards, "two")
    result = run_script(LAUNCH_TWO_CPU_PROCESSES, two)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = records(two.checkpoint)
    assert (first["own_shard_sizes"], second["own_shard_sizes"]) == ([10, 11], [7, 9])
    assert (first["counts"]["seen"], second["counts"]["seen"]) == (21, 16)
    (one,) = [
        SketchState.load(Path(run_args(shards, "one").checkpoint) / r["state_file"])
        for r in records(run_args(shards, "one").checkpoint)
    ]
    merged = SketchState.load(Path(two.checkpoint) / first["state_file"]) + SketchState.load(
        Path(two.checkpoint) / second["state_file"]
    )
    assert torch.equal(merged.token_counts, one.token_counts) and torch.equal(
        merged.document_counts, one.document_counts
    )
    assert float((merged.sums - one.sums).abs().max() / one.sums.abs().max()) < 1e-9
    signature = type(reference).load(two.output)
    assert (
        (signature.num_tokens, signature.num_documents)
        == (reference.num_tokens, reference.num_documents)
        == (one.num_tokens, len(TEXTS))
    )
    torch.testing.assert_close(signature.joint, reference.joint, rtol=1e-6, atol=1e-7)


def test_stream_resume_continues_from_the_state_dict(shards, tmp_path):
    """Killed inside shard 3: the resumed run never opens shard 1 again (its bytes are replaced, keeping the
    modification time that ``datasets``' fingerprint hashes) and gives the uninterrupted signature. (``datasets``
    resumes at the start of the Arrow chunk it was reading, here all of shard 2; the column check reads row 0.)"""
    folder = tmp_path / "data"
    folder.mkdir()
    for path in shards.glob("part-*.jsonl"):
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "model").symlink_to(shards / "model")
    interrupted = run_args(folder, "interrupted", batch_size=2, checkpoint_every=15)
    result = run_script([], interrupted, env={CRASH_AFTER_BATCHES_ENV: "16"})
    assert result.returncode == -9, result.stderr[-3000:]  # killed after batch 16, last checkpoint at batch 15
    (record,) = records(interrupted.checkpoint)
    assert record["next_index"] == 30 and record["reading_state"] is not None
    shard1 = folder / "part-1.jsonl"  # rows 10-16, all read before the checkpoint
    stat = shard1.stat()
    shard1.write_bytes(b"\xff" * stat.st_size)
    os.utime(shard1, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with single_thread():
        resumed = sketch(dataclasses.replace(interrupted, resume=True))
        uninterrupted = sketch(run_args(shards, "uninterrupted", batch_size=2))
    for name in ("joint", "activation", "error", "split_norms"):
        assert torch.equal(getattr(resumed, name), getattr(uninterrupted, name)), name
    assert (resumed.num_tokens, resumed.num_documents) == (uninterrupted.num_tokens, uninterrupted.num_documents)
