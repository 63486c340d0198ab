"""Samples drawn from a causal LM at temperature 1, reproducibly: the documents of a signature sketched from
what an adapter generates (SPEC §3b). ``transformers``' ``generate`` draws from the global random state; here
sample i has its own ``torch.Generator``, seeded by ``sample_seed(seed, i)``, that draws its tokens (on the CPU, from the
model's probabilities), so a seed, a model and a prompt set give the same samples whatever ran before, whatever
the batch size, and the first k of n samples are the k samples of a smaller run."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch

from fisherhub.core.errors import InputError


def sample_seed(seed: int, number: int) -> int:
    """The 32-bit seed of sample ``number`` of a run seeded by ``seed`` (the first 4 bytes of SHA-256 of
    "seed:number": the CPU generator keeps 32 bits of its seed, so no arithmetic mix of the two would do)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{number}".encode()).digest()[:4], "little")


def _start_token(tokenizer) -> int:
    """The token an empty prompt is: the start-of-text token, else the end-of-text one (what separates documents)."""
    for token in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token is not None:
            return int(token)
    raise InputError("an empty prompt needs a tokenizer with a bos or eos token")


def _left_padded(tokenizer, prompts: Sequence[str], device) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids, attention mask) of ``prompts``, left-padded so that every row's next token comes last."""
    encoded = [list(tokenizer(prompt)["input_ids"]) or [_start_token(tokenizer)] for prompt in prompts]
    width = max(map(len, encoded))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else _start_token(tokenizer)
    ids = torch.tensor([[pad] * (width - len(row)) + row for row in encoded], device=device)
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in encoded], device=device)
    return ids, mask


@torch.inference_mode()
def _continue(
    model, ids: torch.Tensor, mask: torch.Tensor, steps: int, generators: list[torch.Generator]
) -> torch.Tensor:
    """(rows, steps) tokens drawn one at a time from softmax(logits) of the last position (temperature 1), row r
    by ``generators[r]``, with the key/value cache; positions count the prompt's real tokens only (left padding
    shifts nothing)."""
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    cache, drawn = None, []
    for _ in range(steps):
        out = model(
            input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1
        )
        cache = out.cache
        probabilities = torch.softmax(out.logits[:, -1].float(), dim=-1).cpu()
        draws = [torch.multinomial(row, 1, generator=g) for row, g in zip(probabilities, generators)]
        ids = torch.stack(draws).to(mask.device)
        drawn.append(ids)
        mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
        positions = positions[:, -1:] + 1
    return torch.cat(drawn, dim=1)


def sample_texts(
    model, tokenizer, prompts: Sequence[str], *, samples: int, max_new_tokens: int, seed: int, batch_size: int
) -> list[str]:
    """``samples`` texts drawn at temperature 1 from ``model``: sample i continues ``prompts[i % len(prompts)]``
    by ``max_new_tokens`` tokens drawn by its own generator (``sample_seed(seed, i)``), ``batch_size`` samples at a time
    (which changes no sample); each text is the continuation alone (not the
    prompt), cut before its first end-of-text token, decoded without special tokens. The same seed, model and
    prompts give the same texts on one device.

    Raises:
        `InputError`: no prompts, or an empty prompt with a tokenizer that has no bos or eos token.
        `RuntimeError`: the model's probabilities are not finite (a broken adapter).
    """
    if not prompts:
        raise InputError("sample_texts needs at least one prompt")
    device = next(model.parameters()).device
    texts: list[str] = []
    end = tokenizer.eos_token_id
    for first in range(0, samples, batch_size):
        numbers = range(first, min(first + batch_size, samples))
        ids, mask = _left_padded(tokenizer, [prompts[i % len(prompts)] for i in numbers], device)
        generators = [torch.Generator().manual_seed(sample_seed(seed, i)) for i in numbers]
        for row in _continue(model, ids, mask, max_new_tokens, generators).tolist():
            kept = row[: row.index(end)] if end is not None and end in row else row
            texts.append(tokenizer.decode(kept, skip_special_tokens=True))
    return texts
