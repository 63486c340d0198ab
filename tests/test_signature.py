"""Signature files: round trip, metadata, and refusal of truncated / edited / unknown files."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from fisherhub.testing.oracles import sketch, synthetic_task

from fisherhub.core.batch import HeadBatch
from fisherhub import Signature, SketchSpec, SketchState, alignment
from fisherhub.core.errors import SignatureFileError


@pytest.fixture
def signature() -> Signature:
    spec = SketchSpec(d=8, vocab_size=64, m=256).with_fingerprint("0123456789abcdef", "fedcba9876543210")
    spec = spec.with_reflection(torch.linspace(1.0, 2.0, 8))
    return sketch(spec, *synthetic_task(300, 8, 64, seed=0))


def _rewrite_header(data: bytes, edit) -> bytes:
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + length])
    edit(header)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded + data[8 + length :]


def test_round_trip(tmp_path, signature):
    path = tmp_path / "sig.safetensors"
    signature.save(path)
    loaded = Signature.load(path)
    assert loaded.spec == signature.spec and loaded.sketch_id == signature.sketch_id
    for name in ("joint", "activation", "error", "split_norms"):
        assert torch.equal(getattr(loaded, name), getattr(signature, name))
    assert loaded.num_tokens == 300 and loaded.num_documents == 300
    assert loaded.metadata["dataset"] == "synthetic"
    assert loaded.to_bytes() == signature.to_bytes()
    assert alignment(loaded, signature).fisher == 1.0


def test_metadata_lists_spec_fields(signature):
    header = json.loads(signature.to_bytes()[8 : 8 + struct.unpack("<Q", signature.to_bytes()[:8])[0]])
    metadata = header["__metadata__"]
    for key in (
        "format_version",
        "sketch_id",
        "m",
        "seed",
        "estimator",
        "granularity",
        "fisher",
        "d",
        "vocab_size",
        "head_checksum",
        "tokenizer_checksum",
        "num_documents",
        "num_tokens",
        "library_version",
        "created",
        "dataset",
    ):
        assert key in metadata, key
    assert metadata["sketch_id"] == signature.sketch_id and metadata["head_checksum"] == "0123456789abcdef"


def test_state_save_load_resume(tmp_path):
    spec = SketchSpec(d=8, vocab_size=64, m=128).with_reflection(torch.ones(8))
    a, e = synthetic_task(100, 8, 64, seed=0)
    full = SketchState(spec).update(HeadBatch(activations=a, doc_index=torch.arange(100), errors=e))
    first = SketchState(spec).update(HeadBatch(activations=a[:50], doc_index=torch.arange(50), errors=e[:50]))
    first.save(tmp_path / "state.safetensors")
    resumed = SketchState.load(tmp_path / "state.safetensors").update(
        HeadBatch(activations=a[50:], doc_index=torch.arange(50, 100), errors=e[50:])
    )
    assert resumed.spec == spec
    torch.testing.assert_close(resumed.sums, full.sums, rtol=1e-12, atol=0)
    assert torch.equal(resumed.finalize().joint, full.finalize().joint)


def test_truncated_file_is_refused(tmp_path, signature):
    path = tmp_path / "sig.safetensors"
    path.write_bytes(signature.to_bytes()[:-100])
    with pytest.raises(SignatureFileError, match="not a readable"):
        Signature.load(path)


def test_edited_tensor_is_refused(signature):
    data = bytearray(signature.to_bytes())
    data[-20] ^= 0xFF
    with pytest.raises(SignatureFileError, match="checksum mismatch"):
        Signature.from_bytes(bytes(data))


def test_edited_metadata_is_refused(signature):
    data = _rewrite_header(signature.to_bytes(), lambda h: h["__metadata__"].update(num_tokens="999999"))
    with pytest.raises(SignatureFileError, match="checksum mismatch"):
        Signature.from_bytes(data)


def test_metadata_not_matching_sketch_id_is_refused(signature):
    """An edit that also fixes the checksum is still caught by recomputing the sketch id."""

    def change_seed(header):
        metadata = header["__metadata__"]
        spec = json.loads(metadata["spec"])
        spec["seed"] = 99
        metadata["spec"] = json.dumps(spec, sort_keys=True)

    tensors = {k: getattr(signature, k) for k in ("joint", "activation", "error", "split_norms")}
    tensors["reflection"] = signature.spec.reflection_tensor
    edited = _rewrite_header(signature.to_bytes(), change_seed)
    length = struct.unpack("<Q", edited[:8])[0]
    header = json.loads(edited[8 : 8 + length])["__metadata__"]
    header.pop("checksum")
    fixed = _rewrite_header(edited, lambda h: h["__metadata__"].update(checksum=Signature._checksum(tensors, header)))
    with pytest.raises(SignatureFileError, match="does not match its spec"):
        Signature.from_bytes(fixed)


def test_unknown_format_version_is_refused(signature):
    data = _rewrite_header(signature.to_bytes(), lambda h: h["__metadata__"].update(format_version="7"))
    with pytest.raises(SignatureFileError, match="format version '7' is not supported"):
        Signature.from_bytes(data)


def test_not_a_signature(tmp_path):
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(3)}, tmp_path / "other.safetensors")
    with pytest.raises(SignatureFileError, match="not a fisherhub signature"):
        Signature.load(tmp_path / "other.safetensors")
    with pytest.raises(SignatureFileError, match="cannot read"):
        Signature.load(tmp_path / "missing.safetensors")
