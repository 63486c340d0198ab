"""Small demo domains shipped with the package: 100 short documents each.

Sources, cutting and licenses: ``demo_data/README.md``; regenerate with
``python scripts/build_demo_data.py``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from datasets import Dataset

from fisherhub.core.errors import InputError

DEMO_DOMAINS: tuple[str, ...] = ("english_prose", "python_code", "smiles", "protein", "dna")


def demo_domain_path(name: str) -> Path:
    """Path of the JSON-lines file (one ``{"text": ...}`` per line) of demo domain ``name``."""
    if name not in DEMO_DOMAINS:
        raise InputError(f"unknown demo domain {name!r}; available demo domains: {', '.join(DEMO_DOMAINS)}")
    return Path(str(resources.files("fisherhub.data") / "demo_data" / f"{name}.jsonl"))


def load_demo_domain(name: str) -> Dataset:
    """Demo domain ``name`` as a ``datasets.Dataset`` with one column, ``text``."""
    return Dataset.from_json(str(demo_domain_path(name)))
