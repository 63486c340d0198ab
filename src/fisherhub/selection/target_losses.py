"""The target's per-document losses under the base model or under one adapter on it (``TargetLosses``), with the
part every adapter shares with the base model computed once.

An adapter whose modules all lie in decoder layers L and above leaves layers 0 … L−1 as they are in the base
model, so the input of layer L is the base model's own. The base model's pass keeps it, document by document, for
the layers named beforehand (``keep_prefix_at``: those the adapters' configs start at), and so does the first
adapter measured that starts at another L (at most ``PREFIX_CACHE_BYTES`` of it: tokens × d numbers per layer);
an adapter starting at a kept L runs layers L … and the head only, each layer below replaying what was kept
instead of running (on SmolLM2 with the suites' adapters, 20 of 30 layers are skipped). The replay is used only
where it gives the full forward's logits: the model's decoder layers are one ``ModuleList``
(``lm.modules.decoder_layers``), every adapted module (peft's tuner layers, modules saved whole) lies in one of
its layers, every document of the batch was kept with the same tokens, and, once per L, the target's first
tokens replayed give the logits of the full forward pass. Elsewhere (an adapter on the embeddings or the head, a
model whose forward pass reads its layers other than one after the other, a document past the bound) the full
forward pass runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Iterable, Iterator, Sequence

import torch

from fisherhub.core.batch import IGNORE_INDEX
from fisherhub.core.errors import InputError
from fisherhub.lm.modules import decoder_layers, pass_share

#: the most bytes of the base model's hidden states kept for the adapters that share them; a batch with a document
#: past it is measured by the full forward pass
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


def _tensors(output) -> list[torch.Tensor]:
    """The tensors of a layer's output (a tensor, or a tuple holding tensors)."""
    return [output] if isinstance(output, torch.Tensor) else [t for t in output if isinstance(t, torch.Tensor)]


def _mapped(output, change):
    """``output`` with ``change`` applied to each of its tensors."""
    if isinstance(output, torch.Tensor):
        return change(output)
    return type(output)(change(item) if isinstance(item, torch.Tensor) else item for item in output)


def _copied(output):
    """A layer's output with its tensors copied."""
    return _mapped(output, torch.Tensor.clone)


def _stacked(rows: Sequence):
    """Layer outputs of single documents (each tensor one row) as the output of their batch."""
    if isinstance(rows[0], torch.Tensor):
        return torch.cat(list(rows))
    return type(rows[0])(
        torch.cat([row[i] for row in rows]) if isinstance(item, torch.Tensor) else item
        for i, item in enumerate(rows[0])
    )


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
def _recording(layers: Sequence[torch.nn.Module]) -> Iterator[list[list]]:
    """Within: each of ``layers``' output of each call, copied, appended to its list of those yielded."""
    outputs: list[list] = [[] for _ in layers]
    handles = [
        layer.register_forward_hook(lambda module, args, output, kept=kept: kept.append(_copied(output)))
        for layer, kept in zip(layers, outputs)
    ]
    try:
        yield outputs
    finally:
        for handle in handles:
            handle.remove()


@dataclasses.dataclass
class _SharedPrefix:
    """What the adapters on one base model share: per layer L and document, the base model's output of layer
    L − 1 at that document's tokens (with the tokens, to find it again in any batch); whether a replay from L is
    exact; the layers they come from (a weak reference) and the bytes kept."""

    limit: int
    hidden: dict[int, dict[int, tuple[torch.Tensor, object]]] = dataclasses.field(default_factory=dict)
    exact: dict[int, bool] = dataclasses.field(default_factory=dict)
    layers: weakref.ref | None = None
    held: int = 0

    def bind(self, layers: torch.nn.ModuleList) -> None:
        """Forget what was kept of another model's layers."""
        if self.layers is None or self.layers() is not layers:
            self.hidden, self.exact, self.layers, self.held = {}, {}, weakref.ref(layers), 0

    def keep(self, first: int, batch, output) -> None:
        """Keep each right-padded document's rows of ``output`` (layer ``first`` − 1's, of ``batch``), up to its
        length, while the bytes kept stay within ``limit``; nothing of an output whose tensors are not
        (documents, tokens, …)."""
        shape = tuple(batch.input_ids.shape)
        if any(t.dim() < 2 or tuple(t.shape[:2]) != shape for t in _tensors(output)):
            return
        kept = self.hidden.setdefault(first, {})
        for row, document in enumerate(batch.doc_index.tolist()):
            tokens = _document_tokens(batch, row)
            if tokens is None or document in kept:
                continue
            rows = slice(row, row + 1)
            columns = slice(0, len(tokens))
            part = _mapped(output, lambda t, rows=rows, columns=columns: t[rows, columns].clone())
            size = sum(t.numel() * t.element_size() for t in _tensors(part))
            if self.held + size <= self.limit:
                kept[document] = (tokens, part)
                self.held += size

    def kept(self, first: int, batch):
        """The output of layer ``first`` − 1 for ``batch``, from the rows kept (zeros at the padding, which no
        document's tokens attend to); None unless every one of its documents was kept with the same tokens."""
        kept, rows = self.hidden.get(first, {}), []
        for row, document in enumerate(batch.doc_index.tolist()):
            found, tokens = kept.get(document), _document_tokens(batch, row)
            if found is None or tokens is None or not torch.equal(found[0], tokens):
                return None
            rows.append(_mapped(found[1], lambda t: _padded(t, batch.input_ids.shape[1])))
        return _stacked(rows) if rows else None


