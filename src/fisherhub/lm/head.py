"""``HeadModel``: a causal LM's output head, resolved once per model (SPEC §1).

The head is ``model.get_output_embeddings()`` (PEFT wrappers unwrapped; a PEFT-wrapped head's base layer):
its weight W (K, d) and optional bias, the map from its output z to the logits the loss sees (a logit scale,
final-logit softcapping), the model's fingerprint (checksums of [W | b] in float32 and of the tokenizer) and the check
that the tokenizer cannot produce ids ≥ K. ``HeadModel.of(model, tokenizer)`` computes all of it once and
reuses it while the head's weights are unchanged (same storage, same in-place version counter).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import weakref
from typing import Any

import torch

from fisherhub.core.bounded import read_file, read_json
from fisherhub.core.errors import InputError
from fisherhub.core.spec import ModelFingerprint, tensor_checksum


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a PEFT wrapper (the model itself otherwise)."""
    get_base_model = getattr(model, "get_base_model", None)
    return get_base_model() if callable(get_base_model) else model


def text_config(model: torch.nn.Module):
    """The config of the (unwrapped) model's language part (``get_text_config()``), or None."""
    config = getattr(unwrapped(model), "config", None)
    return config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config


def input_embeddings(model: torch.nn.Module) -> torch.nn.Embedding:
    """The input embedding module ``model.get_input_embeddings()`` (PEFT wrappers unwrapped): an
    ``nn.Embedding`` (or a subclass) in every transformers causal LM."""
    base: Any = unwrapped(model)  # a transformers model (nn.Module.__getattr__ would type its methods as tensors)
    return base.get_input_embeddings()


def output_head(model: torch.nn.Module) -> torch.nn.Module:
    """The LM head ``model.get_output_embeddings()`` (PEFT wrappers unwrapped)."""
    base = unwrapped(model)
    get_output_embeddings = getattr(base, "get_output_embeddings", None)
    head = get_output_embeddings() if callable(get_output_embeddings) else None
    if not isinstance(head, torch.nn.Module):
        raise InputError(
            f"{type(base).__name__} has no output embeddings (get_output_embeddings() gave {head!r}): "
            "fisherhub needs a causal LM with a linear head; load it with AutoModelForCausalLM, not AutoModel"
        )
    return head


def _offloaded(layer: torch.nn.Module, name: str, tensor):
    """``layer.<name>``, or its values when accelerate offloaded it (a device map's "cpu"/"disk": the
    parameter is on the meta device and the values are in the layer's hook's ``weights_map``)."""
    weights_map = getattr(getattr(layer, "_hf_hook", None), "weights_map", None)
    if isinstance(tensor, torch.Tensor) and tensor.is_meta and weights_map is not None:
        return weights_map[name]
    return tensor


def tokenizer_checksum(tokenizer) -> str:
    """sha256 (first 16 hex) of the vocabulary sorted by id and of the special tokens but padding.

    The pad token is left out: it is never scored, and pipelines often set it (e.g. pad = eos).
    """
    try:
        return _TOKENIZER_CHECKSUMS[tokenizer]
    except (KeyError, TypeError):
        pass
    vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0]))
    special = sorted(
        (name, json.dumps(value, default=str))
        for name, value in tokenizer.special_tokens_map.items()
        if name != "pad_token"
    )
    payload = json.dumps({"vocabulary": vocabulary, "special_tokens": special}, ensure_ascii=False)
    checksum = hashlib.sha256(payload.encode()).hexdigest()[:16]
    with contextlib.suppress(TypeError):  # a tokenizer that cannot be weakly referenced is hashed each time
        _TOKENIZER_CHECKSUMS[tokenizer] = checksum
    return checksum


#: tokenizer -> its checksum (the vocabulary of a large tokenizer takes a while to hash)
_TOKENIZER_CHECKSUMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def non_finite_model_error(what: str, dtype: torch.dtype) -> InputError:
    return InputError(
        f"the model computes NaN or inf {what} ({str(dtype).removeprefix('torch.')} weights): check its weights "
        "(torch.isfinite over model.parameters()), or load the model in float32 if a lower precision overflows"
    )


#: a sharded checkpoint's ``model.safetensors.index.json`` (a 405B model's lists ~2,000 tensors in ~200 kB)
MAX_WEIGHT_MAP_BYTES = 16 * 2**20


