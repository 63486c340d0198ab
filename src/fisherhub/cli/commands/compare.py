"""``fisherhub compare REF [REF ...]``: alignment matrix of signatures (files or Hub refs).

Prints the Fisher alignment A ± standard error of every pair, then the decomposition A = ρ S_a S_e
(activation-only S_a, error-only S_e, coupling ρ), and writes the four heatmaps to a PNG.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fisherhub.cli.support.arguments import HelpFormatter
from fisherhub.core.geometry import DECOMPOSITION, GEOMETRIES, Geometry
from fisherhub.extras import require
from fisherhub.safe_text import printable

if TYPE_CHECKING:
    from fisherhub.core.alignment import AlignmentMatrix, AlignmentResult
    from fisherhub.core.signature import Signature


def _cell(value: float, error: float, doubted: bool = False) -> str:
    """value±error (— for NaN), followed by " !" where the pair is doubted (``AlignmentMatrix.doubt``)."""
    return ("—" if math.isnan(value) else f"{value:.3f}±{error:.3f}") + (" !" if doubted else "")


#: how a pair of sketches of the same data (``core.alignment.same_data``) is shown instead of its A = 1
SAME_DATA = "same data"


def alignment_table(matrix: AlignmentMatrix, same: frozenset[tuple[int, int]] = frozenset()):
    """A rich table of A ± stderr (rows and columns: the tasks); ``same``: the pairs (i, j) shown as the same data."""
    require("rich")
    from rich.table import Table
    from rich.text import Text

    doubted = matrix.doubted()
    table = Table(title=f"{GEOMETRIES['fisher'].label} ± stderr (sketch id {matrix.sketch_id})")
    table.add_column("", no_wrap=True)
    for name in matrix.names:
        table.add_column(Text(printable(name)), justify="right", no_wrap=True)
    for i, name in enumerate(matrix.names):
        cells = [
            SAME_DATA
            if (i, j) in same
            else _cell(float(matrix.fisher[i, j]), float(matrix.stderr[i, j]), bool(doubted[i, j]))
            for j in range(len(matrix.names))
        ]
        table.add_row(Text(printable(name)), *cells)
    return table


def same_data_pairs(signatures: Sequence[Signature]) -> frozenset[tuple[int, int]]:
    """The pairs i ≠ j of sketches of the same data."""
    from fisherhub.core.alignment import same_data

    n = len(signatures)
    return frozenset((i, j) for i in range(n) for j in range(n) if i != j and same_data(signatures[i], signatures[j]))


def _decomposition_cell(geometry: Geometry, pair: AlignmentResult, doubted: bool) -> str:
    """value ± stderr (then ! where the pair is doubted), — where undefined, * after a two-sided geometry (ρ)
    that departs from its null."""
    value, stderr = geometry.value(pair), geometry.stderr(pair)
    if value is None:
        return "—"
    starred = geometry.two_sided and geometry.significant(value, stderr)
    return _cell(value, stderr, doubted) + (" *" if starred else "")


def decomposition_table(matrix: AlignmentMatrix, same: frozenset[tuple[int, int]] = frozenset()):
    """A rich table with one row per pair: A, S_a, S_e and ρ (every ``shown`` geometry) with standard errors
    (* = ρ ≠ 1 significantly)."""
    require("rich")
    from rich.table import Table
    from rich.text import Text

    doubted = bool(matrix.doubted().any())
    table = Table(
        title="Decomposition A = ρ · S_a · S_e (S_a activation-only, S_e error-only, ρ coupling: — where S_a or "
        f"S_e is not significantly > 0, * where ρ ≠ 1 significantly{', ! not to be trusted' if doubted else ''})"
    )
    geometries = [GEOMETRIES[name] for name in DECOMPOSITION]
    for column in ("task i", "task j", *(g.symbol for g in geometries)):
        table.add_column(column, justify="left" if column.startswith("task") else "right", no_wrap=True)
    n = len(matrix.names)
    for i in range(n):
        for j in range(i + 1, n):
            pair = matrix.pair(i, j)
            pair_doubted = matrix.doubt(i, j) is not None
            cells = [_decomposition_cell(g, pair, pair_doubted) for g in geometries]
            cells[0] = SAME_DATA if (i, j) in same else cells[0]
            table.add_row(Text(printable(matrix.names[i])), Text(printable(matrix.names[j])), *cells)
    return table


def report(
    signatures: Sequence[Signature], names: Sequence[str], heatmap: str | os.PathLike | None, console=None
) -> AlignmentMatrix:
    """Print the alignment and decomposition tables and the legend lines that apply to them; write the heatmap
    PNG when a path is given."""
    require("rich")
    from fisherhub.core.alignment import alignment_matrix
    from fisherhub.legend import matrix_legend, noise_lines
    from fisherhub.plotting import alignment_heatmaps
    from fisherhub.safe_text import console as plain_console

    console = console or plain_console(width=None if sys.stdout.isatty() else 200)
    matrix = alignment_matrix(signatures, names=names)
    same = same_data_pairs(signatures)
    console.print(alignment_table(matrix, same))
    console.print(decomposition_table(matrix, same))
    for i, j in sorted(pair for pair in same if pair[0] < pair[1]):
        console.print(
            f"note: {names[i]} and {names[j]} are sketches of the same data (equal up to float rounding, "
            "as N processes give): A = 1 exactly",
            highlight=False,
        )
    for line in matrix_legend(matrix):
        console.print(f"note: {line}", highlight=False)
    for line in noise_lines(matrix):
        console.print(f"warning: {line}", highlight=False)
    if heatmap:
        console.print(f"heatmap: {alignment_heatmaps(matrix, heatmap)}")
    return matrix


def matrix_as_json(matrix: AlignmentMatrix) -> dict:
    """Every shown geometry's values, then their standard errors (keyed by ``stderr_field``), as nested lists
    (None where undefined), and why each pair (``doubts``, n × n) and each signature (``signature_doubts``) is
    not to be trusted, null where it is, and each signature's ``noise``."""

    def listed(values) -> list[list[float | None]]:
        return [[None if math.isnan(v) else v for v in row] for row in values.tolist()]

    values = {name: listed(matrix.values[name]) for name in DECOMPOSITION}
    stderrs = {GEOMETRIES[name].stderr_field: listed(matrix.stderrs[name]) for name in DECOMPOSITION}
    n = len(matrix.names)
    return {
        "names": matrix.names,
        "sketch_id": matrix.sketch_id,
        **values,
        **stderrs,
        "doubts": [[matrix.doubt(i, j) for j in range(n)] for i in range(n)],
        "signature_doubts": list(matrix.signature_doubts),
        "noise": list(matrix.signature_noise),
    }


