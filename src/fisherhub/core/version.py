"""The installed fisherhub distribution's version (defined once, in pyproject.toml)."""

import importlib.metadata


def library_version() -> str:
    try:
        return importlib.metadata.version("fisherhub")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
