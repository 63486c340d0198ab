"""Where candidates and their signatures come from: local adapter folders, Hub adapter repos, dataset repos,
the dataset repos an adapter's card names as training data, and discovery of a base model's adapters."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


from fisherhub.core.errors import FisherHubError, InputError
from fisherhub.core.signature import Signature
from fisherhub.hub.refs import ADAPTER_CONFIG
from fisherhub.options import same_base_model
from fisherhub.selection.errors import Skip
from fisherhub.selection.rows import AdapterLocation


def other_base_model(whose: str, named: list[str], base_model: str | None) -> Skip:
    """The skip of a candidate whose ``whose`` (its signatures, the adapter) are for the ``named`` base models,
    not for the target's ``base_model``; a name on either side that is no Hub id (the path a GGUF or local-folder
    run recorded) gets the way out."""
    from fisherhub.core.registry import HUB_ID

    paths = [name for name in dict.fromkeys([*named, base_model]) if name and not HUB_ID.fullmatch(name)]
    hint = (
        (
            f" ({', '.join(map(repr, paths))}: a local path, not the Hub id adapters name; sketch that signature "
            "again with --base-model-id ORG/NAME)"
        )
        if paths
        else ""
    )
    return Skip(f"other base model: {whose} for {', '.join(map(repr, named))}, not {base_model!r}{hint}")


#: why an adapter without a signature is skipped
NO_SIGNATURE = (
    "no signature: neither the adapter nor the dataset repos its card names carry one (sign it: `fisherhub push "
    "SIG REPO` with a signature of its training data, or `fisherhub index sign`)"
)


@dataclasses.dataclass(frozen=True)
class SignatureOption:
    """A signature a candidate could be compared with; ``load`` fetches it (Hub signatures lazily)."""

    sketch_id: str
    base_model: str | None
    source: str
    load: Callable[[], Signature]

    def is_for(self, base_model: str | None) -> bool:
        """Usable under ``base_model`` (None: any; a signature that names no base model: any)."""
        return base_model is None or self.base_model is None or same_base_model(self.base_model, base_model)


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    adapter: AdapterLocation | None
    options: list[SignatureOption]

    def options_for(self, base_model: str | None) -> list[SignatureOption]:
        """The signature options usable under ``base_model`` (``Skip`` when there are none)."""
        if not self.options:
            raise Skip(NO_SIGNATURE)
        matching = [option for option in self.options if option.is_for(base_model)]
        if not matching:
            raise other_base_model(
                "its signatures are", sorted({str(option.base_model) for option in self.options}), base_model
            )
        return matching


def _local_option(path: Path) -> SignatureOption:
    try:
        signature = Signature.load(path)
    except FisherHubError as exc:
        raise Skip(f"unreadable signature: {exc}") from exc
    return SignatureOption(signature.sketch_id, signature.metadata.get("base_model"), str(path), lambda: signature)


def hub_options(
    repo_id: str,
    repo_type: str,
    revision: str | None = None,
    snapshot=None,
    *,
    token: str | None = None,
    subfolder: str | None = None,
) -> list[SignatureOption]:
    """The loadable signatures of a Hub repo (``snapshot``: as a listing described it), or of the adapter under
    its ``subfolder``, from its index or card, without a request per file; tensors are fetched when chosen.
    ``CardError`` (a ``HubError``) when its index or card block is malformed."""
    from fisherhub.hub import SignatureRef, load_signature, repo_snapshot, snapshot_signatures

    snapshot = snapshot or repo_snapshot(SignatureRef(repo_id, repo_type, revision), token)
    options = []
    for info in snapshot_signatures(snapshot, token, read_headers=False, subfolder=subfolder, strict=True):
        if info.problem is None and info.sketch_id:
            ref = info.location
            load = lambda ref=ref: load_signature(ref, token=token)  # noqa: E731
            options.append(SignatureOption(info.sketch_id, info.base_model, ref, load))
    return options


def _with_training_data(
    options: list[SignatureOption], datasets: Any, base_model: str | None, token: str | None = None
) -> list[SignatureOption]:
    """The adapter's own signatures, plus, when none is for ``base_model``, those of the dataset repos its card
    names as training data (``datasets:``)."""
    from fisherhub.hub import HubError

    if any(option.is_for(base_model) for option in options):
        return options
    names = [datasets] if isinstance(datasets, str) else list(datasets or [])
    for name in names:
        try:
            options = [*options, *hub_options(str(name), "dataset", token=token)]
        except HubError:  # a dataset named in the card but not on this Hub carries no signature
            continue
    return options


#: the adapter types a ranked adapter may have: ``Selection.load`` and ``mix`` (``add_weighted_adapter``) take LoRA
RANKED_ADAPTER_TYPES = ("LORA",)


def peft_config_of(file: Path, where: str):
    """The ``peft.PeftConfig`` in ``file`` (an ``adapter_config.json``, through ``read_peft_config``'s bounds);
    ``Skip`` when it is malformed, or when the adapter is of a type that is not ranked (with its type as the
    reason)."""
    from fisherhub.lm.adapter_config import read_peft_config

    try:
        config = read_peft_config(file, where)
    except InputError as exc:
        raise Skip(f"{exc}: save the adapter again with PeftModel.save_pretrained") from exc
    peft_type = getattr(config.peft_type, "value", config.peft_type)
    if peft_type is not None and peft_type not in RANKED_ADAPTER_TYPES:
        raise Skip(
            f"adapter type {peft_type}: only {', '.join(RANKED_ADAPTER_TYPES)} adapters are ranked (they are what "
            "Selection.load and Selection.mix combine)"
        )
    return config


def check_adapter_base(adapter_base: str | list[str] | None, base_model: str | None) -> None:
    """``adapter_base``: what the adapter config or card names (a card may list several)."""
    bases = [adapter_base] if isinstance(adapter_base, str) else list(adapter_base or [])
    if base_model and bases and not any(same_base_model(base, base_model) for base in bases):
        raise other_base_model("the adapter is", bases, base_model)


def _local_candidate(folder: Path, base_model: str | None) -> Candidate:
    from fisherhub.hub.cards import card_text, parse_card
    from fisherhub.hub.errors import CardError
    from fisherhub.hub.folder import folder_signature_files

    config = folder / ADAPTER_CONFIG
    if not config.is_file():
        raise Skip(f"not an adapter: the folder has no {ADAPTER_CONFIG} (save it with PeftModel.save_pretrained)")
    check_adapter_base(peft_config_of(config, ADAPTER_CONFIG).base_model_name_or_path, base_model)
    options = [_local_option(folder / path) for path in folder_signature_files(folder)]  # regular files only
    card = folder / "README.md"
    try:
        datasets = (
            parse_card(card_text(card, "adapter card"), "adapter card", "model").data.get("datasets")
            if card.is_file()
            else None
        )
    except CardError as exc:
        raise Skip(f"{exc}: fix its YAML block between the '---' lines") from exc
    options = _with_training_data(options, datasets, base_model)
    return Candidate(str(folder), AdapterLocation(str(folder)), options)


def _adapter_config_base(snapshot, subfolder: str | None, token: str | None) -> str | None:
    """``base_model_name_or_path`` of the repo's ``adapter_config.json`` (under ``subfolder``), read with
    ``peft.PeftConfig`` (``Skip`` for a type that is not ranked); one small download through the cache
    (offline: the cached copy)."""
    from fisherhub.core.bounded import check_size
    from fisherhub.hub.refs import MAX_ADAPTER_CONFIG_BYTES

    path = f"{subfolder}/{ADAPTER_CONFIG}" if subfolder else ADAPTER_CONFIG
    try:  # a size the listing gives: refused before the download
        check_size(snapshot.files.get(path), path, max_bytes=MAX_ADAPTER_CONFIG_BYTES)
    except InputError as exc:
        raise Skip(str(exc)) from exc
    local = snapshot.download(path, token) if snapshot.complete else snapshot.cached_file(path)
    if local is None or not local.is_file():
        return None  # offline and never fetched: nothing names the base model
    return peft_config_of(local, path).base_model_name_or_path


def _hub_candidate(name: str, base_model: str | None, listing=None, token: str | None = None) -> Candidate:
    """A Hub adapter repo (or dataset repo). ``org/name:folder`` and ``hf://org/name/folder`` name an adapter
    saved under ``folder`` of the repo (its ``adapter_config.json`` and ``.fisher_signatures/`` there; the
    repo's card, which describes the repo, is not read for it).
    Requests: one ``repo_info`` (none for a listed repo); its ``adapter_config.json`` (one small download:
    the adapter type, and the base model where the card names none or the adapter is in a subfolder); then
    the chosen signature's index and file when it is ranked."""
    from fisherhub.hub import HubError, SignatureRef, repo_snapshot

    ref = SignatureRef.parse(name) if listing is None else listing.ref
    if ref is None or (ref.path is not None and ref.repo_type != "model"):
        raise Skip(
            "not a local adapter folder, nor a Hub repo id (org/name[@revision][:subfolder], "
            "hf://org/name[@revision]/subfolder, datasets/org/name)"
        )
    subfolder = ref.path.rstrip("/") if ref.path else None
    config_path = f"{subfolder}/{ADAPTER_CONFIG}" if subfolder else ADAPTER_CONFIG
    try:
        if ref.repo_type == "dataset":
            return Candidate(name, None, hub_options(ref.repo_id, "dataset", ref.revision, token=token))
        snapshot = listing or repo_snapshot(dataclasses.replace(ref, path=None), token)  # offline: the cache
        if snapshot.complete and config_path not in snapshot.files:
            where = f"the folder {subfolder!r} of the model repo" if subfolder else "the model repo"
            raise Skip(f"not an adapter: {where} has no {ADAPTER_CONFIG} (a full model, not a PEFT adapter)")
        card = {} if subfolder else snapshot.card_data or {}  # the card describes the repo, not a folder in it
        config_base = _adapter_config_base(snapshot, subfolder, token)  # also refuses a type that is not ranked
        check_adapter_base(card.get("base_model") or config_base, base_model)
        options = hub_options(ref.repo_id, "model", snapshot=snapshot, token=token, subfolder=subfolder)
        options = _with_training_data(options, card.get("datasets"), base_model, token)
    except HubError as exc:
        raise Skip(str(exc)) from exc
    return Candidate(name, AdapterLocation(ref.repo_id, snapshot.ref.revision, subfolder), options)


@dataclasses.dataclass(frozen=True)
class SignedElsewhere:
    """An adapter (repo id at ``revision``) whose signature is a file in another repo (``signature``, pinned):
    a row of a signature index sketched by the indexer, whose file is in the index repo."""

    repo_id: str
    revision: str
    signature: Any  # a SignatureRef with its path
    sketch_id: str
    base_model: str | None

    @property
    def name(self) -> str:
        return f"{self.repo_id}@{self.revision}"


def candidate_name(name) -> str:
    """How a candidate is shown: a discovered repo by its id, a folder or reference as given."""
    if isinstance(name, SignedElsewhere):
        return name.name
    return name.ref.repo_id if hasattr(name, "ref") else os.fspath(name)


def resolve_candidate(name, base_model: str | None, token: str | None = None) -> Candidate:
    """A repo found by discovery (a ``RepoSnapshot``), a local adapter folder, a local signature file (a source
    dataset), else a Hub repo id; its signature options (``Skip`` when it cannot be one). ``token`` goes to every Hub call."""
    from fisherhub.hub import RepoSnapshot, load_signature

    if isinstance(name, SignedElsewhere):
        source = name.signature.short()
        load = lambda: load_signature(source, token=token)  # noqa: E731
        return Candidate(
            name.name,
            AdapterLocation(name.repo_id, name.revision),
            [SignatureOption(name.sketch_id, name.base_model, source, load)],
        )
    if isinstance(name, RepoSnapshot):
        return _hub_candidate(name.ref.repo_id, base_model, name, token)
    text = os.fspath(name)
    if os.path.isdir(text):
        return _local_candidate(Path(text), base_model)
    if os.path.isfile(text):  # a source dataset's signature file: ranked like a dataset repo, no adapter to load
        return Candidate(text, None, [_local_option(Path(text))])
    return _hub_candidate(text, base_model, token=token)


def discover(base_model: str | None, token: str | None = None) -> tuple[list, list]:
    """(the adapters of ``base_model`` that the Hub lists and that may be signed, the others: unsigned)."""
    from fisherhub.hub.discovery import list_adapters
    from fisherhub.options import canonical_model_id

    if base_model is None:
        raise InputError("no candidates given: pass adapter repo ids or folders, or base_model= to discover adapters")
    found = list_adapters(canonical_model_id(base_model), token=token)
    if not found.signed and not found.unsigned:
        raise InputError(
            f"no candidates: the Hub lists no adapters of {base_model!r} (tag base_model:adapter:{base_model}). "
            "Pass adapter repo ids or local adapter folders explicitly"
        )
    return found.signed, found.unsigned
