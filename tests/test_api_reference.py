"""The public API documents itself: every name of ``fisherhub.__all__`` has ``Args:`` (naming exactly its
parameters), ``Returns:`` and ``Raises:`` sections in huggingface_hub's layout, and ``docs/API.md`` is what
``scripts/build_api_reference.py`` builds from them."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

import fisherhub

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("build_api_reference", ROOT / "scripts" / "build_api_reference.py")
assert _spec is not None and _spec.loader is not None
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)

#: functions that raise nothing of their own (no ``Raises:`` section), with the reason
RAISES_NOTHING = {"metric_path": "a path inside the installed package, computed"}


def parameters(obj) -> list[str]:
    """The parameter names a docstring's ``Args:`` lists: ``*args`` / ``**kwargs`` with their stars."""
    if inspect.isclass(obj) and issubclass(obj, BaseException) and "__init__" not in vars(obj):
        return []  # Exception's own (*args)
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    signature = inspect.signature(obj)
    return [stars.get(p.kind, "") + name for name, p in signature.parameters.items() if name != "self"]


def problems(name: str, obj) -> list[str]:
    """What the docstring of ``obj`` lacks."""
    doc = inspect.getdoc(obj) or ""
    summary, sections = reference.split_sections(doc)
    found = []
    if not summary:
        found.append("no summary")
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        wanted = [p for p in parameters(obj) if not p.startswith("*")]
        if wanted and "Args" not in sections:
            found.append("no Args: section")
        return found
    wanted = parameters(obj)
    if wanted:
        listed = [entry for entry, _, _ in reference.section_entries(sections.get("Args", ""))]
        if listed != wanted:
            found.append(f"Args: lists {listed}, the signature has {wanted}")
    if not inspect.isclass(obj):
        if "Returns" not in sections:
            found.append("no Returns: section")
        if "Raises" not in sections and name not in RAISES_NOTHING:
            found.append("no Raises: section")
    for section in ("Args", "Raises"):
        for entry, _, text in reference.section_entries(sections.get(section, "")):
            if not text.strip():
                found.append(f"{section}: {entry} has no description")
    return found


@pytest.mark.parametrize("name", reference.public_names())
def test_every_public_name_has_args_returns_and_raises(name):
    assert problems(name, getattr(fisherhub, name)) == []


def test_the_check_finds_a_missing_or_stale_section():
    def stale(model, tokenizer=None, **options) -> int:
        """Do it.

        Args:
            model (`str`):
                the model
            tokenizer (`Any`, *optional*):
                its tokenizer
        """
        return 0

    def bare(x):
        return x

    assert problems("stale", stale) == [
        "Args: lists ['model', 'tokenizer'], the signature has ['model', 'tokenizer', '**options']",
        "no Returns: section",
        "no Raises: section",
    ]
    assert "no summary" in problems("bare", bare)


def test_the_api_reference_page_is_current():
    page = ROOT / "docs" / "API.md"
    assert page.read_text(encoding="utf-8") == reference.render(), (
        "docs/API.md is out of date: run python scripts/build_api_reference.py"
    )
