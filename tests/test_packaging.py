"""Packaging: every third-party import of src/ is a declared dependency (those of ``fisherhub.testing`` a
dependency or a ``test`` extra), every dependency is used, the
installed versions meet the declared floors, the build backend floor, LICENSE and py.typed reach the wheel."""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
import pytest
from wheel_build import build_wheel

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "src" / "fisherhub"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
DEPENDENCIES = {
    canonicalize_name(Requirement(line).name): Requirement(line) for line in PYPROJECT["project"]["dependencies"]
}
TEST_EXTRA = {
    canonicalize_name(Requirement(line).name) for line in PYPROJECT["project"]["optional-dependencies"]["test"]
}
#: the package that tests and benchmarks share (``fisherhub.testing``): it may import the ``test`` extra
TESTING = SOURCE / "testing"
#: the optional parts of fisherhub.extras, each an extra of its own (besides other extras of fisherhub it needs)
OPTIONAL = {"gguf": "gguf", "plot": "matplotlib", "rich": "rich", "space": "gradio"}
EXTRAS = {
    extra: Requirement(line)
    for extra in OPTIONAL
    for line in PYPROJECT["project"]["optional-dependencies"][extra]
    if not line.startswith("fisherhub[")
}


def third_party_imports(testing: bool = False) -> dict[str, list[str]]:
    """Top-level module -> the files of src/fisherhub importing it (stdlib and fisherhub itself left out);
    those of ``fisherhub.testing`` only, if ``testing``, else all the others."""
    found: dict[str, list[str]] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        if path.is_relative_to(TESTING) != testing:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "fisherhub":
                    found.setdefault(top, []).append(str(path.relative_to(SOURCE)))
    return found


def distribution_of(module: str) -> str:
    (distribution, *_) = importlib.metadata.packages_distributions()[module]
    return canonicalize_name(distribution)


def test_every_import_is_declared():
    imports = third_party_imports()
    assert {"torch", "yaml", "jinja2", "fsspec", "transformers"} <= set(imports)
    declared = {*DEPENDENCIES, *(canonicalize_name(requirement.name) for requirement in EXTRAS.values())}
    undeclared = {module: files for module, files in imports.items() if distribution_of(module) not in declared}
    assert undeclared == {}


def test_the_testing_package_imports_only_dependencies_and_the_test_extra():
    imports = third_party_imports(testing=True)
    assert {"torch", "transformers", "tokenizers", "scipy", "yaml"} <= set(imports)
    undeclared = {
        module: files
        for module, files in imports.items()
        if distribution_of(module) not in set(DEPENDENCIES) | TEST_EXTRA
    }
    assert undeclared == {}


def test_every_dependency_is_used():
    used = {distribution_of(module) for module in third_party_imports()}
    declared = {*DEPENDENCIES, *(canonicalize_name(requirement.name) for requirement in EXTRAS.values())}
    assert declared - used == set()


def test_the_optional_packages_are_extras_imported_only_through_require():
    """gguf, matplotlib, rich and gradio are extras (each its own; the first three in ``[all]``, which the demo
    extra installs; the test extra installs ``[all]`` and ``[space]``), never imported when a module is: a
    function imports one after ``require``, which names the pip command when it is missing."""
    from fisherhub.extras import EXTRAS as REQUIRED
    from fisherhub.extras import IN_ALL

    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {extra: requirement.name for extra, requirement in EXTRAS.items()} == OPTIONAL
    assert {module: extra for module, (extra, _) in REQUIRED.items()} == {v: k for k, v in OPTIONAL.items()}
    assert extras["all"] == [f"fisherhub[{','.join(IN_ALL)}]"] and "fisherhub[all,space]" in extras["test"]
    assert "fisherhub[all]" in extras["demo"] and not set(OPTIONAL.values()) & set(DEPENDENCIES)
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:  # module level (a TYPE_CHECKING block is not run)
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not {name.split(".")[0] for name in names} & set(OPTIONAL.values()), f"{path}: {names}"
        for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            body = ast.unparse(function)
            for module in set(OPTIONAL.values()) - {"gguf"}:
                if f"from {module}" in body or f"import {module}" in body:
                    assert f"require({module!r})" in body.replace('"', "'"), f"{path}: {function.name} imports {module}"


def test_require_names_the_pip_command_of_a_missing_extra(monkeypatch):
    from fisherhub.core.errors import InputError
    from fisherhub.extras import require

    for module in [m for m in sys.modules if m.split(".")[0] == "rich"]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "rich", None)  # as if not installed: importing it raises ModuleNotFoundError
    with pytest.raises(InputError, match=r"needs the optional package `rich`: pip install 'fisherhub\[rich\]'"):
        require("rich")
    assert require("json").dumps([]) == "[]"


def test_installed_versions_meet_the_floors():
    """The environment running the tests is a tested configuration: each floor is at most what is installed
    (.ci/floors runs the tests with the floors themselves)."""
    for name, requirement in DEPENDENCIES.items():
        installed = Version(Version(importlib.metadata.version(name)).public)
        assert requirement.specifier.contains(installed), f"{name} {installed} does not meet {requirement}"
        floors = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        assert len(floors) == 1, f"{requirement}: one lower bound (>=) per dependency"


def test_build_backend_floor_and_license():
    build = PYPROJECT["build-system"]
    assert build["build-backend"] == "setuptools.build_meta"
    (setuptools,) = [Requirement(line) for line in build["requires"] if Requirement(line).name == "setuptools"]
    assert not setuptools.specifier.contains("76.1") and setuptools.specifier.contains("77.0.3")
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"] and "END OF TERMS AND CONDITIONS" in text
    assert (SOURCE / "py.typed").is_file()


def test_wheel_contents(tmp_path):
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        header = archive.read(metadata).decode().split("\n\n")[0].splitlines()
        license_file = archive.read(next(name for name in names if name.endswith(".dist-info/licenses/LICENSE")))
    assert {
        "fisherhub/py.typed",
        "fisherhub/__main__.py",
        "fisherhub/metric/fisher_alignment.py",
        "fisherhub/core/calibration.json",
        "fisherhub/hub_cards/dataset_section.md",
    } <= names
    assert license_file == (REPO / "LICENSE").read_bytes()
    assert "License-Expression: Apache-2.0" in header and "License-File: LICENSE" in header
    requires = {
        canonicalize_name(Requirement(line.removeprefix("Requires-Dist: ")).name)
        for line in header
        if line.startswith("Requires-Dist: ") and "extra ==" not in line
    }
    assert requires == set(DEPENDENCIES)
