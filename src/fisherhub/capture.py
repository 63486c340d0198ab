"""Model capture (SPEC §1): the head input a and the logit gradient e of every scored token.

A forward hook on the output head (``model.get_output_embeddings()``) records its input a (the final
hidden state, after the final norm) and its output z during an inference forward pass. Then, in chunks
of scored tokens (memory O(chunk · K), whatever the sequence length), in float32 whatever the model's
dtype: ``p = softmax(z)``, ``e = p − onehot(y)`` with y the next token ("empirical" Fisher) or a label
sampled from p ("true" Fisher), and the chunk goes to ``SketchState.update(a, e, doc_index)``.

Final-logit softcapping (Gemma 2/3: ``config.final_logit_softcapping = c``): the loss sees
``ẑ = c·tanh(z/c)``. p is the softmax of ẑ, and e is the gradient of the cross-entropy w.r.t. the
head's output z (chain rule): ``e = (p − onehot(y)) ∘ (1 − (ẑ/c)²)``. So ``g = e aᵀ`` stays exactly the
per-token head gradient, as for every other model. Any other change the model makes to the logits
after its head is detected on the first scored token of each batch and refused.

Scored positions follow the Hugging Face convention: ``labels`` has the shape of ``input_ids`` and is
shifted inside; position t is scored when ``labels[:, t+1] != -100`` and
``attention_mask[:, t] == attention_mask[:, t+1] == 1``, and its next token is ``y_t = labels[:, t+1]``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
from collections.abc import Iterator, Mapping

import torch

from fisherhub.core.hashing import uniforms
from fisherhub.core.hashing import Stream
from fisherhub.core.signature import Signature
from fisherhub.core.spec import (
    DEFAULT_ESTIMATOR,
    ModelFingerprint,
    SketchSpec,
    tensor_checksum,
)
from fisherhub.core.state import IGNORE_INDEX, SketchState
from fisherhub.core.errors import InputError
from fisherhub.probe_text import PROBE_DOCUMENTS

#: the true-Fisher label of a token is drawn with the uniform of index doc_index · 2³² + position.
POSITION_BITS = 32
#: probe documents are truncated to this many tokens for the pilot mean.
PROBE_MAX_TOKENS = 256


# -- the head -----------------------------------------------------------------------------------
def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a PEFT wrapper (the model itself otherwise)."""
    get_base_model = getattr(model, "get_base_model", None)
    return get_base_model() if callable(get_base_model) else model


def output_head(model: torch.nn.Module) -> torch.nn.Module:
    """The LM head ``model.get_output_embeddings()`` (PEFT wrappers unwrapped)."""
    base = _unwrapped(model)
    get_output_embeddings = getattr(base, "get_output_embeddings", None)
    head = get_output_embeddings() if callable(get_output_embeddings) else None
    if not isinstance(head, torch.nn.Module):
        raise InputError(
            f"{type(base).__name__} has no output embeddings (get_output_embeddings() gave {head!r}): "
            "fisherhub needs a causal LM with a linear head; load it with AutoModelForCausalLM, not AutoModel"
        )
    return head


