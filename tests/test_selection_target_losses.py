"""The target's losses under adapters that share the base model's lower layers (``TargetLosses``): on Llama,
Qwen2 and GPT-2 (tiny random models, LoRA on the top two of four layers) each document's loss equals the PEFT
model's own loss of that document alone; the adapters after the first run none of the layers below theirs; an
adapter on the embeddings or the head, a batch past the memory bound, and a model whose forward pass reads a lower
layer's output out of sequence get the full forward pass, with the same losses."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from peft import LoraConfig, get_peft_model

from fisherhub.data.batches import Batch
from fisherhub.lm.modules import decoder_layers, pass_share
from fisherhub.selection.rerank import measure_adapter
from fisherhub.selection.rows import AdapterLocation
from fisherhub.selection.target_losses import TargetLosses
from fisherhub.testing.tiny_models import tiny_causal_lm

VOCAB, LAYERS, FIRST = 64, 4, 2
TARGETS = {"llama": ["q_proj", "v_proj"], "qwen2": ["q_proj", "v_proj"], "gpt2": ["c_attn"]}


def target_batches() -> list[Batch]:
    """Two right-padded batches of documents of different lengths (padding: attention 0, label −100)."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for start, lengths in ((0, (20, 12, 5)), (3, (9, 17))):
        ids = torch.randint(4, VOCAB, (len(lengths), max(lengths)), generator=generator)
        mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
        labels = ids.masked_fill(mask == 0, -100)
        batches.append(Batch(ids.masked_fill(mask == 0, 0), mask, labels, torch.arange(start, start + len(lengths)), 0))
    return batches


def independent_nll(model, batches) -> torch.Tensor:
    """Σ −log p of each document, evaluated alone (no padding) from the model's own loss."""
    sums = []
    with torch.no_grad():
        for batch in batches:
            for ids, mask in zip(batch.input_ids, batch.attention_mask):
                document = ids[mask.bool()][None]
                sums.append(float(model(input_ids=document, labels=document).loss) * (document.shape[1] - 1))
    return torch.tensor(sums, dtype=torch.float64)


def lora(model, arch: str, seed: int, **options):
    """A random LoRA adapter (B ≠ 0) on the layers from ``FIRST`` up, unless ``options`` say otherwise."""
    torch.manual_seed(seed)
    settings = {"target_modules": TARGETS[arch], "layers_to_transform": list(range(FIRST, LAYERS))} | options
    return get_peft_model(model, LoraConfig(r=4, init_lora_weights=False, **settings)).eval()


def calls_below(layers, first: int) -> list[int]:
    """A counter of the calls of every submodule of the layers below ``first`` (hooks on the submodules run only
    when their layer runs its own forward pass)."""
    counter = [0]
    for layer in layers[:first]:
        for module in list(layer.children()):
            module.register_forward_hook(lambda *args: counter.__setitem__(0, counter[0] + 1))
    return counter


@pytest.mark.parametrize("arch", sorted(TARGETS))
def test_shared_layers_give_each_documents_own_loss_and_run_once(arch):
    model = tiny_causal_lm(arch, tie_word_embeddings=False, vocab_size=VOCAB, num_layers=LAYERS)
    layers = decoder_layers(model)
    assert layers is not None and len(layers) == LAYERS
    batches = target_batches()
    target = TargetLosses(batches)
    base = target.losses(model)
    assert torch.allclose(base.nll, independent_nll(model, batches), rtol=1e-5)
    assert base.tokens.tolist() == [19, 11, 4, 8, 16]
    calls = calls_below(layers, FIRST)
    for seed in range(3):
        peft_model = lora(model, arch, seed)
        before = calls[0]
        losses = target.losses(peft_model)
        assert (calls[0] > before) == (seed == 0)  # the first adapter runs the layers below; the others replay
        assert torch.allclose(losses.nll, independent_nll(peft_model, batches), rtol=1e-5)
        assert not torch.allclose(losses.nll, base.nll, rtol=1e-3)  # the adapter changes the loss
        assert all("forward" not in vars(layer) for layer in layers)  # every layer runs its own forward again
        peft_model.unload()
    assert target._prefix.exact == {FIRST: True} and sorted(target._prefix.hidden[FIRST]) == [0, 1, 2, 3, 4]


