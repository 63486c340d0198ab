"""Signatures that cannot take over a ranking: plausibility bounds on a signature's numbers (the forged split
norms of issue 23), clean refusal of other dtypes, and hostile candidates skipped with their reason while the
selection completes."""

from __future__ import annotations

import json
import math

import pytest
import torch
from fisherhub.testing.oracles import sketch, synthetic_task
from test_signature_fuzz import forged

from fisherhub import Signature, SignatureFileError, SketchSpec, alignment
from fisherhub.core.plausibility import max_self_dominance
from fisherhub.hub import push_signature
from fisherhub.selection import select_adapter

SPEC = SketchSpec(d=8, vocab_size=64, m=256).with_fingerprint("0123456789abcdef")


def task(seed: int, block: tuple[int, int], n: int = 400) -> Signature:
    signature = sketch(SPEC, *synthetic_task(n, 8, 64, seed=seed, label_block=block), doc_index=torch.arange(n) // 2)
    return Signature.from_bytes(forged(signature, base_model="org/base", dataset=f"org/task-{seed}"))


@pytest.fixture(scope="module")
def world():
    return {"target": task(0, (0, 16)), "good": task(1, (0, 16)), "weak": task(2, (14, 46))}


def shrunk_split_norms(signature: Signature, factor: float) -> bytes:
    """The forgery of issue 23: the split norms divided by ``factor``, the checksum recomputed."""
    return forged(signature, {"split_norms": signature.split_norms / factor})


def test_forged_split_norms_never_become_the_best(world, tmp_path):
    target, good, weak = world["target"], world["good"], world["weak"]
    true_weak, true_good = alignment(weak, target).fisher, alignment(good, target).fisher
    assert true_weak < 0.3 < true_good
    forgery = Signature.from_bytes(shrunk_split_norms(weak, 60.0))  # loads: the checksum is no protection
    assert alignment(forgery, target).fisher > max(0.9, true_good)  # the takeover it attempts
    assert forgery.implausibility() and "joint R̂" in forgery.implausibility()
    assert good.implausibility() is None and weak.implausibility() is None
    files = {}
    for name, data in {"good": good.to_bytes(), "weak": weak.to_bytes(), "forged": forgery.to_bytes()}.items():
        files[name] = tmp_path / f"{name}.safetensors"
        files[name].write_bytes(data)
    selection = select_adapter(target, [str(files["forged"]), str(files["weak"]), str(files["good"])])
    assert [row.candidate for row in selection.ranking] == [
        str(files["good"]),
        str(files["weak"]),
        str(files["forged"]),
    ]
    forged_row = selection.ranking[-1]
    assert forged_row.doubt.startswith("implausible split norms") and forged_row.fisher > selection.best.fisher
    assert selection.best.doubt is None
    table = selection.table(wide=True)
    assert "3 !" in table and f"{files['forged']}: implausible split norms" in table


def test_resolved_sketches_stay_under_the_self_dominance_bound():
    """The bound holds for honest sketches of few documents at small m; the ones above it are those the
    writer flagged unresolved, and they are marked so."""
    from fisherhub.core.signature import CLAMPED_NORMS_KEY

    worst, marked = 0.0, 0
    for m in (16, 64, 256, 4096):
        for n in (20, 40, 200):
            for seed in range(6):
                signature = sketch(SketchSpec(d=8, vocab_size=16, m=m), *synthetic_task(n, 8, 16, seed=seed))
                unresolved = signature.metadata.get(CLAMPED_NORMS_KEY, "").split(",")
                for name, value in zip(("joint", "activation", "error"), signature.self_dominances().tolist()):
                    if name not in unresolved:
                        worst = max(worst, value / max_self_dominance(m))
                doubt = signature.implausibility()
                marked += doubt is not None
                assert doubt is None or doubt.startswith("unresolved split norms"), doubt
    assert worst < 1.0 and marked >= 1, (worst, marked)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64, torch.bool])
def test_other_dtypes_are_refused_cleanly(world, dtype):
    data = forged(world["good"], {"joint": world["good"].joint.to(dtype)})
    with pytest.raises(
        SignatureFileError, match=r"tensor 'joint' is \w+ of shape \(256,\); a signature stores it as float32"
    ):
        Signature.from_bytes(data)


