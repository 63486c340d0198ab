"""Figures (matplotlib, drawn without pyplot, so the user's backend is left alone): alignment heatmaps with
error bars and a legend saying what the numbers mean."""

from __future__ import annotations

import math
import os
import textwrap
from pathlib import Path

from fisherhub.core.alignment import AlignmentMatrix
from fisherhub.core.geometry import DECOMPOSITION, GEOMETRIES, Geometry
from fisherhub.extras import require
from fisherhub.safe_text import printable


def panels() -> list[Geometry]:
    """The geometries of the heatmap's panels, in order: the ``shown`` ones (A, S_a, S_e, ρ)."""
    return [GEOMETRIES[name] for name in DECOMPOSITION]


#: the ``gid`` of the patch drawn over each non-significant cell
NOT_SIGNIFICANT_GID = "not-significant"
#: the ``gid`` of the patch drawn over each doubted cell (``AlignmentMatrix.doubt``: not to be trusted)
DOUBTED_GID = "doubted"


def alignment_figure(matrix: AlignmentMatrix, title: str | None = None):
    """A, S_a, S_e and ρ (every ``shown`` geometry, two panels a row) as annotated heatmaps (value ± standard
    error), as a ``matplotlib.figure.Figure``.

    A, S_a and S_e share the scale [0, 1]; ρ (a two-sided geometry) is centred on its null 1 (independence of a
    and e), its scale spanning the significant cells only, and blank (—) where undefined (S_a or S_e not
    significantly above 0). Cells that are not significant (``fisherhub.legend``, by each geometry's rule) are
    hatched grey instead of coloured, cells not to be trusted (``AlignmentMatrix.doubt``) crossed out in red with
    a "!"; the legend lines that apply (with the reasons of the doubts) are printed under the panels.
    """
    require("matplotlib")
    from matplotlib.figure import Figure

    from fisherhub.legend import matrix_legend, matrix_significance

    n = len(matrix.names)
    size = max(4.0, 0.9 * n + 2.0)
    legend = matrix_legend(matrix, hatched=True)
    shown_panels = panels()
    rows = math.ceil(len(shown_panels) / 2)
    figure = Figure(figsize=(2 * size, rows * size * 0.9 + 0.35 * len(legend)), layout="constrained")
    axes = figure.subplots(rows, 2, squeeze=False)
    significance = matrix_significance(matrix)
    doubted = matrix.doubted()
    for axis in axes.flat[len(shown_panels) :]:
        axis.set_visible(False)
    for axis, geometry in zip(axes.flat, shown_panels):
        image = _draw_panel(axis, geometry, matrix, significance[geometry.name], doubted)
        figure.colorbar(image, ax=axis, shrink=0.8)
    figure.suptitle(title or f"FisherSketch alignments (sketch id {matrix.sketch_id})")
    if legend:
        width = int(2 * size * 13)  # characters per line at fontsize 8
        text = "\n".join(textwrap.fill(printable(line), width) for line in legend)
        figure.supxlabel(text, fontsize=8, ha="left", x=0.01, multialignment="left")
    return figure


def names_heatmap(matrix, names: list[str], title: str, doubted=None):
    """One (k, k) matrix (numpy) as a heatmap with its rows and columns named ``names``, as a
    ``matplotlib.figure.Figure`` (small type: made for many names, e.g. the rows of a signature index); the
    cells of ``doubted`` ((k, k) bool) are left uncoloured and marked with a red "!" (not to be read)."""
    import numpy as np

    from fisherhub import extras

    extras.require("matplotlib")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2 + 0.35 * len(names), 1.5 + 0.35 * len(names)))
    axis = figure.subplots()
    doubted = np.zeros(np.shape(matrix), dtype=bool) if doubted is None else doubted
    image = axis.imshow(np.where(doubted, np.nan, matrix), cmap="viridis")
    for i, j in zip(*np.nonzero(doubted)):  # outside what [0, 1] and its error bar allow: not to be read
        axis.text(j, i, "!", ha="center", va="center", fontsize=6, color="red")
    axis.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
    axis.set_yticks(range(len(names)), names, fontsize=6)
    axis.set_title(title + (" (! red: not to be trusted)" if doubted.any() else ""), fontsize=8)
    figure.colorbar(image, ax=axis, shrink=0.8)
    figure.tight_layout()
    return figure


def _draw_panel(axis, geometry: Geometry, matrix: AlignmentMatrix, shown, doubted):
    """One geometry's heatmap on ``axis``: significant cells coloured (a two-sided geometry centred on its null),
    the others hatched grey, doubted ones crossed out in red, each annotated value ± standard error (— where
    undefined); returns the image."""
    n = len(matrix.names)
    values = geometry.value(matrix).double()
    errors = geometry.stderr(matrix).double()
    coloured = values.masked_fill(~shown | doubted, math.nan)
    spread = 1.0
    centre = geometry.null
    if geometry.two_sided:
        finite = coloured[~coloured.isnan()]
        spread = max(0.1, float((finite - centre).abs().max())) if finite.numel() else 1.0
        image = axis.imshow(coloured.numpy(), cmap="RdBu_r", vmin=centre - spread, vmax=centre + spread)
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
                dark = abs(value - centre) > 0.6 * spread if geometry.two_sided else value < 0.6
                shade = "white" if dark else "black"
            axis.text(j, i, f"{value:.2f}\n±{error:.2f}", ha="center", va="center", fontsize=8, color=shade)
    axis.set_title(geometry.label)
    names = [printable(name) for name in matrix.names]
    axis.set_xticks(range(n), names, rotation=45, ha="right")
    axis.set_yticks(range(n), names)
    return image


def _cover(i: int, j: int, face: str, edge: str, hatch: str, width: float, gid: str):
    """The hatched patch drawn over cell (i, j) instead of its colour."""
    require("matplotlib")
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