def test_a_regrouped_target_shares_what_is_kept_and_measure_adapter_uses_it(tmp_path):
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB, num_layers=LAYERS)
    model.requires_grad_(False)
    batches = target_batches()
    folders = []
    for seed in range(2):
        peft_model = lora(model, "llama", seed)
        peft_model.save_pretrained(tmp_path / f"a{seed}")
        peft_model.unload()
        folders.append(AdapterLocation(str(tmp_path / f"a{seed}")))
    target = TargetLosses(batches)
    first = measure_adapter(model, target, folders[0])
    calls = calls_below(decoder_layers(model), FIRST)
    second = measure_adapter(model, target.regrouped([batches[1]]), folders[1])
    assert calls[0] == 0 and len(second.nll) == 2
    alone = measure_adapter(model, batches, folders[1])  # plain batches: measured alone, the full forward pass
    assert calls[0] > 0
    assert torch.allclose(second.nll, alone.nll[3:], rtol=1e-6) and len(first.nll) == 5
    assert not any(hasattr(module, "lora_A") for module in model.modules())


def rows_below(layers, first: int) -> list[int]:
    """The number of documents of each call of the submodules of the layers below ``first``, which run only when
    their layer runs (the replay's check runs one document)."""
    rows: list[int] = []
    for layer in layers[:first]:
        for module in list(layer.children()):
            module.register_forward_hook(
                lambda module, args, output: rows.append(len(output if torch.is_tensor(output) else output[0]))
            )
    return rows


def test_the_base_models_pass_keeps_the_prefix_for_every_adapter_and_any_grouping_of_its_documents():
    from fisherhub.selection.budgeted import document_subset

    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB, num_layers=LAYERS)
    batches = target_batches()
    target = TargetLosses(batches)
    assert not target.keep_prefix_at(model, [0]) and target.keep_prefix_at(model, [FIRST, 0, FIRST])
    assert target.prefix_layers == (FIRST,)
    target.losses(model)
    assert sorted(target._prefix.hidden[FIRST]) == [0, 1, 2, 3, 4]
    rows = rows_below(decoder_layers(model), FIRST)
    peft_model = lora(model, "llama", 0)
    losses = target.losses(peft_model)
    assert set(rows) == {1}, "the first adapter too replays the base model's layers (the check runs one document)"
    assert target.spent == pytest.approx(5 + 5 * pass_share(model, FIRST))  # the base model's pass, then the share
    expected = independent_nll(peft_model, batches)
    assert torch.allclose(losses.nll, expected, rtol=1e-5)
    regrouped = target.regrouped(document_subset(batches, [4, 0, 2]))  # rows of both batches
    assert torch.allclose(regrouped.losses(peft_model).nll, expected[[0, 2, 4]], rtol=1e-5) and set(rows) == {1}
    ids, mask = batches[1].input_ids, batches[1].attention_mask
    ids = torch.where(mask.bool(), (ids - 3) % (VOCAB - 4) + 4, ids)  # other tokens under the same documents' ids
    changed = [dataclasses.replace(batches[1], input_ids=ids, labels=ids.masked_fill(mask == 0, -100))]
    other = target.regrouped(changed)
    assert torch.allclose(other.losses(peft_model).nll, independent_nll(peft_model, changed), rtol=1e-5)
    assert 2 in rows and other.spent == 2, "other tokens under a kept document's id: the full forward pass"
    peft_model.unload()
    assert not TargetLosses(batches, max_cache_bytes=100).keep_prefix_at(model, [FIRST])  # past the bound
    exact = sum(int(b.attention_mask.sum()) for b in batches) * model.config.hidden_size * 4  # float32, one layer
    assert TargetLosses(batches, max_cache_bytes=exact).keep_prefix_at(model, [FIRST])
    assert not TargetLosses(batches, max_cache_bytes=exact - 1).keep_prefix_at(model, [FIRST])


@pytest.mark.parametrize(
    "options",
    [{"target_modules": ["q_proj", "embed_tokens"], "layers_to_transform": None}, {"modules_to_save": ["lm_head"]}],
    ids=["lora-on-embeddings", "head-saved-whole"],
)
def test_an_adapter_outside_the_layers_gets_the_full_forward_pass(options):
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB, num_layers=LAYERS)
    batches = target_batches()
    target = TargetLosses(batches)
    peft_model = lora(model, "llama", 0, **options)
    assert torch.allclose(target.losses(peft_model).nll, independent_nll(peft_model, batches), rtol=1e-5)
    assert target._prefix.hidden == {} and target._prefix.exact == {}


