"""select_adapter end to end, offline: a tiny random Llama on the local Hub server, three LoRA adapters
trained with peft on three source domains whose right answer is known, a target close to one of them.

The domains share their inputs and differ only in how the next token couples to the current one: a
document is pairs ``x f_k(x)`` with x drawn uniformly from one block of characters and f_k a different
bijection onto a second block for each domain k. Every domain sees the same tokens equally often, so the
base model's activations (and the marginal of its errors) are alike across domains: S_a and S_e cannot
tell them apart (the witness case, SPEC §5), while the Fisher alignment, which sees the coupling of a and
e, can.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import time

import pytest
import torch
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

from fisherhub import Signature
from fisherhub.core.errors import InputError, TooFewDocumentsError
from fisherhub.selection import (
    NoCompatibleCandidatesError,
    Selection,
    select_adapter,
)
from fisherhub.pipeline.loop import sketch_texts

VOCAB_SIZE = 96
INPUTS = "abcdefghijklmnop"
OUTPUTS = "ABCDEFGHIJKLMNOP"
DOMAINS = 3
SHIFT = 5  # f_k(x_i) = OUTPUTS[(i + SHIFT k) mod 16]: the domains disagree on every input
M = 1024
TRAIN_STEPS, TRAIN_BATCH = 30, 8
SIGNED_DOCUMENTS = 80  # the signature summarizes a sample of the training data
BASE = "tester/selection-tiny-llama"


def domain_texts(domain: int, count: int, seed: int, pairs: int = 12) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        inputs = [rng.randrange(len(INPUTS)) for _ in range(pairs)]
        texts.append("".join(INPUTS[i] + OUTPUTS[(i + SHIFT * domain) % len(OUTPUTS)] for i in inputs))
    return texts


def adapter_repo(domain: int) -> str:
    return f"tester/selection-lora-{domain}"


def dataset_repo(domain: int) -> str:
    return f"tester/selection-domain-{domain}"


def train_lora(base, tokenizer, texts: list[str]):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj", "up_proj", "down_proj"])
    model = get_peft_model(copy.deepcopy(base), config)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for step in range(TRAIN_STEPS):
        batch = tokenizer(texts[step * TRAIN_BATCH : (step + 1) * TRAIN_BATCH], return_tensors="pt")
        model(**batch, labels=batch["input_ids"]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def target_loss(model, tokenizer, texts: list[str]) -> float:
    batch = tokenizer(texts, return_tensors="pt")
    with torch.no_grad():
        return float(model(**batch, labels=batch["input_ids"]).loss)


def card(**metadata) -> str:
    return "---\n" + json.dumps(metadata) + "\n---\n# a LoRA adapter of the selection test\n"


@pytest.fixture(scope="module")
def world(hub_server, tmp_path_factory):
    """Base model on the Hub; per domain a LoRA adapter repo (card: base_model, datasets) with its training
    data's signature: in the adapter repo for domains 0 and 1, in the dataset repo for domain 2."""
    from huggingface_hub import HfApi

    from fisherhub.hub import push_signature

    started = time.perf_counter()
    api = HfApi()
    folder = tmp_path_factory.mktemp("selection")
    base = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    tokenizer = tiny_tokenizer(VOCAB_SIZE)
    base.save_pretrained(folder / "base")
    tokenizer.save_pretrained(folder / "base")
    api.create_repo(BASE, exist_ok=True)
    api.upload_folder(repo_id=BASE, folder_path=folder / "base")
    folders = []
    for domain in range(DOMAINS):
        texts = domain_texts(domain, TRAIN_STEPS * TRAIN_BATCH, seed=100 + domain)
        adapter_folder = folder / f"lora-{domain}"
        train_lora(base, tokenizer, texts).save_pretrained(adapter_folder)
        adapter_card = card(base_model=BASE, datasets=[dataset_repo(domain)], library_name="peft")
        (adapter_folder / "README.md").write_text(adapter_card)
        metadata = {"base_model": BASE, "dataset": dataset_repo(domain)}
        signature = sketch_texts(
            texts[:SIGNED_DOCUMENTS], base, tokenizer, m=M, reflection=True, metadata=metadata
        )  # one study, targets sketched like= these
        api.create_repo(adapter_repo(domain), exist_ok=True)
        api.upload_folder(repo_id=adapter_repo(domain), folder_path=adapter_folder)
        if domain < 2:
            push_signature(signature, adapter_repo(domain), repo_type="model")
            (adapter_folder / ".fisher_signatures").mkdir()
            signature.save(adapter_folder / ".fisher_signatures" / "training-data.safetensors")
        else:
            api.create_repo(dataset_repo(domain), repo_type="dataset", exist_ok=True)
            push_signature(signature, dataset_repo(domain), repo_type="dataset")
        folders.append(adapter_folder)
    target = domain_texts(0, 40, seed=999)
    print(f"\nselection world built in {time.perf_counter() - started:.1f} s")
    return {"base": base, "tokenizer": tokenizer, "folders": folders, "target": target, "tmp": folder}


