"""Write a tiny Llama (``fisherhub.testing.tiny_models.tiny_causal_lm("llama", ...)``) and its tokenizer as a float32 GGUF file.

    write_tiny_gguf(model, tokenizer, folder / "tiny.gguf")

The layout is llama.cpp's (``gguf`` package names; q/k rows permuted for its rope, which transformers undoes
on load), with a byte-level BPE vocabulary of the tokenizer's tokens and no merges, so transformers loads it
back into the same weights and the same token ids for plain text. transformers' byte-level GGUF
tokenizer always has ``<|endoftext|>``: it is appended to the vocabulary, so the tokenizer must have
fewer tokens than the model's vocabulary (e.g. ``tiny_tokenizer(63)`` for ``vocab_size=64``).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch


def _rope_permute(weight: torch.Tensor, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order: each head's (2, d/2) halves interleaved."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, -1).transpose(1, 2).reshape(weight.shape).numpy()


def write_tiny_gguf(model, tokenizer, path: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """``metadata``: more ``general.*`` strings, e.g. ``{"general.source.url": "https://huggingface.co/org/name"}``."""
    config = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    for key, value in (metadata or {}).items():
        writer.add_string(key, value)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    tokens = [token for token, _ in vocabulary] + ["<|endoftext|>"]
    if len(tokens) > config.vocab_size:
        raise ValueError(
            f"the tokenizer needs fewer than the model's {config.vocab_size} tokens (<|endoftext|> is added)"
        )
    special = {*tokenizer.all_special_tokens, "<|endoftext|>"}
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if token in special else gguf.TokenType.NORMAL for token in tokens])
    writer.add_token_scores([0.0] * len(tokens))  # no merges: transformers derives them (none) from these
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_unk_token_id(tokenizer.unk_token_id)
    writer.add_add_bos_token(True)

    state = {name: tensor.detach().float() for name, tensor in model.state_dict().items()}
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    layer_names = {
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
    }
    for name, tensor in state.items():
        if name in names:
            writer.add_tensor(names[name], tensor.numpy())
            continue
        _, _, layer, *module, kind = name.split(".")
        module = ".".join(module)
        if module == "self_attn.q_proj":
            array = _rope_permute(tensor, config.num_attention_heads)
        elif module == "self_attn.k_proj":
            array = _rope_permute(tensor, config.num_key_value_heads)
        else:
            array = tensor.numpy()
        writer.add_tensor(f"blk.{layer}.{layer_names[module]}.{kind}", np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)
