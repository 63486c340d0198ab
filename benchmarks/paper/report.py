"""Results: JSON files, printed tables and heatmaps (matplotlib, Agg) under ``benchmarks/results/``."""

from __future__ import annotations

import json
import math
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from benchmarks.paper import common


def write_json(name: str, payload: Mapping, started: float) -> Path:
    """``<results>/<name>.json`` (``common.SETUP``) with the command, run time and environment beside ``payload``."""
    path = common.SETUP.results_dir / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": "python -m " + sys.modules["__main__"].__spec__.name
        if sys.modules["__main__"].__spec__
        else "python " + " ".join(sys.argv),
        "wall_seconds": round(time.time() - started, 1),
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "machine": platform.machine(),
        },
        **payload,
    }
    path.write_text(json.dumps(record, indent=1, default=_jsonable) + "\n")
    return path


def _jsonable(value):
    if isinstance(value, torch.Tensor):
        return value.tolist()
    raise TypeError(f"not JSON-able: {type(value).__name__}")


def matrix_rows(matrix: torch.Tensor, digits: int = 4) -> list[list[float | None]]:
    """A matrix as nested lists with NaN as null."""
    return [[None if math.isnan(v) else round(v, digits) for v in row] for row in matrix.double().tolist()]


def print_table(headers: Sequence[str], rows: Sequence[Sequence], title: str | None = None) -> str:
    """Print (and return) a plain text table; floats with 3 decimals."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ([title] if title else []) + [
        "  ".join(str(h).ljust(w) for h, w in zip(headers, widths)),
        "  ".join("-" * w for w in widths),
        *("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells),
    ]
    text = "\n".join(lines)
    print(text + "\n")
    return text


def _cell(value) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.1e}" if 0 < abs(value) < 1e-3 else f"{value:.3f}"
    return "n/a" if value is None else str(value)


def heatmaps(
    panels: Mapping[str, torch.Tensor],
    names: Sequence[str],
    path: Path,
    title: str,
    columns: int = 3,
    annotate: bool = True,
    limits: tuple[float, float] | None = None,
) -> Path:
    """One annotated heatmap per panel (NaN blank), in a grid; each panel has its own colour scale
    unless ``limits`` fixes one for all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n, count = len(names), len(panels)
    columns = min(columns, count)
    rows = math.ceil(count / columns)
    size = max(3.5, 0.45 * n + 1.5)
    figure, axes = plt.subplots(
        rows, columns, figsize=(size * columns * 1.15, size * rows), squeeze=False, constrained_layout=True
    )
    for axis, (panel_title, matrix) in zip(axes.flat, panels.items()):
        values = matrix.double().numpy()
        image = axis.imshow(values, cmap="viridis", **({} if limits is None else dict(zip(("vmin", "vmax"), limits))))
        if annotate and n <= 16:
            for i in range(n):
                for j in range(n):
                    if not math.isnan(values[i, j]):
                        axis.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=6, color="w")
        axis.set_title(panel_title, fontsize=9)
        axis.set_xticks(range(n), names, rotation=60, ha="right", fontsize=7)
        axis.set_yticks(range(n), names, fontsize=7)
        figure.colorbar(image, ax=axis, shrink=0.75)
    for axis in list(axes.flat)[count:]:
        axis.axis("off")
    figure.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def scatter_panels(
    panels: Mapping[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]],
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
) -> Path:
    """Scatter plots of (x, y, optional y error bars) per panel, with the diagonal y = x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4), squeeze=False, constrained_layout=True)
    for axis, (panel_title, (x, y, error)) in zip(axes.flat, panels.items()):
        axis.errorbar(
            x.numpy(),
            y.numpy(),
            yerr=None if error is None else error.numpy(),
            fmt="o",
            ms=3,
            elinewidth=0.6,
            alpha=0.8,
        )
        low = float(min(x.min(), y.min()))
        high = float(max(x.max(), y.max()))
        axis.plot([low, high], [low, high], "k--", lw=0.8)
        axis.set_title(panel_title, fontsize=9)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
    figure.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def bootstrap_rows(bootstrap: Mapping, labels: Mapping[str, str], references: Sequence[str]) -> list[list]:
    """Rows: method, top-1 [95% CI], mean regret [CI], max regret [CI], and top-1 / mean-regret differences
    against each of ``references`` (method − reference, paired bootstrap CI)."""

    def cell(entry: Mapping) -> str:
        low, high = entry["ci95"]
        return f"{entry['value']:.3f} [{low:.3f}, {high:.3f}]"

    rows = []
    for key, metrics in bootstrap["methods"].items():
        row = [labels.get(key, key), cell(metrics["top1"]), cell(metrics["mean_regret"]), cell(metrics["max_regret"])]
        for reference in references:
            difference = bootstrap["differences"].get(f"{key} - {reference}")
            row += ["–", "–"] if difference is None else [cell(difference["top1"]), cell(difference["mean_regret"])]
        rows.append(row)
    return rows


def print_bootstrap(bootstrap: Mapping, labels: Mapping[str, str], references: Sequence[str], title: str) -> str:
    headers = ["method", "top-1 [95% CI]", "mean regret", "max regret"]
    for reference in references:
        name = labels.get(reference, reference)
        headers += [f"Δtop-1 vs {name}", f"Δmean regret vs {name}"]
    return print_table(headers, bootstrap_rows(bootstrap, labels, references), title=title)


def regime_counts(selections: Sequence[Mapping]) -> dict[str, int]:
    """How many selections each head regime and each auto choice got."""
    counts: dict[str, int] = {}
    for selection in selections:
        choice = selection["choice"]
        for key in (
            f"regime {choice['regime']['name']}",
            f"auto scored by {choice['geometry']}",
            "verdict clear" if selection["verdict"]["clear"] else "verdict not clear",
        ):
            counts[key] = counts.get(key, 0) + 1
    return counts