def _stored_tensor(model: torch.nn.Module, parameter: torch.Tensor) -> torch.Tensor | None:
    """``parameter`` as stored in the safetensors files the model was loaded from (a local folder, or the Hub
    cache at the loaded commit), when the loaded values are exactly its rounding to the parameter's dtype;
    None when there are no such files or they hold other values."""
    from huggingface_hub import try_to_load_from_cache
    from safetensors import safe_open

    base = unwrapped(model)
    source, config = str(getattr(base, "name_or_path", "") or ""), getattr(base, "config", None)
    names = [name for name, value in base.named_parameters(remove_duplicate=False) if value is parameter]
    prefix = f"{getattr(base, 'base_model_prefix', '')}."
    names += [name.removeprefix(prefix) for name in names if name.startswith(prefix)]

    def local(filename: str) -> str | None:
        if os.path.isdir(source):
            path = os.path.join(source, filename)
            return path if os.path.isfile(path) else None
        try:
            found = try_to_load_from_cache(source, filename, revision=getattr(config, "_commit_hash", None))
        except ValueError:  # not a repo id
            return None
        return found if isinstance(found, str) else None

    index = local("model.safetensors.index.json")
    weight_map: dict = {}
    if index:
        try:
            document = read_json(
                read_file(index, index, max_bytes=MAX_WEIGHT_MAP_BYTES), index, max_bytes=MAX_WEIGHT_MAP_BYTES
            )
        except InputError:  # not an index a loader wrote: the loaded values stand
            return None
        listed = document.get("weight_map") if isinstance(document, dict) else None
        if not isinstance(listed, dict):
            return None
        weight_map = listed
    for name in names:
        shard = weight_map.get(name)
        path = (local(shard) if isinstance(shard, str) else None) if index else local("model.safetensors")
        if path is None:
            continue
        with safe_open(path, framework="pt") as handle:
            if name not in handle.keys():
                continue
            stored = handle.get_tensor(name)
        if stored.shape == parameter.shape and torch.equal(stored.to(parameter.dtype), parameter.detach().cpu()):
            return stored
    return None


def _head_as_stored(model: torch.nn.Module, weight: torch.Tensor, bias: torch.Tensor | None):
    """(W, b, as_stored): the head in the precision it is stored in. A model loaded in bfloat16 / float16 from
    float32 files has rounded weights, and its head checksum is that of the stored ones (so a signature of the
    model in float32 is comparable with it); ``as_stored`` is False when the stored head cannot be read."""
    if weight.dtype in (torch.float32, torch.float64):
        return weight, bias, True
    stored = [None if p is None else _stored_tensor(model, p) for p in (weight, bias)]
    if stored[0] is None or (bias is not None and stored[1] is None):
        return weight, bias, False
    return stored[0], stored[1], True


#: config attributes that scale the head's output before the loss: name -> True if the logits are multiplied by
#: it (Cohere's ``logit_scale``, Falcon-H1's ``lm_head_multiplier``, MuseSpark's ``output_multiplier``), False if
#: divided (Granite's ``logits_scaling``)
LOGIT_SCALE_ATTRIBUTES = {
    "logit_scale": True,
    "lm_head_multiplier": True,
    "output_multiplier": True,
    "logits_scaling": False,
}


