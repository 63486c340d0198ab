"""The tables and the heatmap say what their numbers mean: alignments above 1, blank ρ cells and non-significant
cells get a legend line where they occur (and only there); the figure hatches non-significant cells instead of
colouring them."""

from __future__ import annotations

import math

import pytest
import torch

from fisherhub.core.batch import HeadBatch
from fisherhub import SketchSpec, SketchState, alignment, alignment_matrix
from fisherhub.cli import main
from fisherhub.core.geometry import SIGNIFICANCE_Z
from fisherhub.legend import ABOVE_ONE, BLANK_COUPLING, NOT_SIGNIFICANT
from fisherhub.plotting import NOT_SIGNIFICANT_GID, alignment_figure, panels
from fisherhub.selection import RankedCandidate, Selection

SPEC = SketchSpec(d=8, vocab_size=32, m=512, estimator="maclaurin-hadamard")  # the values these cases were built on
DOCUMENTS = 400


def task(
    seed: int,
    documents: slice = slice(None),
    error_coordinates: slice = slice(None),
    shift: int = 0,
    noise: float = 0.3,
):
    """A synthetic task's signature: errors peaked along a shifted ramp, on some vocabulary coordinates only."""
    generator = torch.Generator().manual_seed(seed)
    activations = 1.0 + torch.randn(DOCUMENTS, 8, generator=generator)
    errors = torch.linspace(-1, 1, 32).roll(shift) + noise * torch.randn(DOCUMENTS, 32, generator=generator)
    mask = torch.zeros(32)
    mask[error_coordinates] = 1.0
    index = torch.arange(DOCUMENTS)
    state = SketchState(SPEC).update(
        HeadBatch(activations=activations[documents], doc_index=index[documents], errors=(errors * mask)[documents])
    )
    return state.finalize({})


@pytest.fixture(scope="module")
def tasks():
    return {
        "whole": task(0),
        "half": task(0, documents=slice(0, DOCUMENTS // 2)),  # half of "whole": aligns above 1
        "upper": task(1, error_coordinates=slice(16, 32), shift=3),
        "lower": task(2, error_coordinates=slice(0, 16), shift=9, noise=1.0),  # S_e ≈ 0 with "upper": ρ blank
    }


def test_compare_prints_the_legend_lines_that_apply(tasks, tmp_path, capsys):
    paths = {}
    for name, signature in tasks.items():
        paths[name] = tmp_path / f"{name}.safetensors"
        signature.save(paths[name])
    assert alignment(tasks["half"], tasks["whole"]).fisher > 1.0
    assert main(["compare", *(str(paths[name]) for name in tasks), "--heatmap", ""]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert ABOVE_ONE in printed and BLANK_COUPLING in printed

    assert main(["compare", str(paths["whole"]), str(paths["lower"]), "--heatmap", ""]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert ABOVE_ONE not in printed and BLANK_COUPLING not in printed


def test_heatmap_hatches_non_significant_cells_and_explains_them(tasks):
    matrix = alignment_matrix(list(tasks.values()), names=list(tasks))
    figure = alignment_figure(matrix)
    expected_somewhere = False
    for axis, geometry in zip(figure.axes, panels()):
        field = geometry.name
        values, errors = getattr(matrix, field), getattr(matrix, geometry.stderr_field)
        # ρ departs from 1 on either side; A, S_a, S_e (true values ≥ 0) count only above 0
        departure = (values - 1.0).abs() if field == "coupling" else values
        expected = {
            (i, j)
            for i in range(len(tasks))
            for j in range(len(tasks))
            if not math.isnan(values[i, j]) and errors[i, j] > 0 and departure[i, j] <= SIGNIFICANCE_Z * errors[i, j]
        }
        expected_somewhere |= bool(expected)
        hatched = {
            (round(patch.get_y() + 0.5), round(patch.get_x() + 0.5))
            for patch in axis.patches
            if patch.get_gid() == NOT_SIGNIFICANT_GID
        }
        assert hatched == expected, field
        colours = axis.images[0].get_array()
        for i, j in expected:  # a hatched cell takes no colour of the scale (cannot be its darkest cell)
            assert colours.mask[i, j], (field, i, j)
    assert expected_somewhere
    texts = [text.get_text() for text in figure.findobj(lambda artist: hasattr(artist, "get_text"))]
    legend = " ".join(" ".join(text.split()) for text in texts)
    assert NOT_SIGNIFICANT in legend and BLANK_COUPLING in legend and ABOVE_ONE in legend
    coupling_axis = figure.axes[3]
    blank = sum(1 for i in range(len(tasks)) for j in range(len(tasks)) if math.isnan(matrix.coupling[i, j]))
    assert blank and sum(text.get_text() == "—" for text in coupling_axis.texts) == blank


def test_selection_table_explains_scores_above_one(tasks):
    def selection(candidate, target):
        row = RankedCandidate(candidate, "fisher", alignment(tasks[candidate], tasks[target]), "local", None)
        return Selection([row], [], "fisher", {}).table(wide=True)

    assert ABOVE_ONE in selection("half", "whole")
    assert ABOVE_ONE not in selection("lower", "whole")
    assert BLANK_COUPLING in selection("lower", "upper") and BLANK_COUPLING not in selection("lower", "whole")
