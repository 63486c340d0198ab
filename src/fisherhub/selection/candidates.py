"""Where candidates and their signatures come from: local adapter folders, Hub adapter repos, dataset repos,
the dataset repos an adapter's card names as training data, and discovery of a base model's adapters."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fisherhub.core.errors import FisherHubError, InputError
from fisherhub.core.signature import Signature
from fisherhub.selection.results import AdapterLocation

ADAPTER_CONFIG = "adapter_config.json"
SIGNATURE_FOLDER = "fisher_signatures"


class Skip(Exception):
    """Internal: this candidate cannot be ranked, for ``reason``."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class SignatureOption:
    """A signature a candidate could be compared with; ``load`` fetches it (Hub signatures lazily)."""

    sketch_id: str
    base_model: str | None
    source: str
    load: Callable[[], Signature]

    def is_for(self, base_model: str | None) -> bool:
        """Usable under ``base_model`` (None: any; a signature that names no base model: any)."""
        return base_model is None or self.base_model in (None, base_model)


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    adapter: AdapterLocation | None
    options: list[SignatureOption]

    def options_for(self, base_model: str | None) -> list[SignatureOption]:
        """The signature options usable under ``base_model`` (``Skip`` when there are none)."""
        if not self.options:
            raise Skip("no signature: neither the adapter nor the dataset repos its card names carry one")
        matching = [option for option in self.options if option.is_for(base_model)]
        if not matching:
            others = sorted({str(option.base_model) for option in self.options})
            raise Skip(f"other base model: its signatures are for {', '.join(others)}, not {base_model!r}")
        return matching


def _local_option(path: Path) -> SignatureOption:
    try:
        signature = Signature.load(path)
    except FisherHubError as exc:
        raise Skip(f"unreadable signature: {exc}") from exc
    return SignatureOption(signature.sketch_id, signature.metadata.get("base_model"), str(path), lambda: signature)


def hub_options(repo_id: str, repo_type: str, revision: str | None = None) -> list[SignatureOption]:
    """The loadable signatures of a Hub repo (headers only; tensors are fetched when chosen)."""
    from fisherhub.hub import list_signatures, load_signature

    options = []
    for info in list_signatures(repo_id, repo_type, revision):
        if info.problem is None and info.sketch_id:
            ref = info.ref.short()
            options.append(SignatureOption(info.sketch_id, info.base_model, ref, lambda ref=ref: load_signature(ref)))
    return options


def _with_training_data(options: list[SignatureOption], datasets: Any, base_model: str | None) -> list[SignatureOption]:
    """The adapter's own signatures, plus, when none is for ``base_model``, those of the dataset repos its card
    names as training data (``datasets:``)."""
    from fisherhub.hub import HubError

    if any(option.is_for(base_model) for option in options):
        return options
    names = [datasets] if isinstance(datasets, str) else list(datasets or [])
    for name in names:
        try:
            options = [*options, *hub_options(str(name), "dataset")]
        except HubError:  # a dataset named in the card but not on this Hub carries no signature
            continue
    return options


def _check_adapter_base(adapter_base: str | list[str] | None, base_model: str | None) -> None:
    """``adapter_base``: what the adapter config or card names (a card may list several)."""
    bases = [adapter_base] if isinstance(adapter_base, str) else list(adapter_base or [])
    if base_model and bases and base_model not in bases:
        raise Skip(f"other base model: the adapter is for {', '.join(map(repr, bases))}, not {base_model!r}")


def _local_candidate(folder: Path, base_model: str | None) -> Candidate:
    from huggingface_hub import RepoCard

    config = folder / ADAPTER_CONFIG
    if not config.is_file():
        raise Skip(f"not an adapter: the folder has no {ADAPTER_CONFIG} (save it with PeftModel.save_pretrained)")
    _check_adapter_base(json.loads(config.read_text()).get("base_model_name_or_path"), base_model)
    options = [_local_option(path) for path in sorted((folder / SIGNATURE_FOLDER).glob("*.safetensors"))]
    card = folder / "README.md"
    datasets = RepoCard.load(card).data.get("datasets") if card.is_file() else None
    options = _with_training_data(options, datasets, base_model)
    return Candidate(str(folder), AdapterLocation(str(folder)), options)


def _hub_candidate(name: str, base_model: str | None) -> Candidate:
    from huggingface_hub import HfApi

    from fisherhub.hub import HubError, SignatureRef
    from fisherhub.hub.errors import hub_errors

    ref = SignatureRef.parse(name)
    if ref is None or ref.path is not None:
        raise Skip("not a local adapter folder, nor a Hub repo id (org/name, datasets/org/name, with @revision)")
    try:
        if ref.repo_type == "dataset":
            return Candidate(name, None, hub_options(ref.repo_id, "dataset", ref.revision))
        with hub_errors(str(ref)):
            info = HfApi().model_info(ref.repo_id, revision=ref.revision)
        files = {sibling.rfilename for sibling in info.siblings or []}
        if ADAPTER_CONFIG not in files:
            raise Skip(f"not an adapter: the model repo has no {ADAPTER_CONFIG} (a full model, not a PEFT adapter)")
        card = info.card_data or {}
        _check_adapter_base(card.get("base_model"), base_model)
        options = _with_training_data(hub_options(ref.repo_id, "model", info.sha), card.get("datasets"), base_model)
    except HubError as exc:
        raise Skip(str(exc)) from exc
    return Candidate(name, AdapterLocation(ref.repo_id, ref.revision), options)


def resolve_candidate(name: str | os.PathLike, base_model: str | None) -> Candidate:
    """A local adapter folder, else a Hub repo id; its signature options (``Skip`` when it cannot be one)."""
    text = os.fspath(name)
    if os.path.isdir(text):
        return _local_candidate(Path(text), base_model)
    return _hub_candidate(text, base_model)


def discover(base_model: str | None) -> list[str]:
    """The adapters of ``base_model`` that the Hub lists."""
    from fisherhub.hub import find_adapters

    if base_model is None:
        raise InputError("no candidates given: pass adapter repo ids or folders, or base_model= to discover adapters")
    found = find_adapters(base_model)
    if not found:
        raise InputError(
            f"no candidates: the Hub lists no adapters of {base_model!r} (tag base_model:adapter:{base_model}). "
            "Pass adapter repo ids or local adapter folders explicitly"
        )
    return found
