"""The second stage under hostile adapters (issue 37, items 1 and 2, and the second stage's own robustness): an
adapter whose weights are NaN, that has no weights file, is of another base model or adapter type, is larger than
the stated bound, whose loading raises, or whose loss is not finite is skipped with its reason while the others
are measured, is never the pick, and leaves the base model as it was; when none can be measured the error says
why for each. Tiny LoRA adapters in local folders (and on the local Hub server), each a copy of a trained one
with one thing broken, carrying the same signature, so the first stage ranks the broken copy first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_selection import VOCAB_SIZE, domain_texts
from test_selection_rerank import signed_lora_folders

from fisherhub.cli import main
from fisherhub.selection import select_adapter
from fisherhub.selection.errors import Skip, UnmeasurableAdaptersError
from fisherhub.selection.peft_loading import default_max_adapter_bytes
from fisherhub.selection.rerank import measure_adapter
from fisherhub.selection.rows import AdapterLocation
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

WEIGHTS = "adapter_model.safetensors"
#: a reason of each kind of broken adapter, as the selection gives it
REASONS = {
    "nan": "second stage: its weights hold NaN or inf",
    "no-weights": "second stage: no adapter weights: the folder has neither adapter_model.safetensors nor "
    "adapter_model.bin",
    "huge": "second stage: adapter_model.safetensors is 1,048,576 bytes, more than the 98,944 an adapter may have here",
    "wrong-shapes": "second stage: peft cannot load it (RuntimeError: ",
    "overflow": "second stage: its loss on the target is not finite",
}


def _edit_weights(folder: Path, edit) -> None:
    tensors = load_file(folder / WEIGHTS)
    save_file({name: edit(name, tensor) for name, tensor in tensors.items()}, folder / WEIGHTS)


def _broken_copy(good: Path, folder: Path, kind: str) -> Path:
    """A copy of the adapter folder ``good`` (its signature too) with one thing broken."""
    shutil.copytree(good, folder)
    if kind == "nan":
        _edit_weights(folder, lambda name, t: torch.full_like(t, float("nan")) if "lora_B" in name else t)
    elif kind == "no-weights":
        (folder / WEIGHTS).unlink()
    elif kind == "huge":
        with open(folder / WEIGHTS, "wb") as handle:
            handle.truncate(2**20)  # larger than the tiny base model's 4 bytes per parameter
    elif kind == "wrong-shapes":
        _edit_weights(folder, lambda name, t: torch.zeros(3, 5))
    elif kind == "overflow":  # finite weights whose product overflows float32 on the way to the logits
        _edit_weights(folder, lambda name, t: t * 1e30 if "lora_B" in name else t)
    elif kind == "other-base":
        config = json.loads((folder / "adapter_config.json").read_text())
        (folder / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "someone/else"}))
    return folder


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny base model (also saved as a folder, for the CLI), a trained LoRA folder per domain with its training
    data's signature, a broken copy of the target domain's adapter per kind, an IA3 adapter, and the target."""
    from peft import IA3Config, get_peft_model

    folder = tmp_path_factory.mktemp("hostile")
    base = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    base.requires_grad_(False)
    tokenizer = tiny_tokenizer(VOCAB_SIZE)
    base.save_pretrained(folder / "base")
    tokenizer.save_pretrained(folder / "base")
    good = signed_lora_folders(base, tokenizer, folder, 2)
    broken = {kind: _broken_copy(good[0], folder / kind, kind) for kind in [*REASONS, "other-base"]}
    ia3 = get_peft_model(
        tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE),
        IA3Config(target_modules=["q_proj"], feedforward_modules=[]),
    )
    ia3.save_pretrained(folder / "ia3")
    shutil.copytree(good[0] / ".fisher_signatures", folder / "ia3" / ".fisher_signatures")
    broken["ia3"] = folder / "ia3"
    target = domain_texts(0, 40, seed=999)
    data = folder / "target.jsonl"
    data.write_text("".join(json.dumps({"text": text}) + "\n" for text in target))
    return {
        "base": base,
        "tokenizer": tokenizer,
        "good": good,
        "broken": broken,
        "target": target,
        "data": data,
        "folder": folder,
    }


