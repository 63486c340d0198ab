"""The second stage of select_adapter (``rerank=k``) on tiny LoRA adapters in local folders: the measured losses
are those of an independent evaluation of each adapter with peft, one adapter is on the base model at a time,
and the measured verdict finds the adapter trained on the target's domain (the witness domains of
``test_selection``, where only the coupling of input and next token tells them apart)."""

from __future__ import annotations

import copy
import gc
import weakref

import pytest
import torch
from test_selection import (
    DOMAINS,
    SIGNED_DOCUMENTS,
    TRAIN_BATCH,
    TRAIN_STEPS,
    VOCAB_SIZE,
    M,
    domain_texts,
    train_lora,
)
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

from fisherhub.core.errors import InputError
from fisherhub.core.registry import DEFAULT_RERANK_BUDGET
from fisherhub.pipeline.loop import sketch_texts
from fisherhub.selection import select_adapter
from fisherhub.selection.peft_loading import adapter_on
from fisherhub.selection.rerank import second_stage_candidates


def signed_lora_folders(base, tokenizer, folder, domains: int) -> list:
    """``folder/lora-<domain>``: a LoRA adapter trained on each of the first ``domains`` domains, its training
    data's signature inside."""
    folders = []
    for domain in range(domains):
        texts = domain_texts(domain, TRAIN_STEPS * TRAIN_BATCH, seed=100 + domain)
        path = folder / f"lora-{domain}"
        train_lora(base, tokenizer, texts).save_pretrained(path)
        (path / ".fisher_signatures").mkdir()
        sketch_texts(texts[:SIGNED_DOCUMENTS], base, tokenizer, m=M, reflection=True).save(
            path / ".fisher_signatures" / "training-data.safetensors"
        )
        folders.append(path)
    return folders


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    """A tiny base model and one LoRA adapter folder per domain, its training data's signature inside."""
    folder = tmp_path_factory.mktemp("rerank")
    base = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    base.requires_grad_(False)
    tokenizer = tiny_tokenizer(VOCAB_SIZE)
    folders = signed_lora_folders(base, tokenizer, folder, DOMAINS)
    return {"base": base, "tokenizer": tokenizer, "folders": folders, "target": domain_texts(0, 40, seed=999)}


def direct_loss(model, tokenizer, texts: list[str]) -> float:
    """Mean NLL per predicted token over the texts, each text on its own (no padding), from the model's own loss."""
    total, tokens = 0.0, 0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]
            total += float(model(input_ids=ids, labels=ids).loss) * (ids.shape[1] - 1)
            tokens += ids.shape[1] - 1
    return total / tokens


def lora_modules(model) -> list[torch.nn.Module]:
    return [module for module in model.modules() if hasattr(module, "lora_A")]


def select(adapters, **options):
    return select_adapter(
        adapters["target"],
        [str(f) for f in adapters["folders"]],
        model=adapters["base"],
        tokenizer=adapters["tokenizer"],
        **options,
    )


def test_measured_losses_equal_a_direct_peft_evaluation(adapters):
    from peft import PeftModel

    selection = select(adapters, rerank=3)
    second = selection.rerank
    assert second.full_passes == pytest.approx(len(second.measured) + 1)  # adapters on every layer: full passes
    assert [m.candidate for m in second.measured] == [
        r.candidate for r in second_stage_candidates(select(adapters).ranking, 3)
    ]
    base_loss = direct_loss(adapters["base"], adapters["tokenizer"], adapters["target"])
    assert second.base_loss == pytest.approx(base_loss, rel=1e-5)
    for measured in second.measured:
        independent = PeftModel.from_pretrained(copy.deepcopy(adapters["base"]), measured.candidate).eval()
        assert measured.loss == pytest.approx(
            direct_loss(independent, adapters["tokenizer"], adapters["target"]), rel=1e-5
        )
        assert measured.gain == pytest.approx(base_loss - measured.loss, rel=1e-5)
        assert 0 < measured.stderr < abs(measured.loss)
    losses = sorted(m.loss for m in second.measured)
    assert losses[1] - losses[0] > 10 * max(m.stderr for m in second.measured)  # the adapters really differ
    assert second.documents == len(adapters["target"])
    assert second.tokens == sum(len(adapters["tokenizer"](t)["input_ids"]) - 1 for t in adapters["target"])
    assert second.seconds > 0
    assert lora_modules(adapters["base"]) == []  # the base model is given back without adapters


