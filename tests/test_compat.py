"""Signatures written before the rename (fishersketch 0.1.0) load, compare and re-sketch bit-identically."""

import json
from pathlib import Path

import pytest
import torch
from fisherhub.testing.oracles import sketch, synthetic_task

from fisherhub import Signature, SketchSpec, alignment

FIXTURES = Path(__file__).parent / "fixtures"
EXPECTED = json.loads((FIXTURES / "pre_rename_expected.json").read_text())


@pytest.mark.parametrize("estimator", sorted(EXPECTED))
def test_pre_rename_signatures_load_and_compare(estimator):
    old = [Signature.load(FIXTURES / f"pre_rename_{estimator}_{k}.safetensors") for k in (0, 1)]
    assert old[0].sketch_id == EXPECTED[estimator]["sketch_id"]
    assert old[0].metadata["library_version"] == "0.1.0"
    result = alignment(*old)
    for field in ("fisher", "activation", "error", "stderr"):
        assert getattr(result, field) == pytest.approx(EXPECTED[estimator][field], rel=1e-12)


@pytest.mark.parametrize("estimator", sorted(EXPECTED))
def test_pre_rename_signatures_resketch_to_the_same_bytes(estimator):
    for k, block in enumerate([(0, 64), (32, 128)]):
        a, e = synthetic_task(80, 16, 128, seed=k, label_block=block)
        fresh = sketch(SketchSpec(d=16, vocab_size=128, m=256, seed=3, estimator=estimator), a, e)
        old = Signature.load(FIXTURES / f"pre_rename_{estimator}_{k}.safetensors")
        assert fresh.sketch_id == old.sketch_id
        for name in ("joint", "activation", "error", "split_norms"):
            assert torch.equal(getattr(fresh, name), getattr(old, name)), name
