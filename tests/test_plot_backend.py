"""Plots are Figures made without pyplot: the user's matplotlib backend is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src"

SCRIPT = r"""
import sys
import matplotlib
matplotlib.use("svg")
import torch
from fisherhub import HeadBatch, SketchSpec, SketchState, alignment_matrix
from fisherhub.plotting import alignment_figure, alignment_heatmaps

spec = SketchSpec(d=8, vocab_size=32, m=256)
signatures = []
for task in range(2):
    generator = torch.Generator().manual_seed(task)
    a = 1.0 + torch.randn(200, 8, generator=generator)
    e = torch.linspace(-1, 1, 32).roll(3 * task) + 0.3 * torch.randn(200, 32, generator=generator)
    signatures.append(SketchState(spec).update(HeadBatch(activations=a, doc_index=torch.arange(200), errors=e)).finalize({"dataset": f"task{task}"}))
matrix = alignment_matrix(signatures)
figure = alignment_figure(matrix)
assert type(figure).__name__ == "Figure" and len(figure.axes) == 8, figure.axes
path = alignment_heatmaps(matrix, sys.argv[1])
assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
assert matplotlib.get_backend() == "svg", matplotlib.get_backend()
assert "matplotlib.pyplot" not in sys.modules
print("ok")
"""


def test_heatmaps_leave_the_backend_alone(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{SOURCE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "MPLBACKEND": ""}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "heatmap.png")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_library_never_switches_backend():
    offenders = [
        f"{path.relative_to(SOURCE)}:{number}"
        for path in sorted(SOURCE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "matplotlib.use(" in line or "import matplotlib.pyplot" in line
    ]
    assert offenders == []