@pytest.fixture(scope="module")
def target_signature(world) -> Signature:
    like = Signature.load(world["folders"][0] / ".fisher_signatures" / "training-data.safetensors")
    return sketch_texts(world["target"], world["base"], world["tokenizer"], like, metadata={"base_model": BASE})


def within_error_bars(rows, tolerance: float = 2.0) -> bool:
    """Every pair of scores differs by less than ``tolerance`` combined standard errors."""
    return all(abs(a.score - b.score) < tolerance * (a.stderr**2 + b.stderr**2) ** 0.5 for a in rows for b in rows)


def test_texts_target_discovers_selects_and_loads(world):
    """Discovery by base model, a texts target sketched under the base model loaded by id from the Hub,
    the right source first, the witness (S_a cannot tell), and the loaded adapters' losses on the target."""
    from peft import PeftModel

    selection = select_adapter(world["target"], base_model=BASE, load=True, top_k=DOMAINS)
    by_activation = selection.ranked_by("activation")
    print(selection.table(), "\nS_a:", [(row.candidate, round(row.score, 4)) for row in by_activation])
    assert isinstance(selection, Selection)
    assert selection.best.candidate == adapter_repo(0)
    assert sorted(row.candidate for row in selection.ranking) == [adapter_repo(d) for d in range(DOMAINS)]
    sources = {row.candidate: row.signature_source for row in selection.ranking}
    assert sources[adapter_repo(0)].startswith(f"{adapter_repo(0)}@")
    assert sources[adapter_repo(2)].startswith(f"datasets/{dataset_repo(2)}@")  # from the card's `datasets:`
    best, runner_up = selection.ranking[:2]
    assert best.score - runner_up.score > 3 * (best.stderr**2 + runner_up.stderr**2) ** 0.5
    assert within_error_bars(by_activation)  # the activation-only ranking cannot tell

    model = selection.model
    assert isinstance(model, PeftModel)
    assert set(model.peft_config) == {f"selection_lora_{d}" for d in range(DOMAINS)}
    assert model.active_adapter == "selection_lora_0"
    with model.disable_adapter():
        base_loss = target_loss(model, world["tokenizer"], world["target"])
    losses = {}
    for name in model.peft_config:
        model.set_adapter(name)
        losses[name] = target_loss(model, world["tokenizer"], world["target"])
    print("target loss: base", round(base_loss, 3), {name: round(loss, 3) for name, loss in losses.items()})
    assert min(losses, key=losses.get) == "selection_lora_0", losses
    assert losses["selection_lora_0"] < base_loss


