"""``fisherhub`` command line: one sub-command per module of this package.

Each module in ``COMMAND_MODULES`` defines ``register(subparsers)`` which adds its parser and sets
``func`` (a callable taking the parsed ``argparse.Namespace`` and returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from fisherhub.core.errors import FisherHubError

COMMAND_MODULES = ("sketch", "demo", "compare", "push", "list", "pull", "verify", "install_metric", "select", "index")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fisherhub",
        description="Head Fisher alignment signatures for causal LMs (sketch, compare, share, select).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"fisherhub.cli.{name}").register(subparsers)
    return parser


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; a library error is one line on stderr (exit 1), not a traceback."""
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except FisherHubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
