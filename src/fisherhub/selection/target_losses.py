"""The target's per-document losses under the base model or under one adapter on it (``TargetLosses``), with the
part every adapter shares with the base model computed once.

An adapter whose modules all lie in decoder layers L and above leaves layers 0 … L−1 as they are in the base
model, so the input of layer L is the base model's own. The first adapter measured that starts at L runs the
full forward pass and keeps that input, batch by batch (the output of layer L−1, at most ``PREFIX_CACHE_BYTES``
of it: batches × tokens × d numbers); every later one starting at L runs layers L … and the head only, each layer
below replaying what was kept instead of running (on SmolLM2 with the suites' adapters, 20 of 30 layers are
skipped). The replay is used only where it gives the full forward's logits: the model's decoder layers are one
``ModuleList`` (``lm.modules.decoder_layers``), every adapted module (peft's tuner layers, modules saved whole)
lies in one of its layers, and, once per L, the target's first tokens replayed give the logits of the full
forward pass. Elsewhere (an adapter on the embeddings or the head, a model whose forward pass reads its layers
other than one after the other, a batch past the bound) the full forward pass runs.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import weakref
from collections.abc import Iterable, Iterator, Sequence

import torch

from fisherhub.core.batch import IGNORE_INDEX
from fisherhub.core.errors import InputError
from fisherhub.lm.modules import decoder_layers, pass_share

#: the most bytes of the base model's hidden states kept for the adapters that share them; batches past it are
#: measured by the full forward pass
PREFIX_CACHE_BYTES = 2**30
#: tokens of the target's first document that check, once per layer L, that a replay from L is exact
CHECK_TOKENS = 32
#: largest difference of a replayed logit from the full forward's, relative to the largest logit
CHECK_TOLERANCE = 1e-4


@dataclasses.dataclass(frozen=True)
class DocumentLosses:
    """Σ −log p over the scored tokens of each target document (``nll``) and their number (``tokens``)."""

    nll: torch.Tensor  # (D,) float64
    tokens: torch.Tensor  # (D,) float64

    @property
    def loss(self) -> float:
        """The mean loss per scored token, Σ nll / Σ tokens."""
        return float(self.nll.sum() / self.tokens.sum())


def first_adapted_layer(model, layers: torch.nn.ModuleList) -> int | None:
    """The index of the first of ``layers`` holding a module of ``model``'s adapters (peft's tuner layers and
    modules saved whole); 0 when one lies outside them (the embeddings, the head); None without adapters."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils import AuxiliaryTrainingWrapper

    index = {id(module): i for i, layer in enumerate(layers) for module in layer.modules()}
    adapted = (m for m in model.modules() if isinstance(m, (BaseTunerLayer, AuxiliaryTrainingWrapper)))
    return min((index.get(id(module), 0) for module in adapted), default=None)


def _copied(output):
    """A layer's output (a tensor, or a tuple holding tensors) with its tensors copied."""
    if isinstance(output, torch.Tensor):
        return output.clone()
    return type(output)(_copied(item) if isinstance(item, torch.Tensor) else item for item in output)