def test_signature_target_local_folders_and_scores(world, target_signature, tmp_path):
    """A Signature target against local adapter folders (signature in the folder, or via the card's dataset
    repo); the three scores; the table and the bar chart."""
    target = target_signature
    selection = select_adapter(target, world["folders"])
    assert selection.best.candidate == str(world["folders"][0])
    assert selection.choice is not None and selection.score == selection.choice.geometry  # auto by default
    assert select_adapter(target, world["folders"], score="fisher").choice is None
    sources = {row.candidate: row.signature_source for row in selection.ranking}
    assert sources[str(world["folders"][2])].startswith(f"datasets/{dataset_repo(2)}@")  # the card names it
    by_activation = select_adapter(target, world["folders"], score="activation")
    activations = sorted((row.activation for row in selection.ranking), reverse=True)
    assert [row.score for row in by_activation.ranking] == activations
    assert within_error_bars(by_activation.ranking)
    by_error = selection.ranked_by("error")
    assert [row.score for row in by_error] == sorted((row.error for row in selection.ranking), reverse=True)

    table = selection.table()
    assert "Fisher alignment A" in table and "S_a" in table and "ρ" in table
    assert all(str(folder) in table for folder in world["folders"])
    path = selection.plot(tmp_path / "selection.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    peft_model = selection.load(copy.deepcopy(world["base"]))
    assert list(peft_model.peft_config) == ["lora_0"]


def test_dataset_target_with_given_model(world):
    import datasets

    target = datasets.Dataset.from_dict({"text": world["target"]})
    selection = select_adapter(
        target, [adapter_repo(2), adapter_repo(0)], base_model=BASE, model=world["base"], tokenizer=world["tokenizer"]
    )
    assert [row.candidate for row in selection.ranking] == [adapter_repo(0), adapter_repo(2)]
    assert selection.targets[selection.best.alignment.sketch_id].num_documents == len(world["target"])


def test_cli_select(world, target_signature, tmp_path, capsys):
    """A signature file target (plus a candidate that is not an adapter, and a chart), then a data file target
    sketched under the base model loaded by id."""
    from fisherhub.cli import main

    target_signature.save(tmp_path / "target.safetensors")
    png = tmp_path / "bars.png"
    adapters = [adapter_repo(d) for d in range(DOMAINS)]
    target_file = str(tmp_path / "target.safetensors")
    code = main(["select", target_file, *adapters, BASE, "--base-model", BASE, "--plot", str(png)])
    out = capsys.readouterr().out
    assert code == 0
    assert out.index(adapter_repo(0)) < min(out.index(adapter_repo(1)), out.index(adapter_repo(2)))
    assert f"{BASE}: not an adapter" in out and f"best: {adapter_repo(0)}" in out
    assert png.read_bytes()[:4] == b"\x89PNG"

    data_file = tmp_path / "target.jsonl"
    data_file.write_text("".join(json.dumps({"body": text}) + "\n" for text in world["target"]))
    code = main(
        ["select", str(data_file), *adapters, "--base-model", BASE, "--text-column", "body", "--top-k", "1", "--wide"]
    )
    out = capsys.readouterr().out
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith(("1 ", "2 "))]
    assert f"best: {adapter_repo(0)}" in out and rows == [rows[0]] and adapter_repo(0) in rows[0]  # one row
    # the default second stage for a data target: measured, and P(best) of every candidate
    assert f"verdict: {adapter_repo(0)} has the lowest loss on the target" in out and "clearly better" in out
    assert "P(best of all 3 candidates)" in " ".join(out.split())


# -- bad input ----------------------------------------------------------------------------------------
def test_no_candidates(world, target_signature):
    with pytest.raises(InputError, match="no candidates"):
        select_adapter(target_signature, [])
    with pytest.raises(InputError, match="lists no adapters of 'tester/no-such-base'"):
        select_adapter(target_signature, None, base_model="tester/no-such-base")