def test_implausible_estimates_are_flagged(world):
    from fisherhub.core.plausibility import range_doubt

    result = alignment(world["good"], world["target"])
    assert result.doubt is None and result.plausible
    doubt = range_doubt({"fisher": (5.0, 0.1, 0.0)})
    assert "fisher = 5 ± 0.1 outside [0, 1] by more than 5 se" in doubt and doubt.endswith("(check: alignment range)")
    assert "fisher = nan" in range_doubt({"fisher": (math.nan, 0.1, 0.0)})
    assert range_doubt({"fisher": (1.45, 0.1, 0.0)}) is None  # within 5 se of 1
    assert range_doubt({"fisher": (1.55, 0.1, 0.1)}) is None  # and of what shared documents add
    assert "outside [0, 1.05]" in range_doubt({"fisher": (1.6, 0.1, 0.05)})


def _adapter(folder, signature: Signature):
    folder.mkdir()
    (folder / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": "org/base", "peft_type": "LORA"})
    )
    push_signature(signature, folder)
    return folder


def test_one_hostile_candidate_among_good_ones(world, hub, hf_api, hf_hub_cache, tmp_path):
    """A Hub adapter whose index lists ``..`` paths, a deep nest, bad counts and control characters is
    skipped (or lists nothing usable) and the selection ranks the others."""
    good = _adapter(tmp_path / "good", world["good"])
    weak = _adapter(tmp_path / "weak", world["weak"])
    hf_api.create_repo("evil/adapter")
    hostile_index = {
        "kind": "fisherhub-signature-index",
        "version": 1,
        "signatures": [
            {"path": "../../etc/passwd", "base_model": "org/base", "sketch_id": SPEC.sketch_id, "tokens": "12x"},
            {
                "path": ".fisher_signatures/a.safetensors",
                "base_model": "org/base\x1b]0;pwned\x07",
                "sketch_id": SPEC.sketch_id,
                "tokens": 1e400,
            },
        ],
    }
    hf_api.upload_file(
        path_or_fileobj=json.dumps({"base_model_name_or_path": "org/base"}).encode(),
        path_in_repo="adapter_config.json",
        repo_id="evil/adapter",
    )
    hf_api.upload_file(
        path_or_fileobj=json.dumps(hostile_index).replace("Infinity", "1e400").encode(),
        path_in_repo=".fisher_signatures/index.json",
        repo_id="evil/adapter",
    )
    hf_api.create_repo("evil/deep")
    hf_api.upload_file(
        path_or_fileobj=json.dumps({"base_model_name_or_path": "org/base"}).encode(),
        path_in_repo="adapter_config.json",
        repo_id="evil/deep",
    )
    hf_api.upload_file(
        path_or_fileobj=b"[" * 100_000 + b"]" * 100_000,
        path_in_repo=".fisher_signatures/index.json",
        repo_id="evil/deep",
    )
    selection = select_adapter(world["target"], [str(good), "evil/adapter", "evil/deep", str(weak)])
    assert [row.candidate for row in selection.ranking] == [str(good), str(weak)]
    assert selection.best.provenance == (
        "signed by the repo; unverifiable (no dataset revision recorded for "
        "org/task-1: the rows it was made from are not pinned)"
    )
    assert "signed by the repo; unverifiable" in selection.table()
    reasons = {skip.candidate: skip.reason for skip in selection.skipped}
    assert set(reasons) == {"evil/adapter", "evil/deep"}
    assert all("\x1b" not in reason and "\x07" not in reason for reason in reasons.values())


def test_control_characters_never_reach_a_terminal_or_a_card(world, hub, hf_api, hf_hub_cache, capsys, tmp_path):
    from test_hub import cli

    escape = "\x1b[2J\x1b]0;pwned\x07\u202e"
    controls = "\x1b\x07\u202e"
    hostile = Signature.from_bytes(forged(world["good"], dataset=f"org/pets{escape}", base_model=f"org/base{escape}"))
    hf_api.create_repo("org/pets", repo_type="dataset")
    push_signature(hostile, "datasets/org/pets")
    files = hub.files("org/pets", "dataset")
    assert all(
        char not in files["README.md"].decode() + files[".fisher_signatures/index.json"].decode() for char in controls
    )
    # a file put there by other tools, its header holding the raw characters
    hf_api.upload_file(
        path_or_fileobj=hostile.to_bytes(),
        path_in_repo=".fisher_signatures/raw.safetensors",
        repo_id="org/pets",
        repo_type="dataset",
    )
    capsys.readouterr()
    assert cli("list", "datasets/org/pets") == 0
    out = capsys.readouterr().out
    assert "raw.safetensors" in out and "org/base" in out and all(char not in out for char in controls)


