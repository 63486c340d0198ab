"""Network-level capture (SPEC §2b): the inputs x and output gradients δ of a causal LM's linear modules,
one forward and one backward pass per batch, sketched by ``core.network``.

Forward hooks on the chosen modules keep x at the attended positions; hooks on their outputs' gradients
receive δ during the backward pass and project (x, δ) at once, so a module's tensors are dropped as soon
as its gradient is known. The loss is the summed cross-entropy of the scored tokens (``lm.positions.scored_positions``),
so δ at a position of document b is the gradient of that document's loss (rows never attend to each
other), and δ at the head's output is e = softmax(z) − onehot(y) (chained through softcapping, when the
model caps its logits). The parameters are not differentiated: the input embeddings are made a leaf that
requires grad and ``torch.autograd.grad`` runs to it only; the model stays in eval mode and its ``.grad``
fields are never written.

The module sets are chosen in ``lm.modules``, the spec in ``lm.specs``; ``pipeline.loop`` runs this capture
for a network spec where it runs ``lm.capture.sketch_batch`` for a head spec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch

from fisherhub.core.errors import InputError
from fisherhub.core.network import NetworkBatch, NetworkFeatureMap
from fisherhub.core.spec import SketchSpec
from fisherhub.core.state import SketchState
from fisherhub.lm.capture import inference_mode, model_inputs
from fisherhub.lm.head import HeadModel, input_embeddings
from fisherhub.lm.modules import spec_modules
from fisherhub.lm.positions import attention_mask as batch_attention_mask
from fisherhub.lm.positions import document_indices, scored_positions


# -- one batch ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class _Hooks:
    """Forward hooks on the embeddings (output made a leaf that requires grad) and on each module (x kept
    at the attended positions, a gradient hook on its output that adds (x, δ) to the batch)."""

    batch: NetworkBatch
    attended: torch.Tensor  # indices of the attended positions among the flattened B·T
    inputs: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    embeddings: torch.Tensor | None = None

    def on_embeddings(self, module, args, output):
        self.embeddings = output.detach().requires_grad_(True)
        return self.embeddings

    def on_module(self, index: int):
        def hook(module, args, output):
            if index in self.inputs:
                raise InputError(
                    f"module {self.batch.feature_map.modules[index][0]} ran twice in one forward pass; sketch modules that run once"
                )
            x = args[0]
            self.inputs[index] = x.detach().reshape(-1, x.shape[-1]).index_select(0, self.attended)
            if output.requires_grad:
                output.register_hook(self.on_gradient(index))

        return hook

    def on_gradient(self, index: int):
        def hook(gradient):
            delta = gradient.reshape(-1, gradient.shape[-1]).index_select(0, self.attended)
            self.batch.add(index, self.inputs.pop(index), delta)

        return hook

    def add_gradient_free(self) -> None:
        """Modules the loss does not reach: δ = 0 (their inputs still enter the activation sketch)."""
        for index, x in list(self.inputs.items()):
            out_features = self.batch.feature_map.modules[index][2]
            self.batch.add(index, x, x.new_zeros(len(x), out_features))
        self.inputs.clear()


def _check_states(states: Sequence[SketchState]) -> SketchSpec:
    if not states or not all(isinstance(state, SketchState) and state.spec.modules is not None for state in states):
        raise InputError("sketch_network_batch takes a non-empty list of sketch states of network specs")
    first = states[0].spec
    for state in states[1:]:
        if dataclasses.replace(state.spec, kernel=first.kernel) != first:
            raise InputError("the states of one network batch may differ in their kernel only")
    return first


def sketch_network_batch(
    states: Sequence[SketchState],
    model: torch.nn.Module | HeadModel,
    batch: Mapping,
    *,
    feature_map: NetworkFeatureMap | None = None,
) -> int:
    """One forward and one backward pass of ``batch`` into every state (same spec up to the kernel); returns
    the number of scored tokens. ``batch`` as for ``lm.capture.sketch_batch`` (each row a whole document).
    ``feature_map``: other projections than the spec's (e.g. the head sketch's, to check the head-only case)."""
    spec = _check_states(states)
    model = HeadModel.of(model).model
    named = spec_modules(spec, model)
    scored = scored_positions(batch)
    doc_index = document_indices(batch, batch["input_ids"].shape[0])
    if len(scored) == 0:
        return 0
    input_ids = batch["input_ids"]
    attention_mask = batch_attention_mask(batch)
    embeddings = input_embeddings(model)
    device = embeddings.weight.device
    batch_size, length = input_ids.shape
    attended_mask = attention_mask.bool().flatten()
    scored_mask = torch.zeros(batch_size, length, dtype=torch.bool)
    scored_mask[scored.rows.cpu(), scored.positions.cpu()] = True
    attended = attended_mask.nonzero().flatten()
    positions_doc = doc_index.repeat_interleave(length)[attended]
    network_batch = NetworkBatch(
        feature_map or NetworkFeatureMap.for_spec(spec),
        positions_doc.to(device),
        scored_mask.flatten()[attended].to(device),
        granularity=spec.granularity,
        kernels=[state.spec.kernel for state in states],
    )
    hooks = _Hooks(network_batch, attended.to(device))
    handles = [embeddings.register_forward_hook(hooks.on_embeddings)]
    handles += [module.register_forward_hook(hooks.on_module(i)) for i, module in enumerate(named.values())]
    inputs = model_inputs(model, input_ids, attention_mask, device)
    try:
        with inference_mode(model, gradients=True):
            logits = model(**inputs).logits
            if logits.shape[:2] != input_ids.shape:
                raise InputError(
                    f"the model returned logits of shape {tuple(logits.shape)}: it must score every position"
                )
            rows, positions = scored.rows.to(device), scored.positions.to(device)
            loss = torch.nn.functional.cross_entropy(
                logits[rows, positions].float(), scored.targets.to(device), reduction="sum"
            )
            del logits
            assert hooks.embeddings is not None  # set by the embeddings' hook in the forward pass
            torch.autograd.grad(loss, [hooks.embeddings])
    finally:
        for handle in handles:
            handle.remove()
    hooks.add_gradient_free()
    for state in states:
        state.update(network_batch)
    return len(scored)
