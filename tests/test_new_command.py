"""A new ``fisherhub`` sub-command is one file in ``fisherhub/cli/commands/``: the parser is built by iterating
that package, so the file is found with no list to update; no command module shadows a builtin."""

from __future__ import annotations

import builtins
import importlib
import sys

import pytest

from fisherhub.cli import build_parser, command_modules, commands, main

GREET = '''"""``fisherhub greet NAME``: a command that exists only in this test."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser("greet", help="say hello", description=__doc__)
    parser.add_argument("name", help="who to greet")
    parser.add_argument("--times", type=int, default=1, help="how often")
    parser.set_defaults(func=run)


def run(args) -> int:
    print(" ".join([f"hello {args.name}"] * args.times))
    return 0
'''


@pytest.fixture
def greet_command(tmp_path, monkeypatch):
    """``greet.py`` in a folder that is part of the commands package (as if dropped into it)."""
    (tmp_path / "greet.py").write_text(GREET)
    monkeypatch.setattr(commands, "__path__", [*commands.__path__, str(tmp_path)])
    yield
    sys.modules.pop("fisherhub.cli.commands.greet", None)
    importlib.invalidate_caches()


def test_a_new_command_is_one_file(greet_command, capsys):
    assert "greet" in command_modules()
    assert main(["greet", "world", "--times", "2"]) == 0
    assert capsys.readouterr().out == "hello world hello world\n"


def test_mistyped_flags_of_a_new_command_are_named(greet_command, capsys):
    with pytest.raises(SystemExit):
        main(["greet", "world", "--tmes", "2"])
    assert "--tmes (did you mean --times?)" in capsys.readouterr().err


def test_every_command_module_registers_one_command_and_none_is_named_after_a_builtin():
    names = command_modules()
    assert {"sketch", "compare", "select", "index", "list_signatures"} <= set(names)
    assert not set(names) & set(dir(builtins)), set(names) & set(dir(builtins))
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    assert len(subparsers.choices) == len(names)
    assert "list" in subparsers.choices and "greet" not in subparsers.choices
