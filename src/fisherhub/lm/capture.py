"""Model capture (SPEC §1): the scored tokens of a batch as ``HeadBatch`` values for the core.

A forward hook on the output head records its input a (the final hidden state, after the final norm) and
its output z during an inference forward pass. The scored tokens are then handed to the core in chunks of
``token_chunk_size`` (memory O(chunk · K), whatever the sequence length):

- empirical Fisher of a plain head: views of z and a over consecutive positions with the next tokens y
  (−100 where a position is not scored); the core projects e = softmax(z) − onehot(y) without forming it;
- otherwise, in float32 whatever the model's dtype, ``p = softmax(ẑ)`` and ``e = ∂ℓ/∂z`` with y the next token
  or a label sampled from p ("true" Fisher), through the chain rule of the logit scale s and softcapping
  ``e = s·(p − onehot(y)) ∘ (1 − (ẑ/c)²)`` for ``ẑ = c·tanh(s·z/c)``, so g = e aᵀ stays the per-token head
  gradient.

Any other change the model makes to the logits after its head is detected on the first scored token of each
batch and refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Iterator, Mapping

import torch

from fisherhub.core.batch import IGNORE_INDEX, HeadBatch
from fisherhub.core.errors import InputError
from fisherhub.core.hashing import Stream, uniforms
from fisherhub.core.registry import ERROR_SPACES, FISHER_TYPES
from fisherhub.core.state import SketchState
from fisherhub.lm.head import HeadModel, input_embeddings
from fisherhub.lm.positions import ScoredPositions, attention_mask, document_indices, scored_positions

#: the true-Fisher label of a token is drawn with the uniform of index doc_index · 2³² + position.
POSITION_BITS = 32
#: scored tokens handed to the core at a time (its scratch memory is about this many rows of K floats).
TOKEN_CHUNK_SIZE = 256


@dataclasses.dataclass
class _HeadCapture:
    inputs: torch.Tensor | None = None  # a, (B, T, d)
    outputs: torch.Tensor | None = None  # z, (B, T, K)


class _HeadReached(Exception):
    """Raised by the head's pre-hook when only its input is wanted: the head's GEMM is never run."""


@contextlib.contextmanager
def _capturing(head: torch.nn.Module, inputs_only: bool) -> Iterator[_HeadCapture]:
    capture = _HeadCapture()

    def before(module, args, kwargs):
        capture.inputs = args[0] if args else next(iter(kwargs.values()))
        raise _HeadReached

    def after(module, args, kwargs, output):
        capture.inputs = args[0] if args else next(iter(kwargs.values()))
        capture.outputs = output

    if inputs_only:
        handle = head.register_forward_pre_hook(before, with_kwargs=True)
    else:
        handle = head.register_forward_hook(after, with_kwargs=True)
    try:
        yield capture
    finally:
        handle.remove()


@contextlib.contextmanager
def inference_mode(model: torch.nn.Module, gradients: bool = False) -> Iterator[None]:
    """Eval mode (no dropout) and ``torch.no_grad()`` (``torch.enable_grad()`` with ``gradients``), restoring
    every module's training flag after."""
    training = {module: module.training for module in model.modules()}
    model.eval()
    try:
        with torch.enable_grad() if gradients else torch.no_grad():
            yield
    finally:
        for module, flag in training.items():
            module.training = flag


def model_inputs(model: torch.nn.Module, input_ids: torch.Tensor, mask: torch.Tensor, device) -> dict:
    """The forward pass's keyword arguments on ``device``, without a cache; position ids count non-padding
    tokens (as in generation) where the model takes them, so left padding does not shift them."""
    inputs = {"input_ids": input_ids.to(device), "attention_mask": mask.to(device), "use_cache": False}
    if "position_ids" in inspect.signature(model.forward).parameters:
        inputs["position_ids"] = (mask.cumsum(dim=1) - 1).clamp_min(0).to(device)
    return inputs


