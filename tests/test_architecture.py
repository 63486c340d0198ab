"""The package's import structure: no import cycle between modules, and a core that imports nothing of the
package outside ``core/`` and no third-party package but torch, numpy and safetensors."""

import ast
import sys
from pathlib import Path

import fisherhub

PACKAGE = Path(fisherhub.__file__).parent
CORE_THIRD_PARTY = {"torch", "numpy", "safetensors"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, *, module_level_only: bool, modules: frozenset[str] = frozenset()) -> set[str]:
    """Absolute names a module imports (relative imports resolved); with ``module_level_only``, those run at
    import time (not inside functions, nor under ``if TYPE_CHECKING:``). ``from package import submodule``
    names the submodule only, when it is one of ``modules``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(node, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if not module_level_only:
                    visit(child, False)
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = module_name(path).split(".")
                    anchor = anchor[: len(anchor) - child.level + (path.name == "__init__.py")]
                    base = ".".join([*anchor, base] if base else anchor)
                names = {f"{base}.{alias.name}" for alias in child.names}
                found.update(names if names <= modules else {base, *names})
            visit(child, top)

    visit(tree, True)
    return found


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def test_core_imports_only_core_torch_numpy_safetensors_and_the_standard_library():
    modules = package_modules()
    offenders = {}
    for name, path in modules.items():
        if not name.startswith("fisherhub.core"):
            continue
        for imported in imports(path, module_level_only=False):
            top = imported.split(".")[0]
            if top == "fisherhub":
                if not imported.startswith("fisherhub.core"):
                    offenders.setdefault(name, []).append(imported)
            elif top not in CORE_THIRD_PARTY and top not in sys.stdlib_module_names and top != "__future__":
                offenders.setdefault(name, []).append(imported)
    assert not offenders, offenders


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph (its nodes, the first repeated at the end), or None (depth-first)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := walk(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := walk(node)):
            return cycle
    return None


def test_no_import_cycle_between_modules():
    modules = package_modules()
    graph = {
        name: {
            target
            for target in imports(path, module_level_only=True, modules=frozenset(modules))
            if target in modules and target != name
        }
        for name, path in modules.items()
    }
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_checker_sees_a_cycle_and_a_forbidden_core_import(tmp_path):
    """The walkers above can fail: a core module importing transformers is found, and so is a cycle."""
    bad = tmp_path / "bad.py"
    bad.write_text("import transformers\nfrom fisherhub.lm import head\n\ndef f():\n    import requests\n")
    found = imports(bad, module_level_only=False)
    assert {"transformers", "fisherhub.lm", "requests"} <= found
    assert "requests" not in imports(bad, module_level_only=True)
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
