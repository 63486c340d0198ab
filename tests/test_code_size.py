"""Short functions and files: no function in ``src/`` longer than ``MAX_FUNCTION_LINES`` (its docstring not
counted) unless its docstring says why (a line starting ``Long:``), and no source file of ``MAX_FILE_LINES``
lines or more."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "fisherhub"
MAX_FUNCTION_LINES = 60
MAX_FILE_LINES = 500
#: a docstring line that states why a function is longer than ``MAX_FUNCTION_LINES``
REASON = "Long:"


def sources() -> list[Path]:
    """The package's own modules (the Space apps under ``hub_cards/`` are checked there)."""
    return sorted(p for p in PACKAGE.rglob("*.py") if "hub_cards" not in p.relative_to(PACKAGE).parts)


def function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the end, less those of the docstring."""
    lines = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def long_functions(path: Path) -> list[str]:
    """Functions of ``path`` over ``MAX_FUNCTION_LINES`` lines whose docstring gives no reason."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and function_lines(node) > MAX_FUNCTION_LINES:
            doc = ast.get_docstring(node) or ""
            if not any(line.strip().startswith(REASON) for line in doc.splitlines()):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                found.append(f"{where}:{node.lineno} {node.name} ({function_lines(node)} lines)")
    return found


def test_no_function_over_the_limit_without_a_reason():
    found = [line for path in sources() for line in long_functions(path)]
    assert found == [], "split these, or say why in their docstring (`Long: ...`):\n" + "\n".join(found)


def test_no_source_file_reaches_the_limit():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in sources()}
    large = {path: n for path, n in sizes.items() if n >= MAX_FILE_LINES}
    assert large == {}, f"split these files (under {MAX_FILE_LINES} lines each): {large}"


def test_the_checks_see_a_long_function_and_accept_a_stated_reason(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    planted = tmp_path / "planted.py"
    planted.write_text(f'def long():\n    """Docstring lines do not count.\n\n    Two.\n    """\n{body}\n')
    assert [line.split()[-3] for line in long_functions(planted)] == ["long"]
    planted.write_text(
        f'def long():\n    """Many steps.\n\n    Long: one sequence of steps that read best together.\n    """\n{body}'
    )
    assert long_functions(planted) == []
    planted.write_text(f"def short():\n{body[: -len(body.splitlines()[-1]) - 2]}\n")
    assert long_functions(planted) == []