def select(world, candidates, **options):
    return select_adapter(
        world["target"], [str(c) for c in candidates], model=world["base"], tokenizer=world["tokenizer"], **options
    )


def lora_layers(model) -> list:
    return [name for name, module in model.named_modules() if hasattr(module, "lora_A") or hasattr(module, "ia3_l")]


def base_state(model) -> tuple[dict[str, torch.Tensor], dict[str, bool]]:
    tensors = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    return tensors, {name: parameter.requires_grad for name, parameter in model.named_parameters()}


def assert_same_base(model, before: tuple[dict[str, torch.Tensor], dict[str, bool]]) -> None:
    """No PEFT layer left, the same tensors with the same values, the same ``requires_grad`` flags."""
    tensors, flags = before
    after = model.state_dict()
    assert lora_layers(model) == [] and not hasattr(model, "peft_config")
    assert list(after) == list(tensors) and all(torch.equal(after[name], tensors[name]) for name in tensors)
    assert {name: parameter.requires_grad for name, parameter in model.named_parameters()} == flags


def cli(world, *candidates, extra=()):
    return main(
        [
            "select",
            str(world["data"]),
            *map(str, candidates),
            "--base-model",
            str(world["folder"] / "base"),
            *extra,
        ]
    )


# -- item 1: a NaN adapter never wins the second stage ---------------------------------------------------------
def test_a_nan_adapter_is_skipped_never_the_pick(world):
    nan, good = world["broken"]["nan"], world["good"]
    assert select(world, [nan, *good], rerank=0).best.candidate == str(nan)  # the first stage alone would pick it
    before = base_state(world["base"])
    selection = select(world, [nan, *good], rerank=2)
    assert selection.best.candidate == str(good[0])
    assert str(nan) not in [row.candidate for row in selection.ranking]
    assert [m.candidate for m in selection.rerank.measured] == [str(g) for g in good]  # the next one measured instead
    assert all(torch.isfinite(torch.tensor([m.loss, m.stderr, m.gain])).all() for m in selection.rerank.measured)
    reasons = {s.candidate: s.reason for s in selection.skipped}
    assert reasons[str(nan)].startswith(REASONS["nan"])
    assert "nan ±" not in selection.table() and "± nan" not in selection.table()
    assert_same_base(world["base"], before)


@pytest.mark.usefixtures("wide_terminal")
def test_cli_a_nan_adapter_is_skipped_never_the_pick(world, capsys):
    nan, good = world["broken"]["nan"], world["good"]
    assert cli(world, nan, *good, extra=["--rerank", "2"]) == 0
    captured = capsys.readouterr()
    assert f"best: {good[0]} (target loss " in captured.out
    assert f"  {nan}: {REASONS['nan']}" in captured.out and "nan ± nan" not in captured.out
    assert "Traceback" not in captured.err


# -- item 2: a local adapter folder without its weights file ---------------------------------------------------
def test_a_folder_without_weights_is_skipped_with_its_reason(world):
    empty, good = world["broken"]["no-weights"], world["good"]
    selection = select(world, [empty, *good], rerank=2)
    assert selection.best.candidate == str(good[0])
    assert [m.candidate for m in selection.rerank.measured] == [str(g) for g in good]
    reasons = {s.candidate: s.reason for s in selection.skipped}
    assert reasons[str(empty)] == REASONS["no-weights"] + " (save the adapter with PeftModel.save_pretrained)"
    from fisherhub.core.errors import InputError

    with pytest.raises(InputError, match=r"cannot load .*no-weights: no adapter weights"):
        select(world, [empty, *good], rerank=0).load(world["base"])  # no second stage: loading it says so too


