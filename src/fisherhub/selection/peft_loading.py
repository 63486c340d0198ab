"""Loading adapters with ``peft`` onto the base model (loaded by id when not given): the chosen ones
(``Selection.load``), or one at a time for the second stage (``adapter_on``), each checked first
(``check_adapter``: its config through the bounded reader, its type, base model and weights file, whose size is
bounded by ``default_max_adapter_bytes``)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fisherhub.core.errors import FisherHubError, InputError
from fisherhub.selection.candidates import check_adapter_base, peft_config_of
from fisherhub.selection.errors import Skip

if TYPE_CHECKING:
    from fisherhub.core.signature import Signature
    from fisherhub.selection.rows import AdapterLocation, RankedCandidate

#: the ``add_weighted_adapter`` combinations ``Selection.mix`` offers
MIX_TYPES = ("cat", "linear")
#: the weights files ``peft`` loads an adapter from, in the order it looks for them
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
#: the name of the one adapter ``adapter_on`` loads
MEASURED_ADAPTER = "rerank"


def default_max_adapter_bytes(model) -> int:
    """The largest adapter weights file loaded onto ``model`` unless told otherwise: the base model's own
    parameters at 4 bytes each. A LoRA update ΔW = BA of a d×d matrix holds 2rd of its d² numbers, and the
    modules an adapter saves whole (``modules_to_save``: embeddings, head) are a part of the model; a file larger
    than the whole model is a full model saved as an adapter, or one meant to exhaust memory."""
    return 4 * sum(parameter.numel() for parameter in model.parameters())


def _weights_file(adapter: AdapterLocation, token: str | None) -> tuple[str, int | None]:
    """(the weights file ``peft`` would load for ``adapter``, its size in bytes: None when it cannot be known,
    offline and not cached); ``Skip`` when there is none. On the Hub one HEAD request per file name tried (a 429
    sent again after its Retry-After, ``retry.with_retries``; anything else not)."""
    from fisherhub.hub.errors import HubError, SignatureNotFoundError

    prefix = f"{adapter.subfolder}/" if adapter.subfolder else ""
    if os.path.isdir(adapter.path):
        for name in ADAPTER_WEIGHTS:
            file = Path(adapter.path) / f"{prefix}{name}"
            if file.is_file():
                return name, file.stat().st_size
        raise Skip(
            f"no adapter weights: the folder has neither {' nor '.join(ADAPTER_WEIGHTS)} (save the adapter with "
            "PeftModel.save_pretrained)"
        )
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache

    from fisherhub.hub.errors import hub_errors
    from fisherhub.hub.retry import RATE_LIMITED, with_retries

    for name in ADAPTER_WEIGHTS:
        path = f"{prefix}{name}"
        if constants.HF_HUB_OFFLINE:
            cached = try_to_load_from_cache(adapter.path, path, revision=adapter.revision)
            if isinstance(cached, str):
                return name, os.path.getsize(cached)
            continue
        try:
            with hub_errors(adapter.path, path):
                url = hf_hub_url(adapter.path, path, revision=adapter.revision)
                metadata = with_retries(lambda: get_hf_file_metadata(url, token=token), path, statuses=RATE_LIMITED)
                return name, metadata.size
        except SignatureNotFoundError:  # no such file at this revision: the next name
            continue
        except HubError as exc:
            raise Skip(str(exc)) from exc
    if constants.HF_HUB_OFFLINE:
        return ADAPTER_WEIGHTS[0], None  # peft decides from the cache
    raise Skip(f"no adapter weights: the repo has neither {' nor '.join(prefix + n for n in ADAPTER_WEIGHTS)}")


def check_adapter(
    adapter: AdapterLocation,
    base_model: str | None,
    max_bytes: int,
    token: str | None = None,
    *,
    shared_base: bool = False,
) -> str:
    """``Skip``, with the reason, unless ``adapter`` can be loaded onto ``base_model``: a LoRA config that the
    bounded reader and peft read (``peft_config_of``) naming that base model or none, and a weights file of at most
    ``max_bytes``. With ``shared_base`` (one base model measured under several adapters in turn) a config that
    would change the base model itself (``layer_replication``: unloading does not undo it) is refused too.
    Returns the name of the weights file (one of ``ADAPTER_WEIGHTS``)."""
    from fisherhub.lm.adapter_config import adapter_config_file

    try:
        file = adapter_config_file(adapter.path, revision=adapter.revision, subfolder=adapter.subfolder, token=token)
    except FisherHubError as exc:
        raise Skip(str(exc)) from exc
    config = peft_config_of(
        file, f"{adapter.subfolder}/adapter_config.json" if adapter.subfolder else "adapter_config.json"
    )
    check_adapter_base(config.base_model_name_or_path, base_model)
    if shared_base and getattr(config, "layer_replication", None):
        raise Skip("its config sets layer_replication, which changes the base model's layers and is not undone")
    name, size = _weights_file(adapter, token)
    if size is not None and size > max_bytes:
        raise Skip(
            f"{name} is {size:,} bytes, more than the {max_bytes:,} an adapter may have here (by default its base "
            "model's parameters at 4 bytes each: no low-rank update is larger); pass max_adapter_bytes= "
            "(--max-adapter-mb) to load it"
        )
    return name


def local_adapter(adapter: AdapterLocation, weights: str, token: str | None = None) -> AdapterLocation:
    """``adapter`` as the folder of the Hub cache that holds its config and ``weights`` file at its revision
    (``hf_hub_download``: its backoff, Retry-After honoured), so that ``peft`` loads it without a request of its
    own (it sends its existence check once, without retries: a 429 answered to it would skip the adapter). A local
    folder, or offline, as it is; ``Skip`` when the Hub does not serve the files."""
    from huggingface_hub import constants, hf_hub_download

    from fisherhub.hub.errors import HubError, hub_errors
    from fisherhub.selection.rows import AdapterLocation

    if os.path.isdir(adapter.path) or constants.HF_HUB_OFFLINE:
        return adapter
    prefix = f"{adapter.subfolder}/" if adapter.subfolder else ""
    try:
        with hub_errors(adapter.path, f"{prefix}{weights}"):
            config = hf_hub_download(
                adapter.path, f"{prefix}adapter_config.json", revision=adapter.revision, token=token
            )
            hf_hub_download(adapter.path, f"{prefix}{weights}", revision=adapter.revision, token=token)
    except HubError as exc:
        raise Skip(str(exc)) from exc
    depth = len(Path(adapter.subfolder).parts) if adapter.subfolder else 0
    return AdapterLocation(os.fspath(Path(config).parents[depth]), None, adapter.subfolder)


def brief(exc: BaseException, limit: int = 240) -> str:
    """``exc`` on one line: its type and the start of its message (a stranger's file can make it long)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}{'…' if len(text) > limit else ''}"


def _strip_adapter_layers(model) -> None:
    """Every PEFT layer of ``model`` replaced by the module it wraps, as ``PeftModel.unload`` does (nothing
    merged), also after a load that failed half way, when there is no ``PeftModel`` to unload."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    for name, module in list(model.named_modules()):
        if hasattr(module, "unload_and_optionally_merge_module"):
            original = module.unload_and_optionally_merge_module(merge=False, safe_merge=False, adapter_names=None)
        elif isinstance(module, BaseTunerLayer):
            original = module.get_base_layer()
        else:
            continue
        parent, _, child = name.rpartition(".")
        try:
            setattr(model.get_submodule(parent), child, original)
        except AttributeError:  # inside a layer taken out already
            continue
    if hasattr(model, "peft_config"):
        del model.peft_config


@contextlib.contextmanager
def adapter_on(model, adapter: AdapterLocation, token: str | None = None) -> Iterator:
    """``adapter`` loaded onto ``model`` alone (a ``peft.PeftModel`` in eval mode, the adapter named
    ``MEASURED_ADAPTER``); afterwards, whatever was raised, every PEFT layer is out of ``model`` again, which is
    the plain base model with the same parameters (``InputError`` if not: it cannot be measured under another
    adapter; the ``requires_grad`` flags peft turns off are turned back). ``Skip`` with peft's reason when it
    cannot load the adapter."""
    from peft import PeftModel

    trainable = {name: parameter.requires_grad for name, parameter in model.named_parameters()}
    try:
        try:
            peft_model = PeftModel.from_pretrained(
                model, adapter.path, adapter_name=MEASURED_ADAPTER, **adapter.hub_kwargs(token)
            )
        except Exception as exc:  # noqa: BLE001 (peft on a stranger's files: whatever it raises, the adapter is at fault)
            raise Skip(f"peft cannot load it ({brief(exc)})") from exc
        yield peft_model.eval()
    finally:
        _strip_adapter_layers(model)
        parameters = dict(model.named_parameters())
        if list(parameters) != list(trainable):
            raise InputError(
                f"loading {adapter.path} changed the base model's parameters, and taking it out did not restore "
                "them: load the base model again"
            )
        for name, parameter in parameters.items():
            parameter.requires_grad_(trainable[name])


def _non_finite_weights(peft_model) -> list[str]:
    """The names of the loaded adapter's tensors that hold NaN or inf."""
    import torch

    return [
        name
        for name, tensor in peft_model.named_parameters()
        if MEASURED_ADAPTER in name.split(".") and not bool(torch.isfinite(tensor).all())
    ]


@contextlib.contextmanager
def checked_adapter_on(
    model, adapter: AdapterLocation, base_model: str | None, token: str | None, max_adapter_bytes: int | None
) -> Iterator:
    """``adapter_on`` after ``check_adapter`` (a shared base model; weights of at most ``max_adapter_bytes``,
    None: ``default_max_adapter_bytes(model)``), from the cache (``local_adapter``), refusing weights that hold
    NaN or inf: ``Skip`` with the reason."""
    limit = default_max_adapter_bytes(model) if max_adapter_bytes is None else max_adapter_bytes
    weights = check_adapter(adapter, base_model, limit, token, shared_base=True)
    with adapter_on(model, local_adapter(adapter, weights, token), token) as peft_model:
        broken = _non_finite_weights(peft_model)
        if broken:
            raise Skip(f"its weights hold NaN or inf ({len(broken)} tensor(s), e.g. {broken[0]}): a broken adapter")
        yield peft_model


def adapter_names(candidates: Sequence[str]) -> list[str]:
    """Distinct adapter names for ``peft`` (identifiers: ``org/lora-a`` -> ``lora_a``, repeats get ``_2``...)."""
    names: list[str] = []
    for candidate in candidates:
        base = re.sub(r"\W+", "_", Path(candidate.rstrip("/")).name).strip("_") or "adapter"
        name, repeat = base, 1
        while name in names:
            repeat += 1
            name = f"{base}_{repeat}"
        names.append(name)
    return names


def check_top_k(top_k: int | None) -> int:
    """``top_k`` (default 1), refused unless a positive int."""
    count = 1 if top_k is None else top_k
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise InputError(f"top_k must be a positive int, got {top_k!r}")
    return count


def load_adapters(
    ranking: Sequence[RankedCandidate],
    model,
    base_model: str | None,
    top_k: int | None,
    signature: Signature | None = None,
    token: str | None = None,
    max_adapter_bytes: int | None = None,
):
    """A ``peft.PeftModel`` on ``model`` (None: ``base_model`` loaded, at what ``signature`` records) with the
    ``top_k`` (default 1) best rows' adapters under ``adapter_names``, the best one active; each from its repo
    at the commit ranked (and its subfolder), with ``token``, after ``check_adapter`` (weights files of at most
    ``max_adapter_bytes``, default ``default_max_adapter_bytes``): ``InputError`` with its reason otherwise."""
    from peft import PeftModel

    from fisherhub.lm.loading import load_base_model

    count = check_top_k(top_k)
    rows = ranking[:count]
    adapters = [row.adapter for row in rows if row.adapter is not None]
    datasets_only = [row.candidate for row in rows if row.adapter is None]
    if datasets_only:
        raise InputError(
            f"dataset repos, not adapters, ranked among the top {count}: {', '.join(datasets_only)}; nothing to "
            "load for them. Pass adapter repos (or local adapter folders) as candidates, or a smaller top_k"
        )
    if model is None:
        model = load_base_model(base_model, signature, token)[0]
    limit = default_max_adapter_bytes(model) if max_adapter_bytes is None else max_adapter_bytes
    for row, adapter in zip(rows, adapters):
        try:
            check_adapter(adapter, base_model, limit, token)
        except Skip as skip:
            raise InputError(f"cannot load {row.candidate}: {skip.reason}") from skip
    names = adapter_names([row.candidate for row in rows])
    peft_model = PeftModel.from_pretrained(
        model, adapters[0].path, adapter_name=names[0], **adapters[0].hub_kwargs(token)
    )
    for adapter, name in zip(adapters[1:], names[1:]):
        peft_model.load_adapter(adapter.path, adapter_name=name, **adapter.hub_kwargs(token))
    peft_model.set_adapter(names[0])
    return peft_model.eval()
