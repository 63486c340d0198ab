"""The optional parts of fisherhub and the extras that install them (``pip install 'fisherhub[all]'`` for the
command line's, ``'fisherhub[space]'`` for the Spaces' pages):
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
    "gradio": ("space", "the Spaces' pages (fisherhub index space --serve, fisherhub metric-space --serve)"),
}
#: the extras ``[all]`` installs (the command line's; the Spaces' pages, a web server, are not among them)
IN_ALL = ("gguf", "plot", "rich")


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
        also = " (or 'fisherhub[all]')" if extra in IN_ALL else ""
        raise InputError(
            f"{needed_by} needs the optional package `{top}`: pip install 'fisherhub[{extra}]'{also}"
        ) from exc
