"""Figures (matplotlib): alignment heatmaps with error bars.

Figures are ``matplotlib.figure.Figure`` objects made without pyplot, so the user's backend and pyplot's
figure list are left alone; ``Figure.savefig`` renders them with matplotlib's default canvas.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from fisherhub.core.alignment import AlignmentMatrix

#: (field, stderr field, panel title) of the four heatmap panels
PANELS = (
    ("fisher", "stderr", "Fisher alignment A"),
    ("activation", "activation_stderr", "activation-only S_a"),
    ("error", "error_stderr", "error-only S_e"),
    ("coupling", "coupling_stderr", "coupling ρ = A / (S_a S_e)"),
)


def alignment_heatmap_figure(matrix: AlignmentMatrix, title: str | None = None):
    """A, S_a, S_e and ρ as annotated heatmaps (value ± standard error), a ``matplotlib.figure.Figure``.

    A, S_a and S_e share the scale [0, 1]; ρ is centred on 1 (independence of a and e) and blank where
    undefined (S_a or S_e not significantly above 0).
    """
    from matplotlib.figure import Figure

    n = len(matrix.names)
    size = max(4.0, 0.9 * n + 2.0)
    figure = Figure(figsize=(2 * size, 2 * size * 0.9), layout="constrained")
    axes = figure.subplots(2, 2)
    for axis, (field, stderr_field, panel_title) in zip(axes.flat, PANELS):
        values = getattr(matrix, field).double()
        errors = getattr(matrix, stderr_field).double()
        spread = 1.0
        if field == "coupling":
            finite = values[~values.isnan()]
            spread = max(0.1, float((finite - 1).abs().max())) if finite.numel() else 1.0
            image = axis.imshow(values.numpy(), cmap="RdBu_r", vmin=1 - spread, vmax=1 + spread)
        else:
            image = axis.imshow(values.numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
        for i in range(n):
            for j in range(n):
                value, error = float(values[i, j]), float(errors[i, j])
                if math.isnan(value):
                    continue
                dark = abs(value - 1) > 0.6 * spread if field == "coupling" else value < 0.6
                shade = "white" if dark else "black"
                axis.text(j, i, f"{value:.2f}\n±{error:.2f}", ha="center", va="center", fontsize=8, color=shade)
        axis.set_title(panel_title)
        axis.set_xticks(range(n), matrix.names, rotation=45, ha="right")
        axis.set_yticks(range(n), matrix.names)
        figure.colorbar(image, ax=axis, shrink=0.8)
    figure.suptitle(title or f"FisherSketch alignments (sketch id {matrix.sketch_id})")
    return figure


def alignment_heatmaps(matrix: AlignmentMatrix, path: str | os.PathLike, title: str | None = None) -> Path:
    """Write ``alignment_heatmap_figure(matrix, title)`` to ``path`` (format from its suffix); return it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    alignment_heatmap_figure(matrix, title).savefig(path, dpi=120)
    return path