def _head_parameters(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weight W (K, d) and bias of the head's linear layer (of its base layer when PEFT wraps the head)."""
    head = output_head(model)
    layer = getattr(head, "base_layer", head)
    weight = getattr(layer, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
        raise InputError(
            f"the output head {type(layer).__name__} has no 2-D weight (K, d); fisherhub needs a linear head"
        )
    bias = getattr(layer, "bias", None)
    return weight, bias if isinstance(bias, torch.Tensor) else None


# -- fingerprints ---------------------------------------------------------------------------------
def tokenizer_checksum(tokenizer) -> str:
    """sha256 (first 16 hex) of the vocabulary sorted by id and of the special tokens but padding.

    The pad token is left out: it is never scored, and pipelines often set it (e.g. pad = eos).
    """
    vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0]))
    special = sorted(
        (name, json.dumps(value, default=str)) for name, value in tokenizer.special_tokens_map.items()
        if name != "pad_token"
    )
    payload = json.dumps({"vocabulary": vocabulary, "special_tokens": special}, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def model_fingerprint(model: torch.nn.Module, tokenizer=None) -> ModelFingerprint:
    """Checksum of the head [W | b] in float32 (``core.spec.tensor_checksum``) and of the tokenizer."""
    weight, bias = _head_parameters(model)
    head = weight if bias is None else torch.cat([weight, bias[:, None].to(weight.dtype)], dim=1)
    return ModelFingerprint(
        head_checksum=tensor_checksum(head),
        tokenizer_checksum=None if tokenizer is None else tokenizer_checksum(tokenizer),
    )


def check_tokenizer_matches(model: torch.nn.Module, tokenizer) -> None:
    """Refuse a tokenizer that can produce ids ≥ K (the head's rows); fewer ids than K is fine."""
    rows = _head_parameters(model)[0].shape[0]
    vocabulary = tokenizer.get_vocab()
    too_large = sorted((index, token) for token, index in vocabulary.items() if index >= rows)
    if too_large:
        examples = ", ".join(f"{token!r}={index}" for index, token in too_large[:3])
        raise InputError(
            f"the tokenizer ({len(vocabulary)} tokens) produces ids up to {too_large[-1][0]} but the model's head "
            f"has only K={rows} rows ({len(too_large)} tokens out of range, e.g. {examples}): "
            "use the tokenizer that belongs to the base model"
        )


# -- what the model does after its head -------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LogitTransform:
    """The map from head output z to the logits the loss sees: ẑ = c·tanh(z/c) when ``softcap`` = c, else ẑ = z."""

    softcap: float | None = None

    @classmethod
    def of(cls, model: torch.nn.Module) -> LogitTransform:
        config = getattr(_unwrapped(model), "config", None)
        if config is not None and hasattr(config, "get_text_config"):
            config = config.get_text_config()
        softcap = getattr(config, "final_logit_softcapping", None)
        return cls(softcap=float(softcap) if softcap else None)

    def apply(self, head_output: torch.Tensor) -> torch.Tensor:
        if self.softcap is None:
            return head_output
        return self.softcap * torch.tanh(head_output / self.softcap)

    def head_output_gradient(self, logits: torch.Tensor, logit_gradient: torch.Tensor) -> torch.Tensor:
        """∂ℓ/∂z from ∂ℓ/∂ẑ (in place): multiply by dẑ/dz = 1 − (ẑ/c)²."""
        if self.softcap is None:
            return logit_gradient
        return logit_gradient.mul_(1.0 - (logits / self.softcap) ** 2)

    def check(self, head_output: torch.Tensor, model_logits: torch.Tensor) -> None:
        """Refuse models whose returned logits (one token's row) are not ``apply(head output)``."""
        expected = self.apply(head_output.float())
        tolerance = 0.02 * float(expected.abs().max()) + 1e-6
        if not torch.allclose(model_logits.float(), expected, rtol=0.0, atol=tolerance):
            raise InputError(
                "the model changes its logits after the output head in a way fisherhub does not model "
                f"(max difference {float((model_logits.float() - expected).abs().max()):.4g}); supported are plain "
                "heads and final_logit_softcapping. The head gradient would not be e aᵀ for this model."
            )


# -- scored positions -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ScoredPositions:
    """The N scored tokens of a batch (int64 tensors, each (N,), in row-major order)."""

    rows: torch.Tensor  # batch row
    positions: torch.Tensor  # position t in the (padded) row
    document_positions: torch.Tensor  # t minus the padding before it: the position within the document
    targets: torch.Tensor  # next token y_t = labels[row, t + 1]

    def __len__(self) -> int:
        return self.rows.numel()


def _integer_matrix(batch: Mapping, key: str, shape: torch.Size | None = None) -> torch.Tensor:
    tensor = batch[key]
    if not isinstance(tensor, torch.Tensor) or tensor.ndim != 2 or tensor.is_floating_point():
        raise InputError(f"batch[{key!r}] must be a 2-D integer tensor (B, T), got {_describe(tensor)}")
    if shape is not None and tensor.shape != shape:
        raise InputError(f"batch[{key!r}] has shape {tuple(tensor.shape)}, expected that of input_ids {tuple(shape)}")
    return tensor


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def _attention_mask(batch: Mapping) -> torch.Tensor:
    input_ids = _integer_matrix(batch, "input_ids")
    if batch.get("attention_mask") is None:
        return torch.ones_like(input_ids)
    return _integer_matrix(batch, "attention_mask", input_ids.shape)


def scored_positions(batch: Mapping) -> ScoredPositions:
    """Scored tokens of a batch: t with labels[:, t+1] ≠ −100 and attention_mask[:, t] = attention_mask[:, t+1] = 1.

    Without ``labels`` the labels are ``input_ids`` with padding (attention mask 0) masked.
    """
    if "input_ids" not in batch:
        raise InputError(f"the batch has no 'input_ids' (keys: {sorted(batch)})")
    input_ids = _integer_matrix(batch, "input_ids")
    mask = _attention_mask(batch).to(input_ids.device)
    if batch.get("labels") is None:
        labels = input_ids.masked_fill(mask == 0, IGNORE_INDEX)
    else:
        labels = _integer_matrix(batch, "labels", input_ids.shape).to(input_ids.device)
    next_labels = labels[:, 1:]
    keep = (next_labels != IGNORE_INDEX) & (mask[:, :-1] == 1) & (mask[:, 1:] == 1)
    rows, positions = keep.nonzero(as_tuple=True)
    targets = next_labels[rows, positions]
    if (targets < 0).any():
        raise InputError(f"labels must be token ids or {IGNORE_INDEX}, found {int(targets.min())}")
    document_positions = (mask.cumsum(dim=1) - 1)[rows, positions]
    return ScoredPositions(rows=rows, positions=positions, document_positions=document_positions, targets=targets)


def _document_indices(batch: Mapping, batch_size: int) -> torch.Tensor:
    doc_index = batch.get("doc_index")
    if doc_index is None:
        raise InputError(
            "the batch has no 'doc_index': give every row its global document index (B,); "
            "the split half is doc_index mod 2, so it must not depend on batching"
        )
    doc_index = torch.as_tensor(doc_index)
    if doc_index.shape != (batch_size,) or doc_index.is_floating_point() or doc_index.dtype == torch.bool:
        raise InputError(f"batch['doc_index'] must be an integer tensor of shape ({batch_size},), got {_describe(doc_index)}")
    if (doc_index < 0).any() or (doc_index >= 2**31).any():
        raise InputError("batch['doc_index'] must hold global document indices in [0, 2**31)")
    return doc_index.long().cpu()


# -- the forward pass --------------------------------------------------------------------------------
@dataclasses.dataclass
class _HeadCapture:
    inputs: torch.Tensor | None = None  # a, (B, T, d)
    outputs: torch.Tensor | None = None  # z, (B, T, K)


@contextlib.contextmanager
def _capturing(head: torch.nn.Module) -> Iterator[_HeadCapture]:
    capture = _HeadCapture()

    def hook(module, args, kwargs, output):
        capture.inputs = args[0] if args else next(iter(kwargs.values()))
        capture.outputs = output

    handle = head.register_forward_hook(hook, with_kwargs=True)
    try:
        yield capture
    finally:
        handle.remove()


@contextlib.contextmanager
def _inference_mode(model: torch.nn.Module) -> Iterator[None]:
    """``torch.no_grad()`` and eval mode (no dropout), restoring every module's training flag after."""
    training = {module: module.training for module in model.modules()}
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for module, flag in training.items():
            module.training = flag


def _forward(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Head inputs a (B, T, d), head outputs z (B, T, K) and the logits the model returns (or None).

    Position ids count non-padding tokens (as in generation), so left padding does not shift them.
    """
    base = _unwrapped(model)
    embeddings = base.get_input_embeddings().weight
    if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= embeddings.shape[0]):
        raise InputError(
            f"input_ids range over [{int(input_ids.min())}, {int(input_ids.max())}] but the model embeds ids "
            f"0..{embeddings.shape[0] - 1} (padding included): the batch was tokenized with a tokenizer that "
            "does not belong to this model"
        )
    device = embeddings.device
    inputs = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device), "use_cache": False}
    if "position_ids" in inspect.signature(base.forward).parameters:
        inputs["position_ids"] = (attention_mask.cumsum(dim=1) - 1).clamp_min(0).to(device)
    with _inference_mode(model), _capturing(output_head(model)) as capture:
        outputs = model(**inputs)
    if capture.inputs is None:
        raise InputError(f"{type(base).__name__}'s forward pass never called its output head")
    if capture.outputs.shape[:2] != input_ids.shape:
        raise InputError(
            f"the output head computed logits of shape {tuple(capture.outputs.shape)} for input_ids of shape "
            f"{tuple(input_ids.shape)}: the model must compute logits at every position (logits_to_keep=0)"
        )
    logits = getattr(outputs, "logits", None)
    return capture.inputs, capture.outputs, logits if isinstance(logits, torch.Tensor) else None


# -- per-token a and e ----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class HeadGradientChunk:
    """Scored tokens' head inputs a (N, d) and head-output gradients e (N, K), both float32, with
    their global document indices (N,) and the labels y (N,) that e was computed with."""

    activations: torch.Tensor
    errors: torch.Tensor
    doc_index: torch.Tensor
    targets: torch.Tensor


def _sample_labels(
    probabilities: torch.Tensor, seed: int, doc_index: torch.Tensor, document_positions: torch.Tensor
) -> torch.Tensor:
    """y ~ p by inversion: y = min{k : Σ_{j≤k} p_j > u Σ_j p_j} (float64 sums) with
    u = ``uniforms(seed, Stream.TRUE_FISHER_LABELS, doc_index · 2³² + position in document)``."""
    index = (doc_index.cpu() << POSITION_BITS) + document_positions.cpu()
    u = uniforms(seed, Stream.TRUE_FISHER_LABELS, index.numpy()).to(probabilities.device)
    cumulative = probabilities.double().cumsum(dim=1)
    thresholds = (u * cumulative[:, -1])[:, None]
    labels = torch.searchsorted(cumulative, thresholds, right=True).squeeze(1)
    return labels.clamp_max(probabilities.shape[1] - 1)


@dataclasses.dataclass(frozen=True)
class _ForwardPass:
    """What one inference forward pass of a batch gives the sketch: scored tokens, their documents,
    head inputs a (B, T, d) and head outputs z (B, T, K), and the map from z to the loss's logits."""

    scored: ScoredPositions
    doc_index: torch.Tensor
    activations: torch.Tensor
    head_outputs: torch.Tensor
    transform: LogitTransform

    def scored_flat_positions(self) -> torch.Tensor:
        """Index of each scored token among the flattened (B·T) positions."""
        return self.scored.rows * self.head_outputs.shape[1] + self.scored.positions

    def flat_head(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Views over the B·T positions: head inputs (B·T, d) and head outputs (B·T, K)."""
        batch_size, length, vocab_size = self.head_outputs.shape
        return self.activations.reshape(batch_size * length, -1), self.head_outputs.reshape(batch_size * length, vocab_size)

    def flattened(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``flat_head`` and, on the CPU, the target of each of the B·T positions (−100 where not scored)
        and its document index."""
        activations, head_outputs = self.flat_head()
        length = self.head_outputs.shape[1]
        targets = torch.full((len(head_outputs),), IGNORE_INDEX, dtype=torch.int64)
        targets[self.scored_flat_positions().cpu()] = self.scored.targets.cpu()
        return activations, head_outputs, targets, self.doc_index.repeat_interleave(length)


def _forward_pass(model: torch.nn.Module, batch: Mapping, fisher: str) -> _ForwardPass | None:
    """Check the batch, run the model (None when no token is scored: the model is then not run)."""
    if fisher not in ("empirical", "true"):
        raise InputError(f"unknown fisher type {fisher!r}; choose 'empirical' or 'true'")
    scored = scored_positions(batch)
    doc_index = _document_indices(batch, batch["input_ids"].shape[0])
    if len(scored) == 0:
        return None
    vocab_size = _head_parameters(model)[0].shape[0]
    if fisher == "empirical" and int(scored.targets.max()) >= vocab_size:
        raise InputError(
            f"label id {int(scored.targets.max())} ≥ K={vocab_size} (the head's rows): "
            "the batch was tokenized with a tokenizer that does not belong to this model"
        )
    activations, head_outputs, model_logits = _forward(model, batch["input_ids"], _attention_mask(batch))
    transform = LogitTransform.of(model)
    if model_logits is not None and model_logits.shape == head_outputs.shape:
        first = (scored.rows[0], scored.positions[0])
        transform.check(head_outputs[first], model_logits[first])
    return _ForwardPass(scored, doc_index, activations, head_outputs, transform)


def _check_chunk_size(token_chunk_size: int) -> None:
    if not isinstance(token_chunk_size, int) or token_chunk_size < 1:
        raise InputError(f"token_chunk_size must be a positive int, got {token_chunk_size!r}")


def head_gradient_chunks(
    model: torch.nn.Module, batch: Mapping, *, fisher: str = "empirical", seed: int = 0, token_chunk_size: int = 256
) -> Iterator[HeadGradientChunk]:
    """a and e = ∂ℓ_t/∂z_t of the batch's scored tokens, ``token_chunk_size`` tokens at a time.

    ``fisher="empirical"``: y_t is the next token; ``"true"``: y_t is sampled from p_t (``_sample_labels``),
    so the labels do not depend on batching, padding or device. Yields nothing when no token is scored
    (the model is then not run).
    """
    _check_chunk_size(token_chunk_size)
    forward = _forward_pass(model, batch, fisher)
    if forward is None:
        return
    scored, transform = forward.scored, forward.transform
    device = forward.head_outputs.device
    flat = forward.scored_flat_positions().to(device)  # index_select of rows: a fast gather
    activations, head_outputs = forward.flat_head()
    for start in range(0, len(scored), token_chunk_size):
        chunk = slice(start, start + token_chunk_size)
        logits = transform.apply(head_outputs.index_select(0, flat[chunk]).float())
        probabilities = torch.softmax(logits, dim=-1)
        documents = forward.doc_index[scored.rows[chunk].cpu()]
        if fisher == "empirical":
            targets = scored.targets[chunk].to(device)
        else:
            targets = _sample_labels(probabilities, seed, documents, scored.document_positions[chunk])
        errors = probabilities  # p − onehot(y), in place
        errors[torch.arange(len(targets), device=device), targets] -= 1.0
        yield HeadGradientChunk(
            activations=activations.index_select(0, flat[chunk]).float(),
            errors=transform.head_output_gradient(logits, errors),
            doc_index=documents,
            targets=targets,
        )


def _sketch_from_logits(state: SketchState, forward: _ForwardPass, token_chunk_size: int) -> None:
    """Empirical Fisher of a plain head: ``SketchState.update_from_logits`` on views of consecutive
    positions of the flattened (B·T) batch (unscored positions get target −100), so z is never gathered
    or copied and e never formed."""
    activations, head_outputs, targets, documents = forward.flattened()
    for start in range(0, len(targets), token_chunk_size):
        chunk = slice(start, start + token_chunk_size)
        if (targets[chunk] != IGNORE_INDEX).any():
            state.update_from_logits(activations[chunk], head_outputs[chunk], targets[chunk], documents[chunk])


def sketch_batch(state: SketchState, model: torch.nn.Module, batch: Mapping, *, token_chunk_size: int = 256) -> int:
    """Add a batch's scored tokens to ``state`` and flush it; returns the number of scored tokens.

    ``batch``: ``input_ids`` (B, T), optional ``attention_mask`` (B, T) and ``labels`` (B, T, shifted
    inside), ``doc_index`` (B,) global document indices. A document must not span batches (``flush``
    closes it). Batches without scored tokens change nothing. The empirical Fisher of a head without
    softcapping goes the fast way (``_sketch_from_logits``); the others, and error space "head-input"
    (δ = Wᵀe), through ``head_gradient_chunks``.
    """
    weight = _head_parameters(model)[0]
    if (state.spec.vocab_size, state.spec.d) != tuple(weight.shape):
        raise InputError(
            f"the sketch state is for a head of K={state.spec.vocab_size}, d={state.spec.d} but the model's head is "
            f"{tuple(weight.shape)}: make the spec with spec_for_model(model)"
        )
    _check_chunk_size(token_chunk_size)
    head_input = state.spec.error_space == "head-input"  # δ = Wᵀe: one (N, K) × (K, d) product per chunk
    if state.spec.fisher == "empirical" and LogitTransform.of(model).softcap is None and not head_input:
        forward = _forward_pass(model, batch, "empirical")
        if forward is not None:
            _sketch_from_logits(state, forward, token_chunk_size)
        state.flush()
        return 0 if forward is None else len(forward.scored)
    scored = 0
    for chunk in head_gradient_chunks(
        model, batch, fisher=state.spec.fisher, seed=state.spec.seed, token_chunk_size=token_chunk_size
    ):
        errors = chunk.errors @ weight.to(chunk.errors.device, torch.float32) if head_input else chunk.errors
        state.update(chunk.activations, errors, chunk.doc_index)
        scored += len(chunk.doc_index)
    state.flush()
    return scored


# -- specs ---------------------------------------------------------------------------------------
def pilot_mean(model: torch.nn.Module, tokenizer) -> torch.Tensor:
    """Mean head input a over the scored tokens of the embedded probe documents, float32 (d,)."""
    check_tokenizer_matches(model, tokenizer)
    total, count = torch.zeros(_head_parameters(model)[0].shape[1], dtype=torch.float64), 0
    for text in PROBE_DOCUMENTS:
        input_ids = tokenizer(text, return_tensors="pt", truncation=True, max_length=PROBE_MAX_TOKENS)["input_ids"]
        scored = scored_positions({"input_ids": input_ids})
        if len(scored):
            activations = _forward(model, input_ids, torch.ones_like(input_ids))[0]
            total += activations[scored.rows, scored.positions].double().sum(dim=0).cpu()
            count += len(scored)
    if count == 0:
        raise InputError("the tokenizer turned every probe document into fewer than 2 tokens")
    return (total / count).float()


def _check_same_base_model(like: Signature, model: torch.nn.Module, fingerprint: ModelFingerprint) -> None:
    spec, named = like.spec, like.metadata.get("base_model", "unknown")
    head_shape = tuple(_head_parameters(model)[0].shape)
    theirs = spec.model_fingerprint
    if (spec.vocab_size, spec.d) != head_shape or (theirs and theirs.head_checksum != fingerprint.head_checksum):
        raise InputError(
            f"signature made with another base model (head checksum {theirs.head_checksum if theirs else None} "
            f"vs {fingerprint.head_checksum}; head K×d {spec.vocab_size}×{spec.d} vs {head_shape[0]}×{head_shape[1]}): "
            f"sketch with its base model ({named}) to compare with it"
        )
    if theirs and theirs.tokenizer_checksum and fingerprint.tokenizer_checksum not in (None, theirs.tokenizer_checksum):
        raise InputError(
            f"signature made with another tokenizer (tokenizer checksum {theirs.tokenizer_checksum} vs "
            f"{fingerprint.tokenizer_checksum}): use the tokenizer of its base model ({named})"
        )


def spec_for_model(
    model: torch.nn.Module,
    tokenizer=None,
    *,
    m: int = 4096,
    seed: int = 0,
    estimator: str | None = None,
    granularity: str = "token",
    fisher: str = "empirical",
    reflection: bool | None = None,
    like: Signature | None = None,
    error_space: str = "logits",
) -> SketchSpec:
    """The sketch spec for ``model``: d, K and the fingerprint from its head, and the Householder
    reflection on ``pilot_mean`` (computed on the embedded probe documents, so it needs the tokenizer).

    ``error_space``: "logits" sketches (a, e), "head-input" sketches (a, δ = Wᵀe) (SPEC §2b).
    ``reflection``: None (default) uses it whenever the tokenizer is given; True requires it; False
    goes without. The reflection cuts the standard error of A by about half (benchmarks/README.md).
    Only its use enters the sketch id: signatures whose pilot directions agree within
    ``core.spec.REFLECTION_TOLERANCE`` compare, so pilots computed on other devices in float32
    (which differ in the 8th digit) are fine; a pilot from a bfloat16 run may not be: sketch ``like=``.

    With ``like``, the signature's own spec is returned (the other options are ignored) once the
    model's head checksum (and tokenizer checksum, when both are known) match the signature's
    (a signature without a fingerprint: its d and K).
    """
    if tokenizer is not None:
        check_tokenizer_matches(model, tokenizer)
    fingerprint = model_fingerprint(model, tokenizer)
    if like is not None:
        if not isinstance(like, Signature):
            raise InputError(f"like= takes a Signature, got {type(like).__name__}; load it with Signature.load(path)")
        _check_same_base_model(like, model, fingerprint)
        return like.spec
    vocab_size, d = _head_parameters(model)[0].shape
    spec = SketchSpec(
        d=d, vocab_size=vocab_size, m=m, seed=seed, estimator=estimator or DEFAULT_ESTIMATOR,
        granularity=granularity, fisher=fisher, model_fingerprint=fingerprint, error_space=error_space,
    )
    if reflection is None:
        reflection = tokenizer is not None
    if not reflection:
        return spec
    if tokenizer is None:
        raise InputError("reflection=True computes the pilot mean on a probe text: pass the tokenizer, or reflection=False")
    return spec.with_reflection(pilot_mean(model, tokenizer))
