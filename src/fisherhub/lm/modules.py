"""Which linear modules a network signature sketches (SPEC §2b): names or suffixes (``"q_proj"`` matches
``model.layers.3.self_attn.q_proj``), ``"all-linear"`` (every ``nn.Linear`` / ``Conv1D`` but the output head,
as in PEFT), or the target modules of LoRA adapters (their ``adapter_config.json``, matched by PEFT's own rule)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

import torch
from transformers.pytorch_utils import Conv1D

from fisherhub.core.errors import InputError
from fisherhub.core.registry import ALL_LINEAR
from fisherhub.core.spec import SketchSpec
from fisherhub.lm.head import HeadModel, output_head

#: module types whose weight gradient is δ xᵀ (``Conv1D``, GPT-2's, stores it transposed: the kernel is the same).
LINEAR_TYPES = (torch.nn.Linear, Conv1D)


def module_shape(module: torch.nn.Module) -> tuple[int, int]:
    """(in_features, out_features) of a linear module."""
    if isinstance(module, Conv1D):
        rows, columns = module.weight.shape
        return rows, columns
    linear = cast(torch.nn.Linear, module)
    return linear.in_features, linear.out_features


def _check_plain_model(model: torch.nn.Module) -> None:
    if hasattr(model, "peft_config"):
        raise InputError(
            "network sketches describe the base model: pass the transformers model without its PEFT adapters "
            "(e.g. model.get_base_model() after unloading, or the model loaded before get_peft_model)"
        )


def _adapter_configs(adapters) -> list:
    """PEFT configs of ``adapters``: paths or Hub ids (their adapter_config.json, through the bounded reader) or
    ``PeftConfig``s."""
    import peft

    from fisherhub.lm.adapter_config import adapter_config_file, read_peft_config

    if isinstance(adapters, (str, peft.PeftConfig)) or not isinstance(adapters, Iterable):
        adapters = [adapters]
    configs = []
    for adapter in adapters:
        if isinstance(adapter, peft.PeftConfig):
            configs.append(adapter)
            continue
        try:
            configs.append(read_peft_config(adapter_config_file(adapter), f"{adapter}: adapter_config.json"))
        except InputError as exc:
            raise InputError(f"cannot read the adapter config of {adapter!r}: {exc}") from exc
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
    linear: list[tuple[str, torch.nn.Module]] = [
        (name, module) for name, module in model.named_modules() if isinstance(module, LINEAR_TYPES)
    ]
    if (modules is None) == (adapters is None):
        raise InputError(
            "name the modules to sketch: modules='all-linear' or a list of names, or adapters=[...] (one of the two)"
        )
    if modules == ALL_LINEAR:
        selected = [(name, module) for name, module in linear if module is not head]
    elif modules is not None:
        if isinstance(modules, str) or not all(isinstance(entry, str) for entry in modules):
            raise InputError(f"modules must be {ALL_LINEAR!r} or a list of module names/suffixes, got {modules!r}")
        unmatched = [
            entry for entry in modules if not any(name == entry or name.endswith(f".{entry}") for name, _ in linear)
        ]
        if unmatched:
            examples = ", ".join(name for name, _ in linear[:4])
            raise InputError(
                f"no linear module matches {unmatched} (the model's linear modules are named like {examples}, ...)"
            )
        selected = [
            (name, module) for name, module in linear if any(name == e or name.endswith(f".{e}") for e in modules)
        ]
    else:
        configs = _adapter_configs(adapters)
        everything = any(config.target_modules == ALL_LINEAR for config in configs)
        selected = [
            (name, module)
            for name, module in linear
            if (everything and module is not head)
            or any(check_target_module_exists(config, name) for config in configs)
        ]
    if not selected:
        raise InputError(
            "no linear module of the model is selected; check the module names or the adapters' target_modules"
        )
    return selected


def spec_modules(spec: SketchSpec, model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The model's modules named by a network spec, after checking their types and shapes."""
    if spec.modules is None:
        raise InputError("this is a head spec; network signatures need a spec from network_spec_for_model")
    _check_plain_model(model)
    named = dict(model.named_modules())
    for name, in_features, out_features in spec.modules:
        module = named.get(name)
        if not isinstance(module, LINEAR_TYPES) or module_shape(module) != (in_features, out_features):
            found = (
                "missing"
                if module is None
                else f"{type(module).__name__} {module_shape(module) if isinstance(module, LINEAR_TYPES) else ''}"
            )
            raise InputError(f"the spec's module {name} ({in_features} → {out_features}) is {found} in this model")
    return {name: named[name] for name, _, _ in spec.modules}


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList | None:
    """The decoder's blocks in the order its forward pass runs them: the one ``ModuleList`` in ``model`` holding
    as many modules as its (text) config's ``num_hidden_layers`` (``model.layers`` of Llama, Qwen2, Gemma;
    ``transformer.h`` of GPT-2); None when there is not exactly one."""
    text_config = getattr(getattr(model, "config", None), "get_text_config", None)
    count = getattr(text_config(), "num_hidden_layers", None) if callable(text_config) else None
    if not isinstance(count, int) or count < 1:
        return None
    found = [module for module in model.modules() if isinstance(module, torch.nn.ModuleList) and len(module) == count]
    return found[0] if len(found) == 1 else None


def config_first_layer(model: torch.nn.Module, config) -> int:
    """The first of ``model``'s decoder layers holding a module the adapter ``config`` (a ``peft`` config) adapts,
    matched on the module names by PEFT's own rule; 0 (no layer below it left as the base model's) when one lies
    outside the layers, when it targets ``"all-linear"`` or parameters, saves modules whole, or matches nothing."""
    from peft.tuners.tuners_utils import check_target_module_exists

    layers = decoder_layers(model)
    targets = getattr(config, "target_modules", None)
    if layers is None or not targets or targets == ALL_LINEAR or getattr(config, "target_parameters", None):
        return 0
    if getattr(config, "modules_to_save", None):
        return 0
    index = {id(module): i for i, layer in enumerate(layers) for module in layer.modules()}
    matched = [index.get(id(m), 0) for name, m in model.named_modules() if check_target_module_exists(config, name)]
    return min(matched, default=0)


#: a pass's cost of the output head against its parameters: its product and the loss over its K logits (on
#: SmolLM2, K = 49,152, the head and the loss take about twice the head's share of the parameters; rerank_speed)
HEAD_COST = 2.0


def _base_size(module: torch.nn.Module) -> int:
    """The number of ``module``'s parameters of the base model (those of PEFT adapters in it left out)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    if isinstance(module, BaseTunerLayer):
        return _base_size(module.get_base_layer())
    return sum(p.numel() for p in module.parameters(recurse=False)) + sum(_base_size(c) for c in module.children())


def pass_share(model: torch.nn.Module, first: int) -> float:
    """The share of a full forward pass of ``model`` that runs decoder layers ``first`` … and the head (those
    below replayed): (base parameters of those layers + ``HEAD_COST`` × the head's) / (every layer's +
    ``HEAD_COST`` × the head's), the same with an adapter on the model or without; 1 from layer 0 or without one
    list of decoder layers."""
    layers = decoder_layers(model)
    if not first or layers is None:
        return 1.0
    sizes = [_base_size(layer) for layer in layers]
    head = HEAD_COST * _base_size(output_head(model))
    return (sum(sizes[first:]) + head) / (sum(sizes) + head)