def test_past_the_memory_bound_batches_get_the_full_forward_pass():
    model = tiny_causal_lm("qwen2", tie_word_embeddings=False, vocab_size=VOCAB, num_layers=LAYERS)
    batches = target_batches()
    first_batch_bytes = int(batches[0].attention_mask.sum()) * 32 * 4  # its documents' tokens × d × float32
    target = TargetLosses(batches, max_cache_bytes=first_batch_bytes)
    calls, passes = calls_below(decoder_layers(model), FIRST), []
    for seed in range(2):
        peft_model = lora(model, "qwen2", seed)
        before = calls[0]
        losses = target.losses(peft_model)
        passes.append(calls[0] - before)
        assert torch.allclose(losses.nll, independent_nll(peft_model, batches), rtol=1e-5)
        peft_model.unload()
    assert sorted(target._prefix.hidden[FIRST]) == [0, 1, 2] and target._prefix.held == first_batch_bytes
    per_pass = sum(len(list(layer.children())) for layer in decoder_layers(model)[:FIRST])
    assert passes == [per_pass * 3, per_pass]  # the check and both batches; then the second batch only


def test_a_forward_pass_that_reads_a_lower_layer_out_of_sequence_is_not_replayed():
    """A skip connection from layer 0's output to the final norm's (hooks, which run on a replayed layer too):
    replayed, layer 0 would hand on layer 1's output, so the check refuses the replay."""
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB, num_layers=LAYERS)
    layers, kept = decoder_layers(model), {}
    layers[0].register_forward_hook(lambda module, args, output: kept.update(skip=output))
    model.model.norm.register_forward_hook(lambda module, args, output: output + kept["skip"])
    batches = target_batches()
    target = TargetLosses(batches)
    for seed in range(2):
        peft_model = lora(model, "llama", seed)
        assert torch.allclose(target.losses(peft_model).nll, independent_nll(peft_model, batches), rtol=1e-5)
        peft_model.unload()
    assert target._prefix.exact == {FIRST: False} and target._prefix.hidden == {}


def test_another_base_model_gets_nothing_kept_of_the_first():
    batches = target_batches()
    target = TargetLosses(batches)
    for seed in (0, 1):
        model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB, num_layers=LAYERS, seed=seed)
        peft_model = lora(model, "llama", 0)
        assert torch.allclose(target.losses(peft_model).nll, independent_nll(peft_model, batches), rtol=1e-5)
    assert decoder_layers(torch.nn.Linear(2, 2)) is None


def test_an_adapter_with_nan_logits_leaves_the_check_of_the_replay_to_the_next():
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB, num_layers=LAYERS)
    batches = target_batches()
    target = TargetLosses(batches)
    broken = lora(model, "llama", 0)
    for name, parameter in broken.named_parameters():
        if "lora_B" in name:
            parameter.data.fill_(float("nan"))
    assert not torch.isfinite(target.losses(broken).nll).all()
    broken.unload()
    assert target._prefix.exact == {}
    peft_model = lora(model, "llama", 1)
    assert torch.allclose(target.losses(peft_model).nll, independent_nll(peft_model, batches), rtol=1e-5)
    assert target._prefix.exact == {FIRST: True}


def test_the_first_adapted_layer_is_read_from_the_config_and_prices_the_pass():
    from fisherhub.lm.modules import config_first_layer

    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB, num_layers=LAYERS)
    first = {
        "layers": LoraConfig(target_modules=["q_proj", "v_proj"], layers_to_transform=[3, 2]),
        "regex": LoraConfig(target_modules=r".*layers\.(1|3)\.self_attn\.v_proj"),
        "every layer": LoraConfig(target_modules=["q_proj"]),
        "all-linear": LoraConfig(target_modules="all-linear"),
        "saved whole": LoraConfig(target_modules=["q_proj"], layers_to_transform=[3], modules_to_save=["lm_head"]),
        "nothing matched": LoraConfig(target_modules=["no_such_module"]),
    }
    assert {name: config_first_layer(model, config) for name, config in first.items()} == {
        "layers": 2,
        "regex": 1,
        "every layer": 0,
        "all-linear": 0,
        "saved whole": 0,
        "nothing matched": 0,
    }
    shares = [pass_share(model, layer) for layer in range(LAYERS)]
    assert shares[0] == 1.0 and all(a > b > 0 for a, b in zip(shares, shares[1:]))
    layer_size = sum(p.numel() for p in decoder_layers(model)[0].parameters())
    head_size = 2 * model.lm_head.weight.numel()
    assert shares[2] == pytest.approx((2 * layer_size + head_size) / (LAYERS * layer_size + head_size))
    assert pass_share(lora(model, "llama", seed=0), 2) == pytest.approx(shares[2])  # an adapter's weights not counted