def forward(
    head: HeadModel, input_ids: torch.Tensor, mask: torch.Tensor, *, inputs_only: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Head inputs a (B, T, d), head outputs z (B, T, K) and the logits the model returns (or None); with
    ``inputs_only`` the forward pass stops at the head (z and logits are None).
    """
    base = head.base
    embeddings = input_embeddings(base).weight
    if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= embeddings.shape[0]):
        raise InputError(
            f"input_ids range over [{int(input_ids.min())}, {int(input_ids.max())}] but the model embeds ids "
            f"0..{embeddings.shape[0] - 1} (padding included): the batch was tokenized with a tokenizer that "
            "does not belong to this model"
        )
    inputs = model_inputs(base, input_ids, mask, embeddings.device)
    outputs = None
    with inference_mode(head.model), _capturing(head.head, inputs_only) as capture, contextlib.suppress(_HeadReached):
        outputs = head.model(**inputs)
    if capture.inputs is None:
        raise InputError(f"{type(base).__name__}'s forward pass never called its output head")
    if inputs_only:
        return capture.inputs, None, None
    assert capture.outputs is not None  # the forward hook ran: it sets both
    if capture.outputs.shape[:2] != input_ids.shape:
        raise InputError(
            f"the output head computed logits of shape {tuple(capture.outputs.shape)} for input_ids of shape "
            f"{tuple(input_ids.shape)}: the model must compute logits at every position (logits_to_keep=0)"
        )
    logits = getattr(outputs, "logits", None)
    return capture.inputs, capture.outputs, logits if isinstance(logits, torch.Tensor) else None


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
    """One inference forward pass of a batch, flattened over its B·T positions: head inputs (B·T, d), head
    outputs (B·T, K), each position's target (−100 where not scored) and document index, and the scored
    tokens with their flat positions (ascending)."""

    scored: ScoredPositions
    flat_positions: torch.Tensor
    activations: torch.Tensor
    head_outputs: torch.Tensor
    targets: torch.Tensor
    doc_index: torch.Tensor


def _forward_pass(head: HeadModel, batch: Mapping, fisher: str) -> _ForwardPass | None:
    """Check the batch, run the model (None when no token is scored: the model is then not run)."""
    if fisher not in FISHER_TYPES:
        raise InputError(f"unknown fisher type {fisher!r}; choose one of {', '.join(FISHER_TYPES)}")
    scored = scored_positions(batch)
    batch_size, length = batch["input_ids"].shape
    doc_index = document_indices(batch, batch_size)
    if len(scored) == 0:
        return None
    if fisher == "empirical" and int(scored.targets.max()) >= head.vocab_size:
        raise InputError(
            f"label id {int(scored.targets.max())} ≥ K={head.vocab_size} (the head's rows): "
            "the batch was tokenized with a tokenizer that does not belong to this model"
        )
    activations, head_outputs, model_logits = forward(head, batch["input_ids"], attention_mask(batch))
    assert head_outputs is not None  # a whole forward pass (not inputs_only)
    if model_logits is not None and model_logits.shape == head_outputs.shape:
        first = (scored.rows[0], scored.positions[0])
        head.transform.check(head_outputs[first], model_logits[first])
    flat_positions = (scored.rows * length + scored.positions).cpu()
    targets = torch.full((batch_size * length,), IGNORE_INDEX, dtype=torch.int64)
    targets[flat_positions] = scored.targets.cpu()
    return _ForwardPass(
        scored=scored,
        flat_positions=flat_positions,
        activations=activations.reshape(batch_size * length, -1),
        head_outputs=head_outputs.reshape(batch_size * length, head.vocab_size),
        targets=targets,
        doc_index=doc_index.repeat_interleave(length),
    )


def head_batches(
    model: torch.nn.Module | HeadModel,
    batch: Mapping,
    *,
    fisher: str = "empirical",
    seed: int = 0,
    token_chunk_size: int = TOKEN_CHUNK_SIZE,
    materialize_errors: bool = False,
    error_space: str = ERROR_SPACES[0],
) -> Iterator[HeadBatch]:
    """The batch's scored tokens as ``HeadBatch`` values of ``token_chunk_size`` scored tokens each.

    ``batch``: ``input_ids`` (B, T), optional ``attention_mask`` and ``labels`` (B, T, shifted inside),
    ``doc_index`` (B,) global document indices. The empirical Fisher of a plain head (ẑ = z) is handed
    over as logits and targets (views, nothing copied), unless ``materialize_errors``; every other case as
    errors e = ∂ℓ_t/∂z_t (float32) with the labels they were computed with (``fisher="true"``: y_t sampled from
    p_t with ``_sample_labels``, so the labels do not depend on batching, padding or device). Yields nothing
    when no token is scored (the model is then not run). ``error_space="head-input"`` hands over
    δ = Wᵀe = ∂ℓ_t/∂a_t (N, d) instead of e: one (N, K) × (K, d) product per chunk, no backward pass.
    """
    if not isinstance(token_chunk_size, int) or token_chunk_size < 1:
        raise InputError(f"token_chunk_size must be a positive int, got {token_chunk_size!r}")
    head = HeadModel.of(model)
    pass_ = _forward_pass(head, batch, fisher)
    if pass_ is None:
        return
    head_input = error_space == "head-input"
    from_logits = fisher == "empirical" and head.transform.is_identity and not materialize_errors and not head_input
    device = pass_.head_outputs.device
    for start in range(0, len(pass_.flat_positions), token_chunk_size):
        chunk = pass_.flat_positions[start : start + token_chunk_size]
        if from_logits:
            span = slice(int(chunk[0]), int(chunk[-1]) + 1)
            yield HeadBatch(
                activations=pass_.activations[span],
                doc_index=pass_.doc_index[span],
                logits=pass_.head_outputs[span],
                targets=pass_.targets[span],
            )
            continue
        rows = chunk.to(device)  # index_select of rows: a fast gather
        logits = head.transform.apply(pass_.head_outputs.index_select(0, rows).float())
        probabilities = torch.softmax(logits, dim=-1)
        documents = pass_.doc_index[chunk]
        if fisher == "empirical":
            targets = pass_.targets[chunk].to(device)
        else:
            positions = pass_.scored.document_positions[start : start + token_chunk_size]
            targets = _sample_labels(probabilities, seed, documents, positions)
        errors = probabilities  # p − onehot(y), in place
        errors[torch.arange(len(targets), device=device), targets] -= 1.0
        errors = head.transform.head_output_gradient(logits, errors)
        if head_input:
            errors = errors @ head.weight.detach().to(errors.device, torch.float32)
        yield HeadBatch(
            activations=pass_.activations.index_select(0, rows).float(),
            doc_index=documents,
            errors=errors,
            targets=targets,
        )


def sketch_batch(
    state: SketchState, model: torch.nn.Module | HeadModel, batch: Mapping, *, token_chunk_size: int = TOKEN_CHUNK_SIZE
) -> int:
    """Add a batch's scored tokens to ``state`` (``head_batches`` → ``SketchState.update``) and flush it;
    returns the number of scored tokens. A document must not span batches (``flush`` closes it)."""
    head = HeadModel.of(model)
    if (state.spec.vocab_size, state.spec.d) != (head.vocab_size, head.d):
        raise InputError(
            f"the sketch state is for a head of K={state.spec.vocab_size}, d={state.spec.d} but the model's head is "
            f"({head.vocab_size}, {head.d}): make the spec with spec_for_model(model)"
        )
    scored = 0
    for head_batch in head_batches(
        head,
        batch,
        fisher=state.spec.fisher,
        seed=state.spec.seed,
        token_chunk_size=token_chunk_size,
        error_space=state.spec.error_space,
    ):
        state.update(head_batch)
        rows = head_batch.scored_rows()
        scored += len(head_batch) if rows is None else len(rows)
    state.flush()
    return scored
