"""Figures (matplotlib, drawn without pyplot, so the user's backend is left alone): alignment heatmaps with
error bars and a legend saying what the numbers mean."""

from __future__ import annotations

import math
import os
import textwrap
from pathlib import Path

from fisherhub.core.alignment import AlignmentMatrix
from fisherhub.core.geometry import DECOMPOSITION, GEOMETRIES
from fisherhub.extras import require
from fisherhub.safe_text import printable

#: the geometries of the four heatmap panels, in order
PANELS = tuple(GEOMETRIES[name] for name in DECOMPOSITION)
#: the ``gid`` of the patch drawn over each non-significant cell
NOT_SIGNIFICANT_GID = "not-significant"
#: the ``gid`` of the patch drawn over each doubted cell (``AlignmentMatrix.doubt``: not to be trusted)
DOUBTED_GID = "doubted"


def alignment_figure(matrix: AlignmentMatrix, title: str | None = None):
    """A, S_a, S_e and ρ as annotated heatmaps (value ± standard error), as a ``matplotlib.figure.Figure``.

    A, S_a and S_e share the scale [0, 1]; ρ is centred on 1 (independence of a and e), its scale spanning the
    significant cells only, and blank (—) where undefined (S_a or S_e not significantly above 0). Cells that are
    not significant (``fisherhub.legend``, by each geometry's rule) are hatched grey instead of coloured, cells not
    to be trusted (``AlignmentMatrix.doubt``) crossed out in red with a "!"; the legend lines that apply (with the
    reasons of the doubts) are printed under the panels.
    """
    require("matplotlib")
    from matplotlib.figure import Figure

    from fisherhub.legend import matrix_legend, matrix_significance

    n = len(matrix.names)
    size = max(4.0, 0.9 * n + 2.0)
    legend = matrix_legend(matrix, hatched=True)
    figure = Figure(figsize=(2 * size, 2 * size * 0.9 + 0.35 * len(legend)), layout="constrained")
    axes = figure.subplots(2, 2)
    significance = matrix_significance(matrix)
    doubted = matrix.doubted()
    for axis, geometry in zip(axes.flat, PANELS):
        field = geometry.name
        values = geometry.value(matrix).double()
        errors = geometry.stderr(matrix).double()
        shown = significance[field]
        coloured = values.masked_fill(~shown | doubted, math.nan)
        spread = 1.0
        if field == "coupling":
            finite = coloured[~coloured.isnan()]
            spread = max(0.1, float((finite - 1).abs().max())) if finite.numel() else 1.0
            image = axis.imshow(coloured.numpy(), cmap="RdBu_r", vmin=1 - spread, vmax=1 + spread)
        else:
            image = axis.imshow(coloured.numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
        for i in range(n):
            for j in range(n):
                value, error = float(values[i, j]), float(errors[i, j])
                if math.isnan(value):
                    axis.text(j, i, "—", ha="center", va="center", fontsize=9, color="dimgray")
                    continue
                if doubted[i, j]:
                    axis.add_patch(_cover(i, j, "mistyrose", "red", "xx", 1.0, DOUBTED_GID))
                    axis.text(j, i, f"! {value:.2f}\n±{error:.2f}", ha="center", va="center", fontsize=8, color="red")
                    continue
                if not shown[i, j]:
                    axis.add_patch(_cover(i, j, "lightgray", "gray", "///", 0.0, NOT_SIGNIFICANT_GID))
                    shade = "black"
                else:
                    dark = abs(value - 1) > 0.6 * spread if field == "coupling" else value < 0.6
                    shade = "white" if dark else "black"
                axis.text(j, i, f"{value:.2f}\n±{error:.2f}", ha="center", va="center", fontsize=8, color=shade)
        axis.set_title(geometry.label)
        names = [printable(name) for name in matrix.names]
        axis.set_xticks(range(n), names, rotation=45, ha="right")
        axis.set_yticks(range(n), names)
        figure.colorbar(image, ax=axis, shrink=0.8)
    figure.suptitle(title or f"FisherSketch alignments (sketch id {matrix.sketch_id})")
    if legend:
        width = int(2 * size * 13)  # characters per line at fontsize 8
        text = "\n".join(textwrap.fill(printable(line), width) for line in legend)
        figure.supxlabel(text, fontsize=8, ha="left", x=0.01, multialignment="left")
    return figure


def _cover(i: int, j: int, face: str, edge: str, hatch: str, width: float, gid: str):
    """The hatched patch drawn over cell (i, j) instead of its colour."""
    from matplotlib.patches import Rectangle

    return Rectangle(
        (j - 0.5, i - 0.5), 1.0, 1.0, facecolor=face, edgecolor=edge, hatch=hatch, linewidth=width, gid=gid
    )


def alignment_heatmaps(matrix: AlignmentMatrix, path: str | os.PathLike, title: str | None = None) -> Path:
    """Write ``alignment_figure(matrix, title)`` to ``path`` (PNG, or what the suffix says); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    alignment_figure(matrix, title).savefig(path, dpi=120)
    return path