def test_none_compatible_lists_each_reason(world, target_signature, tmp_path):
    other_base = tmp_path / "other-base-adapter"
    other_base.mkdir()
    (other_base / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/other-model"}))
    unsigned = tmp_path / "unsigned-adapter"
    unsigned.mkdir()
    (unsigned / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": BASE}))
    not_adapter = tmp_path / "plain-folder"
    not_adapter.mkdir()
    other_sketch = sketch_texts(
        world["target"], world["base"], world["tokenizer"], m=256, reflection=False, metadata={"base_model": BASE}
    )
    with pytest.raises(NoCompatibleCandidatesError) as raised:
        candidates = [other_base, unsigned, not_adapter, BASE, "tester/no-such-adapter", world["folders"][0]]
        select_adapter(other_sketch, candidates)
    message = str(raised.value)
    reasons = {s.candidate: s.reason for s in raised.value.skipped}
    assert "other base model" in reasons[str(other_base)] and "org/other-model" in reasons[str(other_base)]
    assert "no signature" in reasons[str(unsigned)]
    assert "not an adapter" in reasons[str(not_adapter)]
    assert "not an adapter" in reasons[BASE]  # a model repo without adapter_config.json
    assert "repository not found" in reasons["tester/no-such-adapter"]
    assert "other sketch id" in reasons[str(world["folders"][0])] and "'m': " not in message  # fields named plainly
    assert "m: target 256 vs 1024" in reasons[str(world["folders"][0])]
    assert all(reason in message for reason in reasons.values())


def test_candidate_repo_without_adapter(world, target_signature):
    with pytest.raises(NoCompatibleCandidatesError, match=f"{BASE}: not an adapter"):
        select_adapter(target_signature, [BASE])


def test_signature_files_rank_as_source_datasets(world, target_signature, tmp_path):
    """Local signature files of source datasets are candidates like dataset repos: ranked, with no adapter."""
    files = [world["folders"][domain] / ".fisher_signatures" / "training-data.safetensors" for domain in (1, 0)]
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"not a signature")
    selection = select_adapter(target_signature, [*files, broken])
    assert [row.candidate for row in selection.ranking] == [str(files[1]), str(files[0])]
    assert all(row.adapter is None and row.signature_source == row.candidate for row in selection.ranking)
    assert [skip.candidate for skip in selection.skipped] == [str(broken)]
    assert "unreadable signature" in selection.skipped[0].reason


def test_target_with_too_few_tokens(world):
    with pytest.raises(TooFewDocumentsError, match="target has too few tokens"):
        select_adapter(["aB"], [adapter_repo(0)], base_model=BASE, model=world["base"], tokenizer=world["tokenizer"])


def test_bad_target_and_score(world, target_signature):
    with pytest.raises(InputError, match="target must be"):
        select_adapter(42, [adapter_repo(0)])
    with pytest.raises(InputError, match="score must be one of"):
        select_adapter(target_signature, [adapter_repo(0)], score="cka")


# -- comparability and the base model ---------------------------------------------------------------------
def rotated_pilot(signature: Signature, angle: float) -> Signature:
    """``signature`` with its pilot direction turned by ``angle`` radians (same sketch id, same sketches)."""
    pilot = signature.spec.reflection_tensor.double()
    unit = pilot / pilot.norm()
    other = torch.randn(pilot.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    other = other - (other @ unit) * unit
    angle = torch.tensor(angle, dtype=torch.float64)
    turned = pilot.norm() * (unit * torch.cos(angle) + other / other.norm() * torch.sin(angle))
    return dataclasses.replace(signature, spec=signature.spec.with_reflection(turned.float()))


def adapter_folder(path, base_model: str, signature: Signature | None = None):
    path.mkdir()
    (path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base_model}))
    if signature is not None:
        (path / ".fisher_signatures").mkdir()
        signature.save(path / ".fisher_signatures" / "training-data.safetensors")
    return path


def test_candidate_with_other_pilot_direction_is_skipped(world, target_signature, tmp_path):
    """Same sketch id, pilot direction 0.016 rad off: that candidate is skipped with its reason, the rest ranked."""
    signed = Signature.load(world["folders"][0] / ".fisher_signatures" / "training-data.safetensors")
    turned = rotated_pilot(signed, 0.016)
    assert turned.sketch_id == target_signature.sketch_id
    off = adapter_folder(tmp_path / "pilot-off-adapter", BASE, turned)
    selection = select_adapter(target_signature, [off, *world["folders"][:2]])
    assert [row.candidate for row in selection.ranking] == [str(world["folders"][0]), str(world["folders"][1])]
    reasons = {s.candidate: s.reason for s in selection.skipped}
    assert "pilot" in reasons[str(off)] and "0.016 rad" in reasons[str(off)] and "--like" in reasons[str(off)]


def test_target_file_base_model_wins_in_any_candidate_order(world, target_signature, tmp_path, capsys):
    """A signature file target names its base model; an adapter of another base model listed first does not
    decide it (the CLI passes no --base-model), and the order of candidates does not change the ranking."""
    from fisherhub.cli import main

    target_file = str(tmp_path / "target.safetensors")
    target_signature.save(target_file)
    signed = Signature.load(world["folders"][0] / ".fisher_signatures" / "training-data.safetensors")
    other_signature = dataclasses.replace(signed, metadata={"base_model": "org/other-model"})
    other = str(adapter_folder(tmp_path / "other-base-adapter", "org/other-model", other_signature))
    adapters = [adapter_repo(d) for d in range(DOMAINS)]
    rankings = []
    for candidates in ([other, *adapters], [*adapters[::-1], other]):
        selection = select_adapter(target_file, candidates)
        assert selection.base_model == BASE
        assert "other base model" in {s.candidate: s.reason for s in selection.skipped}[other]
        rankings.append([(row.candidate, row.score) for row in selection.ranking])
    assert rankings[0] == rankings[1] and rankings[0][0][0] == adapter_repo(0)
    assert main(["select", target_file, other, *adapters]) == 0
    assert f"best: {adapter_repo(0)}" in capsys.readouterr().out