def test_cli_a_folder_without_weights_is_skipped_with_its_reason(world, capsys):
    empty, good = world["broken"]["no-weights"], world["good"]
    assert cli(world, empty, *good, extra=["--rerank", "2", "--wide"]) == 0  # one line per reason
    captured = capsys.readouterr()
    assert f"  {empty}: {REASONS['no-weights']}" in captured.out and f"best: {good[0]} (target loss " in captured.out
    assert "HFValidationError" not in captured.err and "Traceback" not in captured.err


# -- the second stage's own robustness ------------------------------------------------------------------------
@pytest.mark.usefixtures("wide_terminal")
def test_each_broken_adapter_is_skipped_with_its_reason_while_the_rest_are_measured(world):
    broken, good = world["broken"], world["good"]
    before = base_state(world["base"])
    kinds = list(REASONS)
    selection = select(world, [*(broken[kind] for kind in kinds), *good], rerank=2)
    assert [m.candidate for m in selection.rerank.measured] == [str(g) for g in good]
    assert selection.best.candidate == str(good[0]) and selection.verdict.geometry == "measured loss"
    reasons = {s.candidate: s.reason for s in selection.skipped}
    for kind in kinds:
        assert reasons[str(broken[kind])].startswith(REASONS[kind]), (kind, reasons[str(broken[kind])])
    assert {row.candidate for row in selection.ranking} == {str(g) for g in good}
    assert f"{len(kinds)} more tried and skipped" in selection.table()
    assert_same_base(world["base"], before)


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("other-base", r"other base model: the adapter is for 'someone/else', not 'tester/tiny-llama'"),
        ("ia3", r"adapter type IA3: only LORA adapters are ranked"),
        ("nan", r"its weights hold NaN or inf \(\d+ tensor\(s\), e\.g\. .*lora_B"),
        ("no-weights", r"no adapter weights"),
        ("huge", r"1,048,576 bytes, more than the 98,944 an adapter may have here \(by default its base model's"),
        ("wrong-shapes", r"peft cannot load it \(RuntimeError: .*size mismatch"),
        ("overflow", r"its loss on the target is not finite"),
    ],
)
def test_measure_adapter_skips_with_the_reason_and_gives_the_base_model_back(world, kind, reason):
    """The one place a candidate is loaded and measured, on its own (``rerank`` and any other schedule call it)."""
    from fisherhub.data.batches import Document, collate

    model, tokenizer = world["base"], world["tokenizer"]
    assert default_max_adapter_bytes(model) == 98_944
    documents = [Document(i, ids, ids) for i, ids in enumerate(tokenizer(world["target"][:4])["input_ids"])]
    batches = [collate(documents, tokenizer.pad_token_id or 0, len(documents))]
    model.lm_head.weight.requires_grad_(True)  # a flag peft turns off while an adapter is on
    try:
        before = base_state(model)
        with pytest.raises(Skip, match=reason):
            measure_adapter(model, batches, AdapterLocation(str(world["broken"][kind])), base_model="tester/tiny-llama")
        assert_same_base(model, before)
        losses = measure_adapter(model, batches, AdapterLocation(str(world["good"][0])), base_model="tester/tiny-llama")
        assert torch.isfinite(losses.nll).all() and len(losses.nll) == 4
        assert_same_base(model, before)
    finally:
        model.lm_head.weight.requires_grad_(False)


def test_an_adapter_whose_forward_pass_fails_is_skipped(world, monkeypatch):
    from fisherhub.selection.target_losses import TargetLosses

    measured_under = TargetLosses.losses

    def failing_under_an_adapter(target, model):
        if hasattr(model, "peft_config"):
            raise RuntimeError("an adapter layer failed " + "at length " * 100)
        return measured_under(target, model)

    monkeypatch.setattr(TargetLosses, "losses", failing_under_an_adapter)
    before = base_state(world["base"])
    with pytest.raises(UnmeasurableAdaptersError, match=r"it fails on the target's documents \(RuntimeError: an "):
        select(world, world["good"], rerank=2)
    assert_same_base(world["base"], before)


