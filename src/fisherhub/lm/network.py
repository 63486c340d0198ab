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

Module sets: a list of names or suffixes (``"q_proj"`` matches ``model.layers.3.self_attn.q_proj``),
``"all-linear"`` (every ``nn.Linear`` / ``Conv1D`` but the output head, as in PEFT), or the target modules
of LoRA adapters (their ``adapter_config.json``, matched by PEFT's own rule).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import torch
from transformers.pytorch_utils import Conv1D

from fisherhub.core.errors import InputError
from fisherhub.core.network import NetworkBatch, NetworkFeatureMap, NetworkSketchState
from fisherhub.core.registry import KERNELS
from fisherhub.core.signature import Signature
from fisherhub.core.spec import SketchSpec
from fisherhub.data.documents import DocumentStream, check_has_documents
from fisherhub.lm.capture import inference_mode, model_inputs
from fisherhub.lm.head import HeadModel
from fisherhub.lm.positions import attention_mask as batch_attention_mask
from fisherhub.lm.positions import document_indices, scored_positions, within_model_context
from fisherhub.lm.specs import check_spec_head
from fisherhub.options import DataArgs, RunOptions, SpecOptions

#: module types whose weight gradient is δ xᵀ (``Conv1D``, GPT-2's, stores it transposed: the kernel is the same).
LINEAR_TYPES = (torch.nn.Linear, Conv1D)
ALL_LINEAR = "all-linear"


# -- which modules ----------------------------------------------------------------------------------
def _module_shape(module: torch.nn.Module) -> tuple[int, int]:
    """(in_features, out_features) of a linear module."""
    if isinstance(module, Conv1D):
        return tuple(module.weight.shape)
    return module.in_features, module.out_features


def _check_plain_model(model: torch.nn.Module) -> None:
    if hasattr(model, "peft_config"):
        raise InputError(
            "network sketches describe the base model: pass the transformers model without its PEFT adapters "
            "(e.g. model.get_base_model() after unloading, or the model loaded before get_peft_model)"
        )


def _adapter_configs(adapters) -> list:
    """PEFT configs of ``adapters``: paths or Hub ids (their adapter_config.json) or ``PeftConfig``s."""
    import peft

    if isinstance(adapters, (str, peft.PeftConfig)) or not isinstance(adapters, Iterable):
        adapters = [adapters]
    configs = []
    for adapter in adapters:
        if isinstance(adapter, peft.PeftConfig):
            configs.append(adapter)
            continue
        try:
            configs.append(peft.PeftConfig.from_pretrained(str(adapter)))
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the adapter config of {adapter!r} (adapter_config.json): {exc}") from exc
    if not configs:
        raise InputError("adapters= is empty: give at least one adapter whose target modules to sketch")
    return configs


def linear_modules(
    model: torch.nn.Module, modules: str | Sequence[str] | None = None, *, adapters=None
) -> list[tuple[str, torch.nn.Module]]:
    """The linear modules to sketch, in the model's order, as (name, module).

    ``modules``: ``"all-linear"`` or a list of names / suffixes (each must match); ``adapters`` (when
    ``modules`` is None): one or more LoRA adapters, whose target modules are taken (their union).
    """
    from peft.tuners.tuners_utils import check_target_module_exists

    _check_plain_model(model)
    head = HeadModel.of(model).head
    linear = [(name, module) for name, module in model.named_modules() if isinstance(module, LINEAR_TYPES)]
    if (modules is None) == (adapters is None):
        raise InputError("name the modules to sketch: modules='all-linear' or a list of names, or adapters=[...] (one of the two)")
    if modules == ALL_LINEAR:
        selected = [(name, module) for name, module in linear if module is not head]
    elif modules is not None:
        if isinstance(modules, str) or not all(isinstance(entry, str) for entry in modules):
            raise InputError(f"modules must be {ALL_LINEAR!r} or a list of module names/suffixes, got {modules!r}")
        unmatched = [entry for entry in modules if not any(name == entry or name.endswith(f".{entry}") for name, _ in linear)]
        if unmatched:
            examples = ", ".join(name for name, _ in linear[:4])
            raise InputError(f"no linear module matches {unmatched} (the model's linear modules are named like {examples}, ...)")
        selected = [(name, module) for name, module in linear if any(name == e or name.endswith(f".{e}") for e in modules)]
    else:
        configs = _adapter_configs(adapters)
        everything = any(config.target_modules == ALL_LINEAR for config in configs)
        selected = [
            (name, module) for name, module in linear
            if (everything and module is not head) or any(check_target_module_exists(config, name) for config in configs)
        ]
    if not selected:
        raise InputError("no linear module of the model is selected; check the module names or the adapters' target_modules")
    return selected


def network_spec_for_model(
    model: torch.nn.Module,
    tokenizer=None,
    *,
    modules: str | Sequence[str] | None = None,
    adapters=None,
    m: int = SpecOptions.m,
    seed: int = SpecOptions.seed,
    estimator: str = SpecOptions.estimator,
    granularity: str = SpecOptions.granularity,
    kernel: str = KERNELS[0],
    fisher: str = SpecOptions.fisher,
) -> SketchSpec:
    """The network spec: the head's d, K and fingerprint (as ``lm.specs.spec_for_model``), and the chosen
    modules as (name, in_features, out_features). ``granularity="token"`` is position granularity."""
    if fisher != "empirical":
        raise InputError("network signatures support the empirical Fisher only (fisher='empirical')")
    head = HeadModel.of(model, tokenizer)
    selected = linear_modules(model, modules, adapters=adapters)
    return SketchSpec(
        d=head.d, vocab_size=head.vocab_size, m=m, seed=seed, estimator=estimator, granularity=granularity,
        fisher=fisher, model_fingerprint=head.fingerprint(tokenizer),
        modules=tuple((name, *_module_shape(module)) for name, module in selected), kernel=kernel,
    )


def _spec_modules(spec: SketchSpec, model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The model's modules named by a network spec, after checking their types and shapes."""
    if spec.modules is None:
        raise InputError("this is a head spec; network signatures need a spec from network_spec_for_model")
    _check_plain_model(model)
    named = dict(model.named_modules())
    for name, in_features, out_features in spec.modules:
        module = named.get(name)
        if not isinstance(module, LINEAR_TYPES) or _module_shape(module) != (in_features, out_features):
            found = "missing" if module is None else f"{type(module).__name__} {_module_shape(module) if isinstance(module, LINEAR_TYPES) else ''}"
            raise InputError(f"the spec's module {name} ({in_features} → {out_features}) is {found} in this model")
    return {name: named[name] for name, _, _ in spec.modules}


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
                raise InputError(f"module {self.batch.feature_map.modules[index][0]} ran twice in one forward pass; sketch modules that run once")
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


def _check_states(states: Sequence[NetworkSketchState]) -> SketchSpec:
    if not states or not all(isinstance(state, NetworkSketchState) for state in states):
        raise InputError("sketch_network_batch takes a non-empty list of NetworkSketchState")
    first = states[0].spec
    for state in states[1:]:
        if dataclasses.replace(state.spec, kernel=first.kernel) != first:
            raise InputError("the states of one network batch may differ in their kernel only")
    return first


def sketch_network_batch(
    states: Sequence[NetworkSketchState], model: torch.nn.Module, batch: Mapping, *,
    feature_map: NetworkFeatureMap | None = None,
) -> int:
    """One forward and one backward pass of ``batch`` into every state (same spec up to the kernel); returns
    the number of scored tokens. ``batch`` as for ``lm.capture.sketch_batch`` (each row a whole document).
    ``feature_map``: other projections than the spec's (e.g. the head sketch's, to check the head-only case)."""
    spec = _check_states(states)
    named = _spec_modules(spec, model)
    scored = scored_positions(batch)
    doc_index = document_indices(batch, batch["input_ids"].shape[0])
    if len(scored) == 0:
        return 0
    input_ids = batch["input_ids"]
    attention_mask = batch_attention_mask(batch)
    embeddings = model.get_input_embeddings()
    device = embeddings.weight.device
    batch_size, length = input_ids.shape
    attended_mask = attention_mask.bool().flatten()
    scored_mask = torch.zeros(batch_size, length, dtype=torch.bool)
    scored_mask[scored.rows.cpu(), scored.positions.cpu()] = True
    attended = attended_mask.nonzero().flatten()
    positions_doc = doc_index.repeat_interleave(length)[attended]
    network_batch = NetworkBatch(
        feature_map or NetworkFeatureMap.for_spec(spec), positions_doc.to(device), scored_mask.flatten()[attended].to(device),
        granularity=spec.granularity, kernels=[state.spec.kernel for state in states],
    )
    hooks = _Hooks(network_batch, attended.to(device))
    handles = [embeddings.register_forward_hook(hooks.on_embeddings)]
    handles += [module.register_forward_hook(hooks.on_module(i)) for i, module in enumerate(named.values())]
    inputs = model_inputs(model, input_ids, attention_mask, device)
    try:
        with inference_mode(model, gradients=True):
            logits = model(**inputs).logits
            if logits.shape[:2] != input_ids.shape:
                raise InputError(f"the model returned logits of shape {tuple(logits.shape)}: it must score every position")
            rows, positions = scored.rows.to(device), scored.positions.to(device)
            loss = torch.nn.functional.cross_entropy(
                logits[rows, positions].float(), scored.targets.to(device), reduction="sum"
            )
            del logits
            torch.autograd.grad(loss, [hooks.embeddings])
    finally:
        for handle in handles:
            handle.remove()
    hooks.add_gradient_free()
    for state in states:
        state.update_network(network_batch)
    return len(scored)


# -- datasets and texts --------------------------------------------------------------------------------
def resolve_network_spec(model, tokenizer, spec: SketchSpec | Signature | None = None, **spec_options) -> SketchSpec:
    """A given network spec (checked against the model), the spec of a signature to be comparable with, or
    a new one from ``spec_options`` (modules, adapters, m, seed, estimator, granularity, kernel)."""
    if isinstance(spec, Signature):
        spec = spec.spec
    if spec is None:
        return network_spec_for_model(model, tokenizer, **spec_options)
    if not isinstance(spec, SketchSpec):
        raise InputError(f"spec must be a SketchSpec, a Signature (like) or None, got {type(spec).__name__}")
    _spec_modules(spec, model)
    check_spec_head(spec, HeadModel.of(model, tokenizer))
    return spec


def sketch_network_kernels(
    dataset,
    model: torch.nn.Module,
    tokenizer,
    spec: SketchSpec | Signature | None = None,
    *,
    kernels: Sequence[str] = KERNELS,
    data: DataArgs | None = None,
    batch_size: int = RunOptions.batch_size,
    metadata: dict[str, str] | None = None,
    progress: bool = False,
    **spec_options,
) -> dict[str, Signature]:
    """Network signatures of ``dataset`` for several kernels from one pass (the projections are shared):
    kernel -> ``Signature``. ``spec`` / ``spec_options`` as for ``resolve_network_spec`` (its kernel is
    replaced by each of ``kernels``); ``data``: column and limit options (``DataArgs``)."""
    from huggingface_hub.utils import tqdm  # off under HF_HUB_DISABLE_PROGRESS_BARS=1 or disable_progress_bars()

    data = dataclasses.replace(data, dataset=dataset) if data is not None else DataArgs(dataset)
    HeadModel.of(model, tokenizer)  # the tokenizer belongs to the model
    base = resolve_network_spec(model, tokenizer, spec, **spec_options)
    device = model.get_input_embeddings().weight.device
    states = {kernel: NetworkSketchState(dataclasses.replace(base, kernel=kernel), device=device) for kernel in dict.fromkeys(kernels)}
    data = within_model_context(data, model)  # before the stream: the metadata records the limit it used
    stream = DocumentStream(data, tokenizer)
    with tqdm(total=stream.estimated_documents(), unit="doc", desc="network sketch", disable=not progress) as bar:
        for batch in stream.batches(batch_size):
            sketch_network_batch(list(states.values()), model, batch.as_model_inputs())
            bar.update(stream.counts.seen - bar.n)
    check_has_documents(stream.counts.seen, stream.counts.too_short, data)
    provenance = {**data.provenance(), **(metadata or {})}
    return {kernel: state.finalize(provenance) for kernel, state in states.items()}


def sketch_network_dataset(dataset, model: torch.nn.Module, tokenizer, spec: SketchSpec | Signature | None = None, **options) -> Signature:
    """The network signature of ``dataset`` for one kernel (``spec.kernel`` or ``kernel=``, default "full")."""
    if spec is None:
        kernel = options.pop("kernel", KERNELS[0])
    else:
        kernel = (spec.spec if isinstance(spec, Signature) else spec).kernel
    return sketch_network_kernels(dataset, model, tokenizer, spec, kernels=(kernel,), **options)[kernel]


def sketch_network_texts(
    texts: Iterable[str], model: torch.nn.Module, tokenizer, spec: SketchSpec | Signature | None = None, *,
    max_length: int = DataArgs.max_length, **options,
) -> Signature:
    """The network signature of a list of texts (each a document, in order).

    ``modules=`` ("all-linear" or names/suffixes) or ``adapters=`` (LoRA adapters whose target modules to
    take), ``m``, ``seed``, ``estimator``, ``granularity`` ("sequence": exact; "token": position granularity),
    ``kernel`` ("full" or "block"), ``batch_size``, ``metadata``, ``progress``; or a ``spec`` / a
    ``Signature`` to be comparable with.
    """
    return sketch_network_dataset(_texts_dataset(texts), model, tokenizer, spec, data=DataArgs(None, max_length=max_length), **options)


def _texts_dataset(texts: Iterable[str]):
    import datasets

    texts = list(texts)
    if not all(isinstance(text, str) for text in texts):
        raise InputError("sketch_network_texts takes an iterable of strings")
    return datasets.Dataset.from_dict({"text": texts})
