"""Pushing one signature loads what pushing needs: not the signature index's code, nor pyarrow, datasets or
transformers (numpy comes with torch, which every signature needs)."""

from __future__ import annotations

import subprocess
import sys

import torch

from fisherhub import HeadBatch, SketchSpec, SketchState

PUSH = """
import sys
from fisherhub import Signature, push_signature
result = push_signature(Signature.load(sys.argv[1]), sys.argv[2], repo_type="dataset", index="org/the-index")
assert result.committed, result
heavy = ("pyarrow", "datasets", "transformers", "fisherhub.hub.signature_index", "fisherhub.lm.loading")
print("LOADED", sorted(name for name in heavy if name in sys.modules))
"""


def test_pushing_a_signature_with_an_index_link_imports_no_index_code(tmp_path):
    generator = torch.Generator().manual_seed(0)
    state = SketchState(SketchSpec(d=4, vocab_size=8, m=64))
    batch = HeadBatch(
        activations=torch.randn(100, 4, generator=generator) + 1,
        doc_index=torch.arange(100),
        errors=torch.randn(100, 8, generator=generator),
    )
    path = tmp_path / "sig.safetensors"
    state.update(batch).finalize({"base_model": "org/base", "dataset": "org/data"}).save(path)
    folder = tmp_path / "repo"
    folder.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", PUSH, str(path), str(folder)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "LOADED []" in done.stdout, done.stdout
    assert "datasets/org/the-index" in (folder / "README.md").read_text()