@pytest.mark.usefixtures("wide_terminal")
def test_the_measured_verdict_finds_the_adapter_of_the_target_domain(adapters):
    selection = select(adapters, rerank=3)
    assert selection.best.candidate == str(adapters["folders"][0])
    assert selection.verdict.geometry == "measured loss" and selection.verdict.clear
    assert selection.verdict.probability_best > 0.99
    best = selection.rerank.measured[selection.verdict.best]
    assert best.candidate == selection.best.candidate and best.loss == min(m.loss for m in selection.rerank.measured)
    table = selection.table()
    assert "target loss" in table and "gain vs base" in table
    assert "two-stage: first 3 adapters" in table and "first stage:" in table
    assert "lowest loss on the target" in table


def test_one_adapter_in_memory_at_a_time(adapters):
    model = copy.deepcopy(adapters["base"])
    rows = second_stage_candidates(select(adapters).ranking, 3)
    single = None
    previous: list[weakref.ref] = []
    seen = []
    for row in rows:
        with adapter_on(model, row.adapter) as peft_model:
            gc.collect()
            assert all(ref() is None for ref in previous), "an earlier adapter's weights are still alive"
            modules = lora_modules(peft_model)
            names = {name for module in modules for name in module.lora_A}
            assert names == {"rerank"} and len(peft_model.peft_config) == 1
            single = len(modules) if single is None else single
            assert len(modules) == single  # one adapter's worth of LoRA layers, never more
            previous = [weakref.ref(module.lora_A["rerank"].weight) for module in modules]
            seen.append(row.candidate)
            del peft_model, modules  # this loop's own references; leaving the block unloads the adapter
        assert lora_modules(model) == []
    gc.collect()
    assert all(ref() is None for ref in previous)
    assert seen == [row.candidate for row in rows]
    assert lora_modules(model) == []


def test_rerank_zero_keeps_the_signature_ranking_and_a_signature_target_is_refused(adapters):
    plain, zero = select(adapters), select(adapters, rerank=0)
    assert zero.rerank is None and "target loss" not in zero.table()
    assert zero.verdict.message == plain.rerank.first_stage_verdict.message  # the default measures after it
    assert plain.rerank.budget == DEFAULT_RERANK_BUDGET and plain.verdict.geometry == "measured loss"
    signature = next(iter(plain.targets.values()))
    given = select_adapter(signature, [str(f) for f in adapters["folders"]])  # a signature: the first stage only
    assert given.rerank is None and [r.candidate for r in given.ranking] == [r.candidate for r in zero.ranking]
    with pytest.raises(InputError, match="rerank needs the target's data"):
        select_adapter(signature, [str(f) for f in adapters["folders"]], rerank=2)
    for bad in (-1, 1.5, True):
        with pytest.raises(InputError, match="rerank must be a non-negative int"):
            select(adapters, rerank=bad)


@pytest.mark.usefixtures("wide_terminal")
def test_cli_select_rerank(adapters, tmp_path, capsys):
    """``fisherhub select DATA ADAPTERS --rerank 2``: both stages in the table, the measured best and its loss."""
    import json

    from fisherhub.cli import main

    adapters["base"].save_pretrained(tmp_path / "base")
    adapters["tokenizer"].save_pretrained(tmp_path / "base")
    data_file = tmp_path / "target.jsonl"
    data_file.write_text("".join(json.dumps({"body": text}) + "\n" for text in adapters["target"]))
    folders = [str(f) for f in adapters["folders"]]
    code = main(
        [
            "select",
            str(data_file),
            *folders,
            "--base-model",
            str(tmp_path / "base"),
            "--text-column",
            "body",
            "--rerank",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "target loss" in out and "two-stage: first 2 adapters" in out
    assert f"best: {folders[0]} (target loss " in out and "has the lowest loss on the target" in out
    assert (
        main(
            [
                "select",
                str(data_file),
                *folders,
                "--base-model",
                str(tmp_path / "base"),
                "--text-column",
                "body",
                "--rerank",
                "-1",
            ]
        )
        != 0
    )
    assert "rerank must be a non-negative int" in capsys.readouterr().err


def test_rerank_reads_only_the_configs_of_the_adapters_it_means_to_measure(adapters, monkeypatch):
    from fisherhub.selection import rerank as rerank_module

    read, original = [], rerank_module.adapter_config_file
    monkeypatch.setattr(
        rerank_module, "adapter_config_file", lambda path, **kw: read.append(path) or original(path, **kw)
    )
    selection = select(adapters, rerank=1)
    assert len(adapters["folders"]) > 1 and [m.candidate for m in selection.rerank.measured] == read