@dataclasses.dataclass(frozen=True)
class LogitTransform:
    """The map from head output z to the logits the loss sees: ẑ = c·tanh(s·z/c) with ``softcap`` = c, else
    ẑ = s·z; s (``scale``) is the model's logit scale, 1 for most models."""

    scale: float = 1.0
    softcap: float | None = None

    @classmethod
    def of(cls, model: torch.nn.Module) -> LogitTransform:
        config = text_config(model)
        softcap = getattr(config, "final_logit_softcapping", None)
        scale = 1.0
        for name, multiplies in LOGIT_SCALE_ATTRIBUTES.items():
            value = getattr(config, name, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value not in (0, 1):
                scale *= float(value) if multiplies else 1.0 / float(value)
        return cls(scale=scale, softcap=float(softcap) if softcap else None)

    @property
    def is_identity(self) -> bool:
        """ẑ = z: the logits are the head's output, so e = softmax(z) − onehot(y) needs no chain rule."""
        return self.scale == 1.0 and self.softcap is None

    def apply(self, head_output: torch.Tensor) -> torch.Tensor:
        scaled = head_output if self.scale == 1.0 else head_output * self.scale
        if self.softcap is None:
            return scaled
        return self.softcap * torch.tanh(scaled / self.softcap)

    def head_output_gradient(self, logits: torch.Tensor, logit_gradient: torch.Tensor) -> torch.Tensor:
        """∂ℓ/∂z from ∂ℓ/∂ẑ (in place): multiply by dẑ/dz = s·(1 − (ẑ/c)²)."""
        if self.softcap is not None:
            logit_gradient.mul_(1.0 - (logits / self.softcap) ** 2)
        if self.scale != 1.0:
            logit_gradient.mul_(self.scale)
        return logit_gradient

    def check(self, head_output: torch.Tensor, model_logits: torch.Tensor) -> None:
        """Refuse models whose returned logits (one token's row) are not ``apply(head output)``."""
        expected = self.apply(head_output.float())
        if not torch.isfinite(expected).all():
            raise non_finite_model_error("logits", head_output.dtype)
        tolerance = 0.02 * float(expected.abs().max()) + 1e-6
        if not torch.allclose(model_logits.float(), expected, rtol=0.0, atol=tolerance):
            raise InputError(
                "the model changes its logits after the output head in a way fisherhub does not model "
                f"(max difference {float((model_logits.float() - expected).abs().max()):.4g}); supported are plain "
                "heads, final_logit_softcapping and a constant logit scale (config "
                f"{', '.join(LOGIT_SCALE_ATTRIBUTES)}). The head gradient would not be e aᵀ for this model."
            )


@dataclasses.dataclass(frozen=True, eq=False)
class HeadModel:
    """A causal LM with its head resolved, once per model: make one with ``HeadModel.of(model, tokenizer)``.

    Args:
        model (`torch.nn.Module`):
            The model as given (maybe PEFT-wrapped).
        head (`torch.nn.Module`):
            The module whose input is a and output z.
        weight (`torch.Tensor`):
            W, (K, d).
        bias (`torch.Tensor` or `None`):
            The head's bias, (K,).
        transform (`LogitTransform`):
            What the model does to z after the head (soft-capping, a constant scale).
        head_checksum (`str`):
            The checksum of [W | b] as stored, in float32.
        checksum_as_stored (`bool`, *optional*):
            False for a low-precision head whose stored weights could not be read: its checksum is then of the
            rounded weights, and a float32 signature of the same model will not match.
    """

    model: torch.nn.Module
    head: torch.nn.Module
    weight: torch.Tensor
    bias: torch.Tensor | None
    transform: LogitTransform
    head_checksum: str
    checksum_as_stored: bool = True

    def fingerprint(self, tokenizer=None) -> ModelFingerprint:
        """The head checksum and, with ``tokenizer``, its checksum (both enter the sketch id)."""
        return ModelFingerprint(self.head_checksum, None if tokenizer is None else tokenizer_checksum(tokenizer))

    @property
    def vocab_size(self) -> int:
        return self.weight.shape[0]

    @property
    def d(self) -> int:
        return self.weight.shape[1]

    @property
    def base(self) -> torch.nn.Module:
        return unwrapped(self.model)

    @property
    def device(self) -> torch.device:
        """Where the head computes, and so where the sums live: a device map may put it on another device than the
        input, and an offloaded head runs on its accelerate hook's execution device."""
        execution_device = getattr(getattr(self.head, "_hf_hook", None), "execution_device", None)
        return torch.device(execution_device) if execution_device is not None else self.weight.device

    @classmethod
    def of(cls, model: torch.nn.Module | HeadModel, tokenizer=None) -> HeadModel:
        """The resolved head of ``model`` (checked against ``tokenizer`` when given), computed once while the
        head's weights are unchanged."""
        if isinstance(model, HeadModel):
            return model
        head = output_head(model)
        layer = getattr(head, "base_layer", head)
        weight = _offloaded(layer, "weight", getattr(layer, "weight", None))
        if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
            raise InputError(
                f"the output head {type(layer).__name__} has no 2-D weight (K, d); fisherhub needs a linear head"
            )
        if not weight.is_floating_point():
            raise InputError(
                f"the output head's weight is {weight.dtype} ({type(layer).__name__}): a quantized head has no float "
                "gradient to sketch. Keep the head unquantized (transformers' quantizers skip lm_head by default; "
                "e.g. BitsAndBytesConfig(llm_int8_skip_modules=['lm_head']) or modules_to_not_convert)"
            )
        bias = _offloaded(layer, "bias", getattr(layer, "bias", None))
        bias = bias if isinstance(bias, torch.Tensor) else None
        if tokenizer is not None:
            _check_tokenizer(weight.shape[0], tokenizer)
        key = (weight.data_ptr(), weight._version, None if bias is None else (bias.data_ptr(), bias._version))
        cached = _RESOLVED.get(model)
        if cached is not None and cached[0] == key:
            return cached[1]
        stored_weight, stored_bias, as_stored = _head_as_stored(model, weight, bias)
        resolved = cls(
            model, head, weight, bias, LogitTransform.of(model), tensor_checksum(stored_weight, stored_bias), as_stored
        )
        _RESOLVED[model] = (key, resolved)
        return resolved


#: model -> (key, HeadModel): resolved once per model while its head's storage and version counters stay.
_RESOLVED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _check_tokenizer(rows: int, tokenizer) -> None:
    """Refuse a tokenizer that can produce ids ≥ K (the head's rows); fewer ids than K is fine."""
    vocabulary = tokenizer.get_vocab()
    too_large = sorted((index, token) for token, index in vocabulary.items() if index >= rows)
    if too_large:
        examples = ", ".join(f"{token!r}={index}" for index, token in too_large[:3])
        raise InputError(
            f"the tokenizer ({len(vocabulary)} tokens) produces ids up to {too_large[-1][0]} but the model's head "
            f"has only K={rows} rows ({len(too_large)} tokens out of range, e.g. {examples}): "
            "use the tokenizer that belongs to the base model"
        )
