"""``fisherhub`` command line: one sub-command per module of ``fisherhub.cli.commands``, found by iterating
that package (a new command is one file there); what commands share is in ``fisherhub.cli.support``.

Each command module defines ``register(subparsers)``, which adds its parser and sets ``func`` (a callable taking
the parsed ``argparse.Namespace`` and returning an exit code).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import pkgutil
import sys
import warnings

from fisherhub.core.errors import FisherHubError


def command_modules() -> list[str]:
    """The modules of ``fisherhub.cli.commands`` (each one sub-command), by name."""
    from fisherhub.cli import commands

    return sorted(info.name for info in pkgutil.iter_modules(commands.__path__) if not info.name.startswith("_"))


def build_parser() -> argparse.ArgumentParser:
    from fisherhub.core.version import library_version

    parser = argparse.ArgumentParser(
        prog="fisherhub",
        description="Head Fisher alignment signatures for causal LMs (sketch, compare, share, select).",
        epilog="An output file that exists is never replaced unless the command is given --overwrite.",
    )
    parser.add_argument("--version", action="version", version=f"fisherhub {library_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in command_modules():
        importlib.import_module(f"fisherhub.cli.commands.{name}").register(subparsers)
    return parser


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return [option for action in parser._actions for option in action.option_strings]


def _check_flags(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Name a mistyped ``--flag`` (and the closest real one) before argparse reports a missing required one.

    The flags after a (sub-)command word are checked against that command's own, so ``index build --x`` against
    ``build``'s. A word is a flag of the command when it is one, or a prefix of one (argparse's abbreviations)."""
    commands = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})
    position = next((i for i, word in enumerate(argv) if word in commands), None)
    if position is not None:
        _check_flags(parser, argv[:position])  # the words before the command: this parser's own
        return _check_flags(commands[argv[position]], argv[position + 1 :])
    known = _option_strings(parser)
    for word in argv:
        if word == "--":
            return
        name = word.split("=", 1)[0]
        if name.startswith("--") and not any(option.startswith(name) for option in known):
            close = difflib.get_close_matches(name, known, n=1)
            parser.error(f"unrecognized argument {name}" + (f" (did you mean {close[0]}?)" if close else ""))


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; a library error is one line on stderr (exit 1), not a traceback.
    Everything the command prints goes through ``safe_text.printable_streams``: no control character a repo's
    text holds reaches the terminal."""
    from fisherhub.safe_text import printable_streams

    argv = sys.argv[1:] if argv is None else list(argv)
    _check_flags(parser, argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    with warnings.catch_warnings(), printable_streams():
        warnings.showwarning = _one_line_warning
        try:
            return int(args.func(args) or 0)
        except FisherHubError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as the CLI's other messages: ``warning: ...`` on stderr, without the source line."""
    print(f"warning: {message}", file=file or sys.stderr)


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