@pytest.mark.usefixtures("wide_terminal")
def test_a_larger_bound_lets_a_large_adapter_through_to_the_next_check(world, capsys):
    huge, good = world["broken"]["huge"], world["good"]
    selection = select(world, [huge, *good], rerank=2, max_adapter_bytes=2**21)
    reason = {s.candidate: s.reason for s in selection.skipped}[str(huge)]
    assert reason.startswith("second stage: peft cannot load it")  # past the size check: the file is no safetensors
    assert cli(world, huge, *good, extra=["--rerank", "2", "--max-adapter-mb", "2"]) == 0
    assert f"  {huge}: second stage: peft cannot load it" in capsys.readouterr().out
    from fisherhub.core.errors import InputError

    with pytest.raises(InputError, match="max_adapter_bytes must be a positive int"):
        select(world, good, rerank=2, max_adapter_bytes=0)


def test_when_no_adapter_can_be_measured_the_error_says_why_for_each(world, capsys):
    broken = world["broken"]
    kinds = ["nan", "no-weights", "huge", "wrong-shapes"]
    before = base_state(world["base"])
    with pytest.raises(UnmeasurableAdaptersError) as raised:
        select(world, [broken[kind] for kind in kinds], rerank=2)
    message = str(raised.value)
    assert message.startswith("none of the 4 adapter(s) of the second stage could be measured on the target:")
    for kind in kinds:
        assert f"  - {broken[kind]}: {REASONS[kind]}" in message
    assert "rerank=0" in message
    assert_same_base(world["base"], before)
    assert cli(world, *(broken[kind] for kind in kinds), extra=["--rerank", "2"]) == 1
    captured = capsys.readouterr()
    assert "\nerror: none of the 4 adapter(s) of the second stage could be measured" in f"\n{captured.err}"
    assert "best:" not in captured.out and "Traceback" not in captured.err


def test_hub_adapters_that_are_broken_are_skipped_too(world, hub, hf_api):
    """The same checks on Hub repos: the weights file is looked up with a HEAD request, the NaN one loaded."""
    repos = {}
    for name, folder in [
        ("good", world["good"][0]),
        ("nan", world["broken"]["nan"]),
        ("empty", world["broken"]["no-weights"]),
    ]:
        repos[name] = f"tester/hostile-{name}"
        hf_api.create_repo(repos[name])
        hf_api.upload_folder(repo_id=repos[name], folder_path=folder)
    selection = select(world, [repos["nan"], repos["empty"], repos["good"]], rerank=3)
    assert [m.candidate for m in selection.rerank.measured] == [repos["good"]]
    assert selection.best.candidate == repos["good"]
    reasons = {s.candidate: s.reason for s in selection.skipped}
    assert reasons[repos["nan"]].startswith(REASONS["nan"])
    assert reasons[repos["empty"]] == (
        "second stage: no adapter weights: the repo has neither adapter_model.safetensors nor adapter_model.bin"
    )


def test_the_default_second_stage_keeps_the_signatures_ranking_when_no_adapter_can_be_measured(world):
    """A data target's default second stage tries the adapters; when none can be measured the first stage's
    ranking stands and its verdict says why; asked for explicitly, the second stage refuses instead."""
    nan, empty = world["broken"]["nan"], world["broken"]["no-weights"]
    source = next((world["good"][0] / ".fisher_signatures").glob("*.safetensors"))
    first = select(world, [nan, empty, source], rerank=0)
    selection = select(world, [nan, empty, source])
    assert [row.candidate for row in selection.ranking] == [row.candidate for row in first.ranking]
    assert selection.rerank is None and selection.skipped == first.skipped
    message = selection.verdict.message
    assert message.startswith(first.verdict.message) and "could measure none of the 2 adapters it tried" in message
    reasons = [REASONS[kind].removeprefix("second stage: ") for kind in ("nan", "no-weights")]
    assert all(reason in message for reason in reasons) and "ranked by signatures only" in message
    with pytest.raises(UnmeasurableAdaptersError, match="none of the 2 adapter"):
        select(world, [nan, empty, source], rerank="halving")  # asked for: refused, not passed over
