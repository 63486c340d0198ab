"""The package's import structure: no import cycle between modules nor between folders (in-function and
type-only imports counted); a core that imports nothing of the
package outside ``core/`` and no third-party package but torch, numpy and safetensors; and a layer order
(``LAYERS``) in which a module imports only its own layer or lower ones, type-only imports included."""

import ast
import sys
from pathlib import Path

import fisherhub

PACKAGE = Path(fisherhub.__file__).parent
CORE_THIRD_PARTY = {"torch", "numpy", "safetensors"}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(
    path: Path, *, module_level_only: bool, modules: frozenset[str] = frozenset(), package: Path = PACKAGE
) -> set[str]:
    """Absolute names a module imports (relative imports resolved); with ``module_level_only``, those run at
    import time (not inside functions, nor under ``if TYPE_CHECKING:``), else all of them, type-only ones
    included. ``from package import submodule`` names the submodule only, when it is one of ``modules``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(node, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if not module_level_only:
                    visit(child, False)
                continue
            if module_level_only and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = module_name(path, package).split(".")
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
                return stack[stack.index(target) :] + [target]
            if target not in state and (cycle := walk(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := walk(node)):
            return cycle
    return None


def folder_of(module: str) -> str:
    """The top-level module or package of ``fisherhub`` a module lies in (``fisherhub.hub.read`` -> ``hub``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between folders (top-level modules and packages) of a module import graph."""
    folders: dict[str, set[str]] = {}
    for name, targets in graph.items():
        source = folder_of(name)
        folders.setdefault(source, set()).update(folder_of(t) for t in targets if folder_of(t) != source)
    return folders


def test_no_import_cycle_between_modules_in_function_and_type_only_imports_included():
    graph = full_import_graph(PACKAGE, fisherhub._EXPORTS)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_import_cycle_between_folders_even_within_a_layer():
    """Folders of one layer (``data``, ``lm``, ``hub``) may import each other, but not both ways round."""
    graph = folder_graph(full_import_graph(PACKAGE, fisherhub._EXPORTS))
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_checks_see_a_planted_in_function_back_import(tmp_path):
    """A copy of the package with in-function back-imports: ``core/spec.py`` importing ``core.signature`` (which
    imports it), and a ``data`` module and an ``lm`` module importing each other's folder: a module cycle and a
    cycle of two folders of one layer."""
    import shutil

    package = tmp_path / "fisherhub"
    shutil.copytree(PACKAGE, package, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    spec = package / "core" / "spec.py"
    spec.write_text(spec.read_text() + "\n\ndef _planted():\n    from fisherhub.core.signature import Signature\n")
    (package / "lm" / "planted.py").write_text("def f():\n    from fisherhub.data import batches\n")
    (package / "data" / "planted.py").write_text("def g():\n    from fisherhub.lm import head\n")
    graph = full_import_graph(package, fisherhub._EXPORTS)
    cycle = find_cycle(graph)
    assert cycle is not None and {"fisherhub.core.spec", "fisherhub.core.signature"} <= set(cycle), cycle
    assert set(find_cycle(folder_graph(graph)) or ()) == {"data", "lm"}
    assert "fisherhub.core.signature" not in full_import_graph(PACKAGE, fisherhub._EXPORTS)["fisherhub.core.spec"]


def test_the_checker_sees_a_cycle_and_a_forbidden_core_import(tmp_path):
    """The walkers above can fail: a core module importing transformers is found, and so is a cycle."""
    bad = tmp_path / "bad.py"
    bad.write_text("import transformers\nfrom fisherhub.lm import head\n\ndef f():\n    import requests\n")
    found = imports(bad, module_level_only=False)
    assert {"transformers", "fisherhub.lm", "requests"} <= found
    assert "requests" not in imports(bad, module_level_only=True)
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


#: The layers, lowest first: a module of one imports only modules of its own layer or lower ones. Each entry
#: names top-level modules or packages of ``fisherhub``; a module belongs to the entry naming its top level.
#: ``extras`` (imports of the optional packages) and ``safe_text`` (the one sanitiser of text from repos, under every
#: printer) sit with ``core``; ``legend`` and ``plotting`` draw alignments and heatmaps (over ``core`` only) below
#: the integrations, so that ``hub`` (the signature index's card), ``selection`` and ``cli`` can use them;
#: ``training_callback`` is a Trainer integration over ``hub`` and ``pipeline``, beside
#: ``selection`` and ``metric``; ``verify`` (re-sketching a published signature, over ``pipeline`` and ``hub``) sits
#: below ``selection``, which reports whether its picks are verifiable; ``config`` (the option dataclasses, once split out of ``options``) sits with
#: ``options``; ``space`` (the Spaces' pages) sits over ``selection``, under ``cli``; ``testing`` (oracles, tiny
#: models and the local Hub server for tests and benchmarks) sits below ``cli``, whose ``hub serve`` runs that server
#: for people; ``__main__`` is the entry point.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(names.split())
    for names in (
        "core extras safe_text",
        "options config",
        "legend plotting",
        "data lm hub",
        "pipeline",
        "analysis",
        "verify",
        "selection metric training_callback generation_signing testing",
        "space",
        "cli",
        "__main__",
    )
)

#: Known imports against the layer order, each (importer, imported) with the reason it is still here. An entry
#: that no longer matches an import fails the test, so the list only shrinks (none today).
LAYER_EXCEPTIONS: dict[tuple[str, str], str] = {}


def layer_of(module: str) -> int | None:
    """The index in ``LAYERS`` of a ``fisherhub`` module, None for one no layer names (and the root package)."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    return next((index for index, names in enumerate(LAYERS) if parts[1] in names), None)


def imported_module(name: str, modules: set[str], exports: dict[str, str]) -> str | None:
    """The package module an imported name refers to: the longest module prefix of it, a name the root package
    exports lazily (``from fisherhub import alignment``) resolved to the module defining it; None for the root
    package itself (importing any submodule imports it) and for names outside the package."""
    parts = name.split(".")
    if parts[0] != "fisherhub":
        return None
    if len(parts) == 2 and parts[1] in exports:
        return exports[parts[1]]
    for end in range(len(parts), 1, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def layer_violations(graph: dict[str, set[str]]) -> tuple[list[str], set[tuple[str, str]]]:
    """Of an import graph of package modules: the modules no layer names, and the (importer, imported) pairs in
    which the imported module lies in a higher layer than the importer."""
    unplaced = sorted(
        name
        for name in {*graph, *(t for targets in graph.values() for t in targets)}
        if name != "fisherhub" and layer_of(name) is None
    )
    upward = {
        (name, target)
        for name, targets in graph.items()
        for target in targets
        if None not in (layer_of(name), layer_of(target)) and layer_of(target) > layer_of(name)
    }
    return unplaced, upward


def full_import_graph(package: Path, exports: dict[str, str]) -> dict[str, set[str]]:
    """Every import of every module of ``package`` (in functions and under ``if TYPE_CHECKING:`` too), as
    package modules."""
    modules = {module_name(path, package): path for path in package.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = imports(path, module_level_only=False, modules=frozenset(modules), package=package)
        targets = {imported_module(imported, set(modules), exports) for imported in found}
        graph[name] = {target for target in targets if target not in (None, name)}
    return graph


def test_modules_import_only_their_own_layer_or_lower_ones_type_only_imports_included():
    unplaced, upward = layer_violations(full_import_graph(PACKAGE, fisherhub._EXPORTS))
    assert not unplaced, f"modules in no layer of LAYERS (place them): {unplaced}"
    assert not upward - set(LAYER_EXCEPTIONS), sorted(upward - set(LAYER_EXCEPTIONS))
    assert not set(LAYER_EXCEPTIONS) - upward, f"remove from LAYER_EXCEPTIONS: {sorted(set(LAYER_EXCEPTIONS) - upward)}"


def test_the_layer_checker_sees_an_upward_import_a_type_only_one_and_an_unplaced_module(tmp_path):
    """A copy of the package with planted violations: hub importing cli under ``if TYPE_CHECKING:``, a new
    ``analysis`` module importing selection inside a function, core importing the package's lazy export of
    pipeline, and a top-level module no layer names."""
    import shutil

    package = tmp_path / "fisherhub"
    shutil.copytree(PACKAGE, package, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "hub" / "planted.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from fisherhub.cli.commands.select import main\n"
    )
    (package / "analysis").mkdir(exist_ok=True)
    (package / "analysis" / "planted.py").write_text("def f():\n    from ..selection import results\n")
    (package / "core" / "planted.py").write_text("from fisherhub import sketch\n")
    (package / "unlayered.py").write_text("import os\n")
    unplaced, upward = layer_violations(full_import_graph(package, fisherhub._EXPORTS))
    assert unplaced == ["fisherhub.unlayered"]
    assert upward - set(LAYER_EXCEPTIONS) == {
        ("fisherhub.hub.planted", "fisherhub.cli.commands.select"),
        ("fisherhub.analysis.planted", "fisherhub.selection.results"),
        ("fisherhub.core.planted", "fisherhub.pipeline"),
    }
    assert layer_violations({"fisherhub.selection.x": {"fisherhub.analysis.y", "fisherhub.core.z"}}) == ([], set())
