"""An adapter's PEFT config, from a local folder or a Hub repo: its ``adapter_config.json`` goes through the
bounded reader (``core.bounded.read_json``) before ``peft`` parses it, so a config nested 200,000 deep or a
megabyte long is refused, naming the file, instead of overflowing peft's parser."""

from __future__ import annotations

import os
from pathlib import Path

from fisherhub.core.bounded import read_file, read_json
from fisherhub.core.errors import InputError
from fisherhub.hub.refs import ADAPTER_CONFIG, MAX_ADAPTER_CONFIG_BYTES


def adapter_config_file(
    source: str | os.PathLike,
    *,
    revision: str | None = None,
    subfolder: str | None = None,
    token: str | None = None,
) -> Path:
    """Where ``adapter_config.json`` of the adapter ``source`` is on this machine: in the local folder ``source``
    (under ``subfolder``), else downloaded from the Hub repo ``source`` at ``revision`` through the cache."""
    path = f"{subfolder}/{ADAPTER_CONFIG}" if subfolder else ADAPTER_CONFIG
    if os.path.isdir(source):
        return Path(source) / path
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HFValidationError

    from fisherhub.hub.errors import hub_errors

    try:
        with hub_errors(os.fspath(source), path):
            return Path(hf_hub_download(os.fspath(source), path, revision=revision, token=token))
    except HFValidationError as exc:
        raise InputError(f"{os.fspath(source)!r} is neither a local adapter folder nor a Hub repo id") from exc


def read_peft_config(file: Path, where: str | None = None):
    """The ``peft.PeftConfig`` of the ``adapter_config.json`` at ``file``, read by ``read_json`` (at most
    ``MAX_ADAPTER_CONFIG_BYTES``) first; ``InputError`` naming ``where`` (default: the file) when it is missing,
    out of bounds, not a JSON object, or not a config ``peft`` reads."""
    from peft import PeftConfig

    where = where or str(file)
    if not file.is_file():
        raise InputError(f"{where} is missing")
    data = read_file(file, where, max_bytes=MAX_ADAPTER_CONFIG_BYTES)
    document = read_json(data, where, max_bytes=MAX_ADAPTER_CONFIG_BYTES)
    if not isinstance(document, dict):
        raise InputError(f"{where} is a JSON {type(document).__name__}, not an object of PEFT settings")
    try:
        return PeftConfig.from_pretrained(str(file.parent))
    except (ValueError, TypeError, KeyError, AttributeError, OSError) as exc:
        raise InputError(f"{where} is not a config peft reads ({' '.join(str(exc).split())[:300]})") from exc
