"""The optional parts of fisherhub and the extras that install them (``pip install 'fisherhub[all]'`` for all):
``require`` imports one, or says which ``pip install`` command adds it."""

from __future__ import annotations

import importlib
from types import ModuleType

from fisherhub.core.errors import InputError

#: optional top-level module -> (the extra of pyproject.toml that installs it, what needs it)
EXTRAS = {
    "gguf": ("gguf", "reading GGUF files (the embedded default model, --gguf-file)"),
    "matplotlib": ("plot", "figures (heatmaps, bar charts)"),
    "rich": ("rich", "the command line's tables"),
}


def require(module: str) -> ModuleType:
    """``import module`` (a module of one of ``EXTRAS``), or an ``InputError`` naming the pip command that
    installs it."""
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != top:
            raise
        extra, needed_by = EXTRAS[top]
        raise InputError(
            f"{needed_by} needs the optional package `{top}`: pip install 'fisherhub[{extra}]' (or 'fisherhub[all]')"
        ) from exc
