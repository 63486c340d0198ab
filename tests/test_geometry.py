"""The geometry registry (``fisherhub.core.geometry``) is the one place that spells a geometry: its fields,
standard-error field and label appear nowhere else in ``src/`` or ``benchmarks/``; its significance rules are
the ones the alignment, the legend, the verdict and the mixing weights apply."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from fisherhub import HeadBatch, SketchSpec, SketchState, alignment_matrix
from fisherhub.core.alignment import AlignmentResult
from fisherhub.core.geometry import ALPHA, GEOMETRIES, SIGNIFICANCE_Z, bonferroni_z

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "src" / "fisherhub" / "core" / "geometry.py"
#: labels the tables used before the registry (a copy of one must not come back)
FORMER_LABELS = ("A (Fisher)", "S_a (activation)", "S_e (error)", "FisherSketch A")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _strings(nodes) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def geometry_spellings(path: Path) -> list[str]:
    """Where ``path`` spells a geometry itself: a label or stderr field as a string, a table keyed by geometry
    names with string values (name -> label / field), or (name, field) pairs."""
    names = set(GEOMETRIES)
    labels = {g.label for g in GEOMETRIES.values()} | set(FORMER_LABELS)
    stderr_fields = {g.stderr_field for g in GEOMETRIES.values()} - {"stderr"}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            short = "\n" not in node.value and len(node.value) < 100  # a title or cell, not prose
            if node.value in stderr_fields or node.value in labels or (short and any(t in node.value for t in labels)):
                found.append(f"{where}: {node.value!r}")
        elif isinstance(node, ast.Dict):
            keyed = [(k, v) for k, v in zip(node.keys, node.values) if _strings([k]) and k.value in names]
            if len(keyed) >= 2 and all(
                _strings([v]) or isinstance(v, ast.Tuple) and _strings(v.elts) for _, v in keyed
            ):
                found.append(f"{where}: a table of geometries {[k.value for k, _ in keyed]}")
        elif isinstance(node, (ast.Tuple, ast.List)):
            pairs = [
                e
                for e in node.elts
                if isinstance(e, ast.Tuple) and len(_strings(e.elts)) >= 2 and _strings(e.elts)[0] in names
            ]
            if len(pairs) >= 2:
                found.append(f"{where}: (geometry, field) pairs {[ast.unparse(p) for p in pairs]}")
    return found


def test_one_place_spells_each_geometry():
    files = [p for folder in ("src", "benchmarks") for p in sorted((ROOT / folder).rglob("*.py")) if p != REGISTRY]
    assert files
    spelled = [line for path in files for line in geometry_spellings(path)]
    assert spelled == [], "geometries spelled outside core/geometry.py:\n" + "\n".join(spelled)
    assert geometry_spellings(REGISTRY)  # the check sees the registry's own table


def test_the_check_finds_a_second_copy(tmp_path):
    planted = tmp_path / "copy.py"
    planted.write_text(
        'LABELS = {"fisher": "A", "error": "S_e"}\nPANELS = (("fisher", "stderr"), ("error", "x"))\n'
        'TITLE = "activation-only S_a"\nSE = "coupling_stderr"\n'
    )
    assert len(geometry_spellings(planted)) == 4


def test_every_geometry_reads_a_computed_one_and_results_are_keyed_by_geometry(tmp_path):
    computed = {name for name, g in GEOMETRIES.items() if g.kernel is not None}
    assert {"fisher", "activation", "error", "coupling"} <= computed
    for geometry in GEOMETRIES.values():
        assert geometry.reads in computed | {None}, geometry.name
    spec = SketchSpec(d=4, vocab_size=8, m=64)
    signatures = []
    for seed in range(2):
        generator = torch.Generator().manual_seed(seed)
        a, e = torch.randn(200, 4, generator=generator) + 1, torch.randn(200, 8, generator=generator)
        signatures.append(
            SketchState(spec).update(HeadBatch(activations=a, doc_index=torch.arange(200), errors=e)).finalize()
        )
    matrix = alignment_matrix(signatures)
    result = matrix.pair(0, 1)
    assert set(matrix.values) == set(matrix.stderrs) == set(result.values) == computed
    assert (result.fisher, result.stderr) == (result.values["fisher"], result.stderrs["fisher"])
    assert torch.equal(matrix.activation_stderr, matrix.stderrs["activation"])
    assert AlignmentResult.from_record(result.as_dict()) == result
    assert list(result.as_dict())[:8] == [
        "fisher",
        "activation",
        "error",
        "coupling",
        "stderr",
        "activation_stderr",
        "error_stderr",
        "coupling_stderr",
    ]


def test_the_sketches_are_spelled_once():
    """``core.registry.SKETCHES`` is the one list of a signature's three sketches in ``src/``."""
    spelled = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List)) and {"joint", "activation", "error"} <= set(_strings(node.elts)):
                spelled.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert spelled == ["src/fisherhub/core/registry.py:" + str(_line_of_sketches())], spelled


def _line_of_sketches() -> int:
    source = (ROOT / "src" / "fisherhub" / "core" / "registry.py").read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(source, 1) if line.startswith("SKETCHES = "))


@pytest.mark.parametrize(
    ("name", "value", "stderr", "expected"),
    [
        ("fisher", 0.21, 0.1, True),
        ("fisher", 0.19, 0.1, False),
        ("fisher", -0.5, 0.1, False),
        ("fisher", 1.0, 0.0, True),
        ("coupling", 0.7, 0.1, True),
        ("coupling", 1.3, 0.1, True),
        ("coupling", 1.1, 0.1, False),
        ("coupling", 1.0, 0.0, False),
    ],
)
def test_one_value_is_significant_by_its_geometry_rule(name, value, stderr, expected):
    assert GEOMETRIES[name].significant(value, stderr) == expected
    assert SIGNIFICANCE_Z == 2.0 and bonferroni_z(ALPHA, 1) == pytest.approx(1.6449, abs=1e-4)
