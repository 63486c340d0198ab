"""``verify_signature`` / ``fisherhub verify``: a signature of a Hub dataset under a Hub model (both on the local Hub
server) is re-sketched at the recorded commits; runs in float32 and bfloat16, and with one and two processes,
reproduce each other within ``VERIFY_TOLERANCE``; forged ones do not; private data is unverifiable."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from sketch_helpers import LAUNCH_TWO_CPU_PROCESSES, run_script
from test_signature_fuzz import forged
from fisherhub.testing.tiny_models import saved_tiny_model

from fisherhub import Signature
from fisherhub.cli.commands.sketch import SketchCommandOptions
from fisherhub.options import DataOptions
from fisherhub.pipeline.loop import sketch
from fisherhub.verify import VERIFY_TOLERANCE, compare, verify_signature

TEXTS = [
    f"the {word} number {i} sat on the mat, then ran {i % 5} times around the {word}."
    for i, word in enumerate(["cat", "dog", "owl", "fox", "emu"] * 12)
]


@pytest.fixture
def published(hub, hf_api, hf_hub_cache, tmp_path):
    hf_api.create_repo("org/tiny")
    hf_api.upload_folder(folder_path=str(saved_tiny_model(tmp_path / "model", "llama", False, 64)), repo_id="org/tiny")
    hf_api.create_repo("org/pets", repo_type="dataset")
    rows = "".join(json.dumps({"text": text}) + "\n" for text in TEXTS).encode()
    hf_api.upload_file(path_or_fileobj=rows, path_in_repo="train.jsonl", repo_id="org/pets", repo_type="dataset")
    return SketchCommandOptions(
        data=DataOptions("org/pets", max_length=32),
        model="org/tiny",
        m=256,
        batch_size=4,
        progress=False,
        cpu=True,
        output=str(tmp_path / "fp32.safetensors"),
        checkpoint=str(tmp_path / "fp32-checkpoint"),
        checkpoint_every=4,
        keep_checkpoint=True,
    )


def test_verify_across_dtypes_and_processes(published, tmp_path, capsys):
    fp32 = sketch(published)
    assert len(fp32.metadata["dataset_revision"]) == 40 and len(fp32.metadata["base_model_revision"]) == 40
    bf16 = sketch(dataclasses.replace(published, dtype="bfloat16", checkpoint=str(tmp_path / "bf16-checkpoint")))
    two = dataclasses.replace(
        published, output=str(tmp_path / "two.safetensors"), checkpoint=str(tmp_path / "two-checkpoint")
    )
    result = run_script(LAUNCH_TWO_CPU_PROCESSES, two)
    assert result.returncode == 0, result.stderr[-3000:]
    two_processes = Signature.load(two.output)

    same = verify_signature(fp32)
    assert same.reproduced and max(same.differences.values()) < 1e-6, same.describe()
    measured = {"bfloat16 vs float32": verify_signature(bf16), "2 vs 1 processes": verify_signature(two_processes)}
    with capsys.disabled():
        for name, verification in measured.items():
            print(f"\n{name}: {verification.describe()}")
    for verification in measured.values():
        assert verification.reproduced and verification.tolerance == VERIFY_TOLERANCE, verification.describe()
    assert max(measured["2 vs 1 processes"].differences.values()) < 1e-5  # merging is exact up to rounding

    shrunk = Signature.from_bytes(forged(fp32, {"split_norms": fp32.split_norms / 60}))
    assert not verify_signature(shrunk).reproduced
    other = Signature.from_bytes(forged(fp32, {"joint": fp32.joint.flip(0)}))
    assert "NOT reproduced" in verify_signature(other).describe()
    fewer = dataclasses.replace(fp32, num_documents=fp32.num_documents - 1)
    assert not compare(fewer, fp32).reproduced


def test_verify_catches_what_no_bound_can(published, tmp_path):
    """The forgeries the bounded-claims checks cannot see in one file (SPEC §3: inside every bound) are not
    reproduced by a re-sketch of the recorded data: counts changed, the joint split norm shrunk inside the
    self-dominance bound, and the activation sketch of another signature put in, headers intact."""
    honest = sketch(published)
    other = sketch(
        dataclasses.replace(
            published,
            data=DataOptions("org/pets", max_length=16),
            output=str(tmp_path / "other.safetensors"),
            checkpoint=str(tmp_path / "other-checkpoint"),
        )
    )
    norms = honest.split_norms.clone()
    forgeries = {
        "counts": forged(honest, num_tokens=str(honest.num_tokens * 10), num_documents=str(honest.num_documents * 10)),
        "joint split norm": forged(honest, {"split_norms": norms * torch.tensor([0.5, 1.0, 1.0], dtype=torch.float64)}),
        "activation sketch": forged(
            honest,
            {
                "activation": other.activation,
                "split_norms": torch.stack([norms[0], other.split_norms[1], norms[2]]),
            },
        ),
    }
    for name, data in forgeries.items():
        forgery = Signature.from_bytes(data)
        assert forgery.findings() == (None, None), name  # inside every bound of one file
        verification = verify_signature(forgery)
        assert verification.verifiable and not verification.reproduced, (name, verification.describe())


def test_private_data_is_unverifiable(tmp_path):
    signature = Signature.from_bytes(forged(Signature.load(_any_signature(tmp_path)), dataset="train.jsonl"))
    verification = verify_signature(signature)
    assert not verification.verifiable and "private or local data" in verification.describe()


def _any_signature(tmp_path):
    from fisherhub.testing.oracles import sketch as core_sketch
    from fisherhub.testing.oracles import synthetic_task

    from fisherhub import SketchSpec

    signature = core_sketch(SketchSpec(d=8, vocab_size=16, m=64), *synthetic_task(50, 8, 16, seed=0))
    signature = dataclasses.replace(signature, metadata={**signature.metadata, "base_model": "org/base"})
    signature.save(tmp_path / "s.safetensors")
    return tmp_path / "s.safetensors"


def test_verify_command(published, capsys):
    from fisherhub.cli import main

    signature = sketch(published)
    signature.save(published.output)
    assert main(["verify", published.output]) == 0
    assert "reproduced: largest relative difference" in capsys.readouterr().out
    Signature.from_bytes(forged(signature, {"split_norms": signature.split_norms / 60})).save(published.output)
    assert main(["verify", published.output]) == 1
    assert "NOT reproduced" in capsys.readouterr().out


def test_selection_verify_demotes_a_forgery_within_the_bounds(published, tmp_path):
    from fisherhub.selection import select_adapter

    honest = sketch(published)
    honest.save(tmp_path / "honest.safetensors")
    forgery = Signature.from_bytes(forged(honest, {"split_norms": honest.split_norms / 1.1}))
    assert forgery.implausibility() is None  # inside the bounds: only a re-sketch tells
    forgery.save(tmp_path / "forged.safetensors")
    target = sketch(
        dataclasses.replace(
            published,
            data=DataOptions("org/pets", max_length=32, max_documents=40),
            like=str(tmp_path / "honest.safetensors"),
        )
    )
    candidates = [str(tmp_path / "honest.safetensors"), str(tmp_path / "forged.safetensors")]
    selection = select_adapter(target, candidates)
    assert selection.best.candidate == candidates[1], selection.table()  # the inflated one leads
    assert all(row.provenance == "signed by the repo; verifiable" for row in selection.ranking)
    results = selection.verify(top_k=2)
    assert results[candidates[0]].reproduced and not results[candidates[1]].reproduced
    assert [row.candidate for row in selection.ranking] == candidates
    assert selection.best.provenance.startswith("signed by the repo; verified (reproduced")
    assert selection.ranking[1].doubt.startswith("verify: NOT reproduced") and "2 !" in selection.table()


def test_select_command_verifies(published, tmp_path, capsys):
    from fisherhub.cli import main

    honest = sketch(published)
    honest.save(tmp_path / "honest.safetensors")
    assert (
        main(["select", str(tmp_path / "honest.safetensors"), str(tmp_path / "honest.safetensors"), "--verify", "1"])
        == 0
    )
    assert "signed by the repo; verified (reproduced" in capsys.readouterr().out