def refuse_doubts(matrix: AlignmentMatrix, refs: Sequence[str]) -> None:
    """``InputError`` (one line: the file and the check) when ``matrix`` has a doubted signature or pair (its
    cells are marked ! in the tables printed before)."""
    from fisherhub.core.errors import InputError

    n = len(refs)
    reasons = [f"{ref}: {doubt}" for ref, doubt in zip(refs, matrix.signature_doubts) if doubt]
    reasons += [
        f"{refs[i]} vs {refs[j]}: {doubt}"
        for i in range(n)
        for j in range(i + 1, n)
        if (doubt := matrix.pair_doubts[i][j] or matrix.pair_doubts[j][i])
    ]
    if reasons:
        more = f" (and {len(reasons) - 1} more, marked ! above)" if len(reasons) > 1 else " (marked ! above)"
        raise InputError(f"not to be trusted: {reasons[0]}{more}")


def _name(ref: str) -> str:
    return Path(ref).stem if os.path.exists(ref) else ref


def run(namespace: argparse.Namespace) -> int:
    from fisherhub.cli.support.outputs import output_problem
    from fisherhub.core.atomic import atomic_path
    from fisherhub.core.errors import InputError
    from fisherhub.hub import load_signature

    refs = namespace.refs
    if len(refs) < 2:
        raise InputError("compare needs at least two signatures")
    names = namespace.names or [_name(ref) for ref in refs]
    if len(names) != len(refs):
        raise InputError(f"--names has {len(names)} names for {len(refs)} signatures")
    outputs = {"--heatmap": namespace.heatmap, "--json": namespace.json}
    problems = {flag: output_problem(path, flag, namespace.overwrite) for flag, path in outputs.items() if path}
    writable = {flag: path for flag, path in outputs.items() if path and problems[flag] is None}
    signatures = [load_signature(ref) for ref in refs]
    matrix = report(signatures, names, writable.get("--heatmap"))  # the tables are printed whatever the files
    if "--json" in writable:
        with atomic_path(writable["--json"]) as temporary:
            Path(temporary).write_text(json.dumps(matrix_as_json(matrix), indent=1))
    if refused := [problem for problem in problems.values() if problem]:
        raise InputError("; ".join(refused) + " (nothing was written there)")
    refuse_doubts(matrix, refs)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="alignment matrix of signatures with error bars and decomposition",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("refs", nargs="+", metavar="REF", help="signature file or Hub reference")
    parser.add_argument("--names", nargs="+", default=None, help="labels for the signatures (default: file stems)")
    parser.add_argument("--heatmap", default="alignment.png", help="PNG path for the heatmaps ('' to skip)")
    parser.add_argument("--json", default=None, help="also write the matrices as JSON to this path")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the --heatmap / --json files if they exist (default: an existing "
        "file is kept, the tables are printed, and the command exits with an error naming the file)",
    )
    parser.set_defaults(func=run)
