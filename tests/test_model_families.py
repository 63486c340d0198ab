"""Any causal LM: on tiny random models of many transformers families, the captured Σ_t e_t a_tᵀ is the
head gradient autograd gives for the summed cross-entropy, and a sketch runs end to end."""

from __future__ import annotations

import pytest
import torch
import transformers
from fisherhub.testing.tiny_models import tiny_tokenizer

from fisherhub.lm import head_batches
from fisherhub.lm.head import output_head
from fisherhub.pipeline.loop import sketch_texts

VOCAB_SIZE, HIDDEN = 64, 32
TOKENIZER = tiny_tokenizer(VOCAB_SIZE)
IDS = {"bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0}
LLAMA_LIKE = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": HIDDEN,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
    **IDS,
}
GROUPED = {**LLAMA_LIKE, "num_key_value_heads": 2}

#: family -> (config class, its arguments); short contexts (128 positions) on purpose: the probe text is longer
CONFIGS = {
    "mistral": ("MistralConfig", {**GROUPED, "head_dim": 8}),
    "mixtral": ("MixtralConfig", {**GROUPED, "head_dim": 8, "num_local_experts": 2, "num_experts_per_tok": 1}),
    "qwen3": ("Qwen3Config", {**GROUPED, "head_dim": 8}),
    "phi": ("PhiConfig", LLAMA_LIKE),
    "phi3": ("Phi3Config", GROUPED),
    "gpt_neox": ("GPTNeoXConfig", LLAMA_LIKE),
    "gptj": (
        "GPTJConfig",
        {
            "vocab_size": VOCAB_SIZE,
            "n_embd": HIDDEN,
            "n_layer": 2,
            "n_head": 4,
            "rotary_dim": 4,
            "n_positions": 128,
            **IDS,
        },
    ),
    "opt": (
        "OPTConfig",
        {
            "vocab_size": VOCAB_SIZE,
            "hidden_size": HIDDEN,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "ffn_dim": 64,
            "max_position_embeddings": 128,
            "word_embed_proj_dim": HIDDEN,
            **IDS,
        },
    ),
    "falcon": (
        "FalconConfig",
        {"vocab_size": VOCAB_SIZE, "hidden_size": HIDDEN, "num_hidden_layers": 2, "num_attention_heads": 4, **IDS},
    ),
    "bloom": ("BloomConfig", {"vocab_size": VOCAB_SIZE, "hidden_size": HIDDEN, "n_layer": 2, "n_head": 4, **IDS}),
    "stablelm": ("StableLmConfig", GROUPED),
    "starcoder2": ("Starcoder2Config", GROUPED),
    "olmo2": ("Olmo2Config", LLAMA_LIKE),
    "gemma3_text": (
        "Gemma3TextConfig",
        {**GROUPED, "head_dim": 8, "final_logit_softcapping": 2.0, "query_pre_attn_scalar": 8},
    ),
    "cohere": ("CohereConfig", {**GROUPED, "logit_scale": 0.5}),
    "granite": ("GraniteConfig", {**GROUPED, "logits_scaling": 4.0}),
    "smollm3": ("SmolLM3Config", GROUPED),
    "helium": ("HeliumConfig", {**GROUPED, "head_dim": 8}),
    "exaone4": ("Exaone4Config", {**GROUPED, "head_dim": 8}),
}
TEXTS = ["the quick brown fox jumps", "lazy dogs sleep all day long", "x = 1 + 2 * (3 - 4)"]


def random_model(family: str) -> torch.nn.Module:
    class_name, arguments = CONFIGS[family]
    config = getattr(transformers, class_name)(**arguments)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim > 1:
                parameter.normal_(0.0, 0.1)  # so the next-token distributions are not nearly uniform
    return model


def autograd_head_gradient(model, input_ids, attention_mask) -> torch.Tensor:
    """Σ_t ∂CE_t/∂z_t a_tᵀ over the scored tokens, from autograd on the model's own loss (z: the head output)."""
    saved = {}

    def hook(module, args, output):
        saved["a"] = args[0].detach()
        output.register_hook(lambda gradient: saved.__setitem__("dz", gradient))

    handle = output_head(model).register_forward_hook(hook)
    try:
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        (loss * int((labels[:, 1:] != -100).sum())).backward()  # the summed cross-entropy
    finally:
        handle.remove()
    return torch.einsum("btk,btd->kd", saved["dz"].float(), saved["a"].float())


def captured_head_gradient(model, batch, materialize_errors: bool) -> torch.Tensor:
    total = torch.zeros(VOCAB_SIZE, HIDDEN)
    for chunk in head_batches(model, batch, materialize_errors=materialize_errors, token_chunk_size=5):
        if chunk.errors is not None:
            errors = chunk.errors
        else:  # logits handed over: e = softmax(z) − onehot(y) at the scored rows (target ≥ 0)
            scored = chunk.targets >= 0
            errors = torch.softmax(chunk.logits.float(), dim=-1) * scored[:, None]
            errors[scored.nonzero().flatten(), chunk.targets[scored]] -= 1.0
        total += errors.T @ chunk.activations.float()
    return total


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_capture_gives_the_head_gradient_and_a_sketch_runs(family):
    model = random_model(family)
    encoded = TOKENIZER(TEXTS, padding=True, return_tensors="pt")
    batch = {**encoded, "doc_index": torch.arange(len(TEXTS))}
    reference = autograd_head_gradient(model, encoded["input_ids"], encoded["attention_mask"])
    for materialize_errors in (False, True):
        captured = captured_head_gradient(model, batch, materialize_errors)
        assert float((captured - reference).norm() / reference.norm()) < 1e-5, materialize_errors
    signature = sketch_texts(TEXTS * 4, model, TOKENIZER, m=64, max_length=64)
    expected_tokens = 4 * sum(len(TOKENIZER(text)["input_ids"]) - 1 for text in TEXTS)
    assert signature.num_tokens == expected_tokens and signature.num_documents == 12