def _document_tokens(batch, row: int) -> torch.Tensor | None:
    """The token ids of ``batch``'s document ``row`` without its padding; None unless it is right-padded."""
    mask = batch.attention_mask[row]
    length = int(mask.sum())
    return batch.input_ids[row, :length] if bool(mask[:length].all()) else None


def _padded(part: torch.Tensor, length: int) -> torch.Tensor:
    """``part`` (1, n, …) with zeros after its n positions up to ``length``."""
    return torch.cat([part, part.new_zeros(part.shape[0], length - part.shape[1], *part.shape[2:])], dim=1)


class TargetLosses:
    """The target's batches (``data.batches.Batch``: label t predicted from positions < t, −100 unscored), which
    measure a model's per-document losses on them (``losses``), sharing the base model's hidden states among the
    adapters measured on one base model (``max_cache_bytes`` of them at most; the module's docstring).
    ``keep_prefix_at`` names the layers the base model's pass keeps; ``regrouped`` takes other batches of the same
    documents (some of them, or grouped otherwise), sharing what is kept; iterating gives the batches. ``spent``: the documents measured so far, each counted as the share of a full forward pass it ran
    (``lm.modules.pass_share``; 1 without a replay)."""

    def __init__(self, batches: Iterable, max_cache_bytes: int = PREFIX_CACHE_BYTES):
        self.batches = list(batches)
        self._prefix = _SharedPrefix(max_cache_bytes)
        self.prefix_layers: tuple[int, ...] = ()
        self.spent = 0.0

    def __iter__(self) -> Iterator:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)

    def regrouped(self, batches: Iterable) -> TargetLosses:
        """Other ``batches`` of these documents (some of them, or grouped otherwise), sharing the hidden states
        kept (a document's, where its tokens are the same) and the replay checks."""
        other = TargetLosses(batches, self._prefix.limit)
        other._prefix, other.prefix_layers = self._prefix, self.prefix_layers
        return other

    def keep_prefix_at(self, model, firsts: Iterable[int]) -> bool:
        """Have the base ``model``'s pass keep, for every document, the input of each decoder layer in ``firsts``
        (those above 0), so that every adapter starting at one replays it, the first too; False (nothing named)
        without decoder layers or a hidden size in the (text) config, without such a layer, or when the inputs
        would pass the bytes still free (the documents' tokens × the hidden size × the parameters' element size,
        per layer)."""
        wanted = tuple(sorted({first for first in firsts if first > 0}))
        text_config = getattr(getattr(model, "config", None), "get_text_config", None)
        width = getattr(text_config(), "hidden_size", None) if callable(text_config) else None
        if decoder_layers(model) is None or not wanted or not isinstance(width, int):
            return False
        size = next(model.parameters()).element_size()
        needed = sum(int(batch.attention_mask.sum()) for batch in self) * width * size * len(wanted)
        if needed > self._prefix.limit - self._prefix.held:
            return False
        self.prefix_layers = wanted
        return True

    def losses(self, model) -> DocumentLosses:
        """Per-document NLL sums under ``model`` (the base model, or a ``PeftModel`` on it) of every scored token,
        documents in the order the batches hold them; layers below the adapter's first replayed where exact."""
        device = next(model.parameters()).device
        layers = decoder_layers(model)
        first = None if layers is None else first_adapted_layer(model, layers)
        nll, tokens = [], []
        with torch.no_grad():
            shared = first if first and self.batches and self._replay_is_exact(model, layers, first) else None
            share = 1.0 if shared is None else pass_share(model, shared)
            for batch in self.batches:
                inputs = {
                    "input_ids": batch.input_ids.to(device),
                    "attention_mask": batch.attention_mask.to(device),
                    "use_cache": False,
                }
                if first is None and layers is not None and self.prefix_layers:
                    logits, replayed = self._kept_logits(model, layers, self.prefix_layers, batch, inputs), False
                elif shared is None:
                    logits, replayed = model(**inputs).logits, False
                else:
                    logits, replayed = self._logits(model, layers, shared, batch, inputs)
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

    def _kept_logits(self, model, layers, firsts: Sequence[int], batch, inputs: dict) -> torch.Tensor:
        """``model``'s logits of one batch by the full forward pass, keeping the output of the layer below each
        of ``firsts`` for its documents, within the bound."""
        self._prefix.bind(layers)
        with _recording([layers[first - 1] for first in firsts]) as outputs:
            logits = model(**inputs).logits
        for first, output in zip(firsts, outputs):
            self._prefix.keep(first, batch, output[0])
        return logits

    def _logits(self, model, layers, first: int, batch, inputs: dict) -> tuple[torch.Tensor, bool]:
        """``model``'s logits of one batch, and whether the layers below ``first`` were replayed from what was
        kept (else the full forward pass ran, keeping their output within the bound)."""
        kept = self._prefix.kept(first, batch)
        if kept is not None:
            with _replaying(layers[:first], kept):
                return model(**inputs).logits, True
        return self._kept_logits(model, layers, (first,), batch, inputs), False

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
            with _recording([layers[first - 1]]) as outputs:
                full = model(**inputs).logits.float()
            if not bool(torch.isfinite(full).all()):
                return False
            try:
                with _replaying(layers[:first], outputs[0][0]):
                    replayed = model(**inputs).logits.float()
                gap = float((replayed - full).abs().max())
            except Exception:  # noqa: BLE001 (a forward pass that cannot replay its layers: the full forward for it)
                gap = float("inf")
            self._prefix.exact[first] = gap <= CHECK_TOLERANCE * float(full.abs().max())
        return self._prefix.exact[first]