def test_a_non_lora_adapter_is_skipped_with_its_type(world, hub, hf_api, hf_hub_cache, tmp_path):
    """Adapters are read with peft.PeftConfig: an IA3 adapter (local or on the Hub) is not ranked as a LoRA."""
    from peft import IA3Config, get_peft_model
    from fisherhub.testing.tiny_models import tiny_causal_lm

    base = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64)
    base.config._name_or_path = "org/base"
    ia3 = get_peft_model(base, IA3Config(target_modules=["k_proj", "down_proj"], feedforward_modules=["down_proj"]))
    ia3.save_pretrained(tmp_path / "ia3")
    push_signature(world["weak"], tmp_path / "ia3")
    hf_api.create_repo("org/ia3")
    hf_api.upload_folder(folder_path=str(tmp_path / "ia3"), repo_id="org/ia3")
    good = _adapter(tmp_path / "good", world["good"])
    selection = select_adapter(world["target"], [str(tmp_path / "ia3"), "org/ia3", str(good)])
    assert [row.candidate for row in selection.ranking] == [str(good)]
    reasons = {skip.candidate: skip.reason for skip in selection.skipped}
    assert set(reasons) == {str(tmp_path / "ia3"), "org/ia3"}
    assert all(reason.startswith("adapter type IA3: only LORA adapters are ranked") for reason in reasons.values())


def test_non_regular_and_oversized_signature_files_are_skipped(world, tmp_path, monkeypatch):
    import os

    import fisherhub.core.signature as signature_module

    good = _adapter(tmp_path / "good", world["good"])
    fifo = _adapter(tmp_path / "fifo", world["weak"])
    [file] = (fifo / ".fisher_signatures").glob("*.safetensors")
    file.unlink()
    os.mkfifo(file)  # opening it would block forever
    large = _adapter(tmp_path / "large", world["weak"])
    [file] = (large / ".fisher_signatures").glob("*.safetensors")
    file.write_bytes(file.read_bytes() + b"\0" * 100)
    monkeypatch.setattr(signature_module, "MAX_SIGNATURE_BYTES", len(world["good"].to_bytes()))
    selection = select_adapter(world["target"], [str(fifo), str(large), str(good)])
    assert [row.candidate for row in selection.ranking] == [str(good)]
    reasons = {skip.candidate: skip.reason for skip in selection.skipped}
    assert "not a regular file" in reasons[str(fifo)] or "no signature" in reasons[str(fifo)]
    assert "more than a signature has" in reasons[str(large)]


def test_an_oversized_remote_signature_is_skipped_without_being_downloaded(
    world, hub, hf_api, hf_hub_cache, tmp_path, monkeypatch
):
    """Issue 23 leftover: a Hub signature file was size-checked only once downloaded. Its size is asked for
    first (HEAD) and a file over the limit is refused unread; a listing that gives sizes marks it unread."""
    import fisherhub.core.signature as signature_module
    from fisherhub.hub import list_signatures, load_signature

    good = _adapter(tmp_path / "good", world["good"])
    large = _adapter(tmp_path / "large", world["weak"])
    [file] = (large / ".fisher_signatures").glob("*.safetensors")
    file.write_bytes(file.read_bytes() + b"\0" * 100)
    hf_api.create_repo("org/large")
    hf_api.upload_folder(folder_path=str(large), repo_id="org/large")
    monkeypatch.setattr(signature_module, "MAX_SIGNATURE_BYTES", len(world["good"].to_bytes()))

    def file_reads() -> list[str]:
        return [method for method, path, _ in hub.requests if path.endswith(f"/.fisher_signatures/{file.name}")]

    hub.requests.clear()
    selection = select_adapter(world["target"], ["org/large", str(good)])
    assert [row.candidate for row in selection.ranking] == [str(good)]
    [skipped] = selection.skipped
    assert skipped.candidate == "org/large"
    assert (
        f"{file.stat().st_size:,} bytes, more than a signature has" in skipped.reason
        and "not downloaded" in skipped.reason
    )
    assert file_reads() == ["HEAD"]  # its size, asked for once; never a GET
    hub.requests.clear()
    with pytest.raises(SignatureFileError, match="more than a signature has .*: not downloaded"):
        load_signature(f"org/large:.fisher_signatures/{file.name}")
    [info] = list_signatures("org/large")  # repo_info with file sizes: the file is not even opened
    limit = len(world["good"].to_bytes())
    assert info.problem.endswith(f"more than a signature has ({limit:,}): not read")
    assert info.base_model == "org/base"  # described by its index entry
    assert file_reads() == ["HEAD"]  # the load's; the listing read nothing of the file
