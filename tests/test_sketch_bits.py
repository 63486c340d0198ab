"""The row-blocked, row-parallel sketch computes main's bits: ``SketchState.update`` digests, recorded with the
unblocked single-threaded code of ``a36ffb1`` (``fixtures/sketch_bits.json``), for every estimator, both
granularities and both error paths (logits, materialized e), at 1 and 2 threads and at any CPU block size."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from fisherhub import SketchSpec, SketchState
from fisherhub.core import projectors
from fisherhub.core.batch import HeadBatch
from fisherhub.core.parallel import map_row_ranges
from fisherhub.core.registry import ESTIMATORS, GRANULARITIES

DIGESTS = json.loads((Path(__file__).parent / "fixtures" / "sketch_bits.json").read_text())
#: (K, d, m, logits dtype): unaligned K (1000, 8195: partial permutation chunks), the default's shapes (49152)
SHAPES = {
    "K1000": (1000, 40, 256, torch.float32),
    "K8195": (8195, 100, 1024, torch.bfloat16),
    "K49152": (49152, 576, 4096, torch.float32),
}
TOKENS = 45
PATHS = ("logits", "errors")


def case_batch(shape: str, path: str) -> HeadBatch:
    """45 tokens in 4 documents: 5 unscored (y = −100, logits NaN), one whose Σ exp(z) overflows."""
    vocab_size, d, _, dtype = SHAPES[shape]
    generator = torch.Generator().manual_seed(vocab_size)
    activations = 1.0 + torch.randn(TOKENS, d, generator=generator)
    logits = 3.0 * torch.randn(TOKENS, vocab_size, generator=generator)
    targets = torch.randint(0, vocab_size, (TOKENS,), generator=generator)
    logits[7] += 120.0  # exp overflows float32: the row is recomputed with its max subtracted
    doc_index = torch.arange(TOKENS) * 4 // TOKENS
    unscored = torch.tensor([0, 11, 12, 30, 44])
    targets[unscored] = -100
    logits[unscored] = float("nan")
    if path == "logits":
        return HeadBatch(activations=activations, doc_index=doc_index, logits=logits.to(dtype), targets=targets)
    scored = targets != -100
    errors = torch.softmax(logits[scored].double(), dim=1)
    errors[torch.arange(int(scored.sum())), targets[scored]] -= 1.0
    return HeadBatch(activations=activations[scored], doc_index=doc_index[scored], errors=errors.float())


def digest(estimator: str, granularity: str, shape: str, path: str) -> str:
    vocab_size, d, m, _ = SHAPES[shape]
    spec = SketchSpec(d=d, vocab_size=vocab_size, m=m, estimator=estimator, granularity=granularity, seed=5)
    state = SketchState(spec).update(case_batch(shape, path)).flush()
    hashed = hashlib.sha256()
    for tensor in (state.sums, state.token_counts, state.document_counts):
        hashed.update(tensor.numpy().tobytes())
    return hashed.hexdigest()


def case_name(estimator: str, granularity: str, shape: str, path: str) -> str:
    return f"{estimator}/{granularity}/{shape}/{path}"


CASES = [(e, g, s, p) for e in sorted(ESTIMATORS) for g in GRANULARITIES for s in SHAPES for p in PATHS]


def test_every_case_has_a_recorded_digest():
    assert sorted(DIGESTS) == sorted(case_name(*case) for case in CASES)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("estimator,granularity,shape,path", CASES, ids=[case_name(*c) for c in CASES])
def test_sketch_bits_equal_the_reference(estimator, granularity, shape, path, threads):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert digest(estimator, granularity, shape, path) == DIGESTS[case_name(estimator, granularity, shape, path)]
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("block_bytes,transform_bytes", [(1, 1), (64 * 1024, 1), (1, 64 * 1024)])  # 1 row, a few
@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_sketch_bits_do_not_depend_on_the_cpu_block_sizes(estimator, block_bytes, transform_bytes, monkeypatch):
    monkeypatch.setattr(projectors, "CPU_BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(projectors, "CPU_TRANSFORM_BLOCK_BYTES", transform_bytes)
    for path in PATHS:
        assert digest(estimator, "sequence", "K8195", path) == DIGESTS[case_name(estimator, "sequence", "K8195", path)]


def ranges(count: int, work) -> list:
    """What ``map_row_ranges`` hands ``then``, in the order it does: (result, intra-op threads of ``then``)."""
    seen: list = []
    map_row_ranges(count, work, torch.device("cpu"), then=lambda result: seen.append((result, torch.get_num_threads())))
    return seen


def test_row_ranges_cover_the_rows_in_order_with_one_thread_each_and_restore_the_thread_count():
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen = ranges(45, lambda rows: (rows, torch.get_num_threads()))
        assert [rows for (rows, _), _ in seen] == [slice(0, 22), slice(22, 45)]
        assert [threads for (_, threads), _ in seen] == [1, 1]  # each range's work
        assert [threads for _, threads in seen] == [1, 1]  # and each then
        assert torch.get_num_threads() == 2
        assert [rows for rows, _ in ranges(31, lambda rows: rows)] == [slice(0, 31)]  # < 16 rows per thread
    finally:
        torch.set_num_threads(previous)


def test_row_ranges_wait_for_every_range_when_one_fails_and_restore_the_thread_count():
    import time

    finished: list[slice] = []

    def work(rows: slice) -> slice:
        if rows.start == 0:
            raise ValueError("the first range fails")
        time.sleep(0.2)  # still at work when the first range's error reaches the caller
        finished.append(rows)
        return rows

    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(ValueError, match="first range"):
            ranges(40, work)
        assert finished == [slice(20, 40)]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


def test_a_refused_batch_adds_nothing_even_when_an_earlier_range_was_added():
    """Two row ranges (2 threads): the second's logits are not finite, so the update is refused after the
    first range was added; the state is as before, and the next batch gives the sums of a state that never saw
    the refused one."""
    from fisherhub.core.errors import InputError

    batch = case_batch("K1000", "logits")
    vocab_size, d, m, _ = SHAPES["K1000"]
    spec = SketchSpec(d=d, vocab_size=vocab_size, m=m, seed=5)
    refused = HeadBatch(
        activations=batch.activations,
        doc_index=batch.doc_index + 10,
        logits=torch.cat([batch.logits[:40], torch.full_like(batch.logits[40:], float("inf"))]),
        targets=batch.targets,
    )
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        state = SketchState(spec).update(batch).flush()
        with pytest.raises(InputError, match="NaN or \\+inf"):
            state.update(refused)
        assert torch.equal(state.sums, SketchState(spec).update(batch).flush().sums)
        assert state.num_tokens == SketchState(spec).update(batch).num_tokens
    finally:
        torch.set_num_threads(previous)


def _ranges_in_a_child(queue) -> None:
    torch.set_num_threads(2)
    queue.put([size for size, _ in ranges(40, lambda rows: rows.stop - rows.start)])


def test_row_ranges_run_in_a_forked_child_of_a_process_that_used_them():
    import multiprocessing

    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert [size for size, _ in ranges(40, lambda rows: rows.stop - rows.start)] == [20, 20]  # pool made
    finally:
        torch.set_num_threads(previous)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_ranges_in_a_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0 and queue.get(timeout=5) == [20, 20]
