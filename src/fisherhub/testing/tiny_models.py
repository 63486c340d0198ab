"""Tiny random causal LMs and a character-level tokenizer, built from configs (no downloads).

    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64)
    tokenizer = tiny_tokenizer(64)        # len(tokenizer) == 64, pad/eos/bos/unk tokens, adds <bos>

Architectures: ``ARCHITECTURES`` (Llama, Qwen2, GPT-2, Gemma v1: plain heads) and
``SOFTCAPPED_ARCHITECTURES`` (Gemma 2: final-logit softcapping after the head) and ``SCALED_ARCHITECTURES``
(Cohere, Granite: a constant logit scale after the head). Models come back in
``eval()`` mode, float32, with eager attention (deterministic on CPU).
"""

from __future__ import annotations

import random

import string

import torch
import transformers
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors

ARCHITECTURES = ("llama", "qwen2", "gpt2", "gemma")
SOFTCAPPED_ARCHITECTURES = ("gemma2",)
#: heads whose logits the model scales by a constant: Cohere multiplies by ``logit_scale``, Granite divides by
#: ``logits_scaling``
SCALED_ARCHITECTURES = ("cohere", "granite")

SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>")
_FREQUENT_CHARACTERS = " etaoinsrhldcumfpgwybvkxjqz.,0123456789=+-*/()[]{}:;_'\"!?#<>\nETAOINSRHLDCUMFPGWYBVKXJQZ"
#: characters of the tiny tokenizer's vocabulary, most useful first (truncated to the vocabulary size).
ALPHABET = _FREQUENT_CHARACTERS + "".join(sorted(set(string.printable) - set(_FREQUENT_CHARACTERS)))


def _config(arch: str, tie_word_embeddings: bool, vocab_size: int, hidden_size: int, num_layers: int):
    """A transformers config of the given family with tiny sizes (head_dim 8, 512 positions)."""
    heads = hidden_size // 8
    if arch == "gpt2":
        return transformers.GPT2Config(
            vocab_size=vocab_size,
            n_embd=hidden_size,
            n_layer=num_layers,
            n_head=heads,
            n_positions=512,
            tie_word_embeddings=tie_word_embeddings,
            initializer_range=0.1,
            bos_token_id=2,
            eos_token_id=1,
            pad_token_id=0,
        )
    config_classes = {
        "llama": transformers.LlamaConfig,
        "qwen2": transformers.Qwen2Config,
        "gemma": transformers.GemmaConfig,
        "gemma2": transformers.Gemma2Config,
        "cohere": transformers.CohereConfig,
        "granite": transformers.GraniteConfig,
    }
    if arch not in config_classes:
        raise ValueError(
            f"unknown tiny architecture {arch!r}; choose from {ARCHITECTURES + SOFTCAPPED_ARCHITECTURES + SCALED_ARCHITECTURES}"
        )
    extra = {
        "gemma2": {"final_logit_softcapping": 2.0, "query_pre_attn_scalar": 8},
        "cohere": {"logit_scale": 0.5},
        "granite": {"logits_scaling": 4.0},
    }.get(arch, {})
    return config_classes[arch](
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=8,
        max_position_embeddings=512,
        tie_word_embeddings=tie_word_embeddings,
        initializer_range=0.1,
        bos_token_id=2,
        eos_token_id=1,
        pad_token_id=0,
        **extra,
    )


def tiny_causal_lm(
    arch: str,
    tie_word_embeddings: bool,
    vocab_size: int = 64,
    seed: int = 0,
    *,
    hidden_size: int = 32,
    num_layers: int = 2,
) -> transformers.PreTrainedModel:
    """A random-weight causal LM of family ``arch`` (see ``ARCHITECTURES``), deterministic in ``seed``.

    Weights are drawn with std 0.1 (larger than the usual 0.02) so the next-token distributions are not
    nearly uniform; Gemma 2's softcap is 2.0 so that capping visibly changes the logits.
    """
    config = _config(arch, tie_word_embeddings, vocab_size, hidden_size, num_layers)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    head, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    if (head.weight is embeddings.weight) != tie_word_embeddings:
        raise RuntimeError(f"{arch}: tie_word_embeddings={tie_word_embeddings} was not honoured")
    return model.eval()


def tiny_tokenizer(vocab_size: int = 64) -> transformers.PreTrainedTokenizerFast:
    """Character-level tokenizer with ``vocab_size`` ids: 4 special tokens, then ``ALPHABET`` characters.

    Unknown characters map to ``<unk>``; every encoding starts with ``<bos>``.
    """
    characters = ALPHABET[: vocab_size - len(SPECIAL_TOKENS)]
    if len(characters) < vocab_size - len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size {vocab_size} exceeds the {len(SPECIAL_TOKENS) + len(ALPHABET)} available tokens")
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + tuple(characters))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
    )


def saved_tiny_model(folder, arch: str, tie_word_embeddings: bool, vocab_size: int):
    """A tiny random model and its tokenizer saved to ``folder`` (for the CLI, which loads by path); returns it."""
    tiny_causal_lm(arch, tie_word_embeddings=tie_word_embeddings, vocab_size=vocab_size).save_pretrained(folder)
    tiny_tokenizer(vocab_size).save_pretrained(folder)
    return folder


#: the vocabulary of ``prose_documents``: short sentences of common words
WORDS = [
    "the",
    "a",
    "river",
    "stone",
    "bridge",
    "old",
    "city",
    "light",
    "water",
    "market",
    "bread",
    "green",
    "slow",
    "rain",
]


def prose_documents(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))) + "." for _ in range(count)]


def code_documents(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        f"x{rng.randint(0, 9)} = {rng.randint(0, 99)} * (y{rng.randint(0, 9)} + {rng.randint(0, 9)});"
        for _ in range(count)
    ]
