"""The command line's arguments, built from the config dataclasses of ``fisherhub.options`` (one argument per
field: its flag, default, help and choices), and the dataclasses back from the parsed arguments."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from fisherhub.options import flag


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Module docstrings as written but without their reST literal markup (````x```` shows as ``x``), and each
    option's default after its help (unless the help already says it; on/off flags say theirs through ``--x`` /
    ``--no-x``)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return super()._fill_text(text.replace("``", ""), width, indent)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or default is None or default is argparse.SUPPRESS or isinstance(default, bool):
            return text
        return f"{text} (default: {default})"


def add_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    options: type,
    *,
    exclude: tuple[str, ...] = (),
    only: tuple[str, ...] | None = None,
) -> None:
    """One argument per field of the ``options`` dataclass (fields with ``cli=False`` or in ``exclude``, or not in
    ``only`` when given, are left out)."""
    for field in dataclasses.fields(options):
        meta = dict(field.metadata)
        if meta.pop("cli", True) is False or field.name in exclude or (only is not None and field.name not in only):
            continue
        help_text = meta.pop("help")
        flags = meta.pop("flags", (flag(field.name),))
        default = field.default
        if default is dataclasses.MISSING:
            default = argparse.SUPPRESS
        elif "action" not in meta:
            if isinstance(field.default, bool) or field.type == "bool | None":  # None: neither --x nor --no-x given
                meta["action"] = argparse.BooleanOptionalAction if field.default is not False else "store_true"
            elif field.type in ("int", "int | None"):
                meta["type"] = int
        parser.add_argument(*flags, dest=field.name, default=default, help=help_text, **meta)


def from_namespace(options: type, namespace: argparse.Namespace, **values: Any) -> Any:
    """An ``options`` dataclass from parsed arguments (fields the namespace lacks keep their defaults)."""
    given = {
        field.name: getattr(namespace, field.name)
        for field in dataclasses.fields(options)
        if hasattr(namespace, field.name)
    }
    return options(**{**given, **values})