def _bytes(output) -> int:
    tensors = [output] if isinstance(output, torch.Tensor) else [t for t in output if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


@contextlib.contextmanager
def _replaying(layers: Sequence[torch.nn.Module], output) -> Iterator[None]:
    """Within: each of ``layers`` returns a copy of ``output`` instead of running (their own ``forward`` back
    afterwards, also one set on the instance, as ``accelerate``'s hooks are)."""

    def replay(*args, **kwargs):
        return _copied(output)

    saved = [layer.__dict__.get("forward") for layer in layers]
    try:
        for layer in layers:
            layer.forward = replay
        yield
    finally:
        for layer, forward in zip(layers, saved):
            if forward is None:
                del layer.forward
            else:
                layer.forward = forward


@contextlib.contextmanager
def _recording(layer: torch.nn.Module) -> Iterator[list]:
    """Within: ``layer``'s output of each call, copied, appended to the list yielded."""
    outputs: list = []
    handle = layer.register_forward_hook(lambda module, args, output: outputs.append(_copied(output)))
    try:
        yield outputs
    finally:
        handle.remove()


@dataclasses.dataclass
class _SharedPrefix:
    """What the adapters on one base model share: per (batch, layer L) the base model's output of layer L − 1,
    whether a replay from L is exact, the layers they come from (a weak reference) and the bytes kept."""

    limit: int
    hidden: dict[tuple[int, int], object] = dataclasses.field(default_factory=dict)
    exact: dict[int, bool] = dataclasses.field(default_factory=dict)
    layers: weakref.ref | None = None
    held: int = 0

    def bind(self, layers: torch.nn.ModuleList) -> None:
        """Forget what was kept of another model's layers."""
        if self.layers is None or self.layers() is not layers:
            self.hidden, self.exact, self.layers, self.held = {}, {}, weakref.ref(layers), 0

    def keep(self, key: tuple[int, int], output) -> None:
        """Keep ``output`` under ``key`` if the bytes kept stay within ``limit``."""
        size = _bytes(output)
        if self.held + size <= self.limit:
            self.hidden[key] = output
            self.held += size


class TargetLosses:
    """The target's batches (``data.batches.Batch``: label t predicted from positions < t, −100 unscored), which
    measure a model's per-document losses on them (``losses``), sharing the base model's hidden states among the
    adapters measured in turn on one base model (``max_cache_bytes`` of them at most; the module's docstring).
    ``subset`` keeps some batches and shares what is kept; ``regrouped`` takes other batches and shares only the
    replay checks; iterating gives the batches. ``spent``: the documents measured so far, each counted as the
    share of a full forward pass it ran (``lm.modules.pass_share``; 1 without a replay)."""

    def __init__(self, batches: Iterable, max_cache_bytes: int = PREFIX_CACHE_BYTES):
        self.batches = list(batches)
        self.positions = tuple(range(len(self.batches)))
        self._prefix = _SharedPrefix(max_cache_bytes)
        self.spent = 0.0

    def __iter__(self) -> Iterator:
        return (self.batches[position] for position in self.positions)

    def __len__(self) -> int:
        return len(self.positions)

    def subset(self, indices: Iterable[int]) -> TargetLosses:
        """The batches at ``indices`` (positions in this one), sharing the hidden states kept."""
        part = copy.copy(self)
        part.positions = tuple(self.positions[i] for i in indices)
        return part

    def regrouped(self, batches: Iterable) -> TargetLosses:
        """Other ``batches`` (other documents, or these grouped otherwise), sharing the replay checks made here
        (once per base model and layer) but none of the hidden states kept, which belong to these batches."""
        other = TargetLosses(batches, self._prefix.limit)
        other._prefix.exact, other._prefix.layers = self._prefix.exact, self._prefix.layers
        return other

    def losses(self, model) -> DocumentLosses:
        """Per-document NLL sums under ``model`` (the base model, or a ``PeftModel`` on it) of every scored token,
        documents in the order the batches hold them; layers below the adapter's first replayed where exact."""
        device = next(model.parameters()).device
        layers = decoder_layers(model)
        first = None if layers is None else first_adapted_layer(model, layers)
        nll, tokens = [], []
        with torch.no_grad():
            shared = first if first and self.positions and self._replay_is_exact(model, layers, first) else None
            share = 1.0 if shared is None else pass_share(model, shared)
            for position in self.positions:
                batch = self.batches[position]
                inputs = {
                    "input_ids": batch.input_ids.to(device),
                    "attention_mask": batch.attention_mask.to(device),
                    "use_cache": False,
                }
                if shared is None:
                    logits = model(**inputs).logits
                    self.spent += len(batch.doc_index)
                else:
                    logits, replayed = self._logits(model, layers, shared, position, inputs)
                    self.spent += len(batch.doc_index) * (share if replayed else 1.0)
                labels = batch.labels[:, 1:].to(device)
                scored = labels != IGNORE_INDEX
                per_token = torch.nn.functional.cross_entropy(
                    logits[:, :-1].float().flatten(0, 1), labels.clamp_min(0).flatten(), reduction="none"
                ).view_as(labels)
                nll.append((per_token * scored).sum(dim=1).double().cpu())
                tokens.append(scored.sum(dim=1).double().cpu())
        if not nll:
            raise InputError("the target has no documents to measure the adapters' loss on")
        return DocumentLosses(torch.cat(nll), torch.cat(tokens))

    def _logits(self, model, layers, first: int, position: int, inputs: dict) -> tuple[torch.Tensor, bool]:
        """``model``'s logits of one batch, and whether the layers below ``first`` were replayed from what was
        kept (else the full forward pass ran, keeping their output within the bound)."""
        kept = self._prefix.hidden.get((position, first))
        if kept is not None:
            with _replaying(layers[:first], kept):
                return model(**inputs).logits, True
        with _recording(layers[first - 1]) as outputs:
            logits = model(**inputs).logits
        self._prefix.keep((position, first), outputs[0])
        return logits, False

    def _replay_is_exact(self, model, layers, first: int) -> bool:
        """Whether a replay from layer ``first`` gives the full forward's logits on the first ``CHECK_TOKENS``
        tokens of the target's first document (once per layer and base model; False where it fails, and not
        decided under an adapter whose logits are not finite)."""
        self._prefix.bind(layers)
        if first not in self._prefix.exact:
            batch = self.batches[0]
            length = min(CHECK_TOKENS, int(batch.attention_mask[0].sum()))
            ids = batch.input_ids[:1, :length].to(next(model.parameters()).device)
            inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "use_cache": False}
            with _recording(layers[first - 1]) as outputs:
                full = model(**inputs).logits.float()
            if not bool(torch.isfinite(full).all()):
                return False
            try:
                with _replaying(layers[:first], outputs[0]):
                    replayed = model(**inputs).logits.float()
                gap = float((replayed - full).abs().max())
            except Exception:  # noqa: BLE001 (a forward pass that cannot replay its layers: the full forward for it)
                gap = float("inf")
            self._prefix.exact[first] = gap <= CHECK_TOLERANCE * float(full.abs().max())
        return self._prefix.exact[first]
