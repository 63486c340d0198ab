"""``Geometry`` is the one extension point: a new geometry is this one file. It defines the separable prediction
S_a·S_e (what A would be if activations and errors were independent) with its kernel and flags, registers it,
and finds it in every alignment, in ``fisherhub compare``'s tables, JSON and heatmap, in the ``fisher_alignment``
metric's output, in the candidates' scores and in a selection ranked by it, with nothing else changed."""

from __future__ import annotations

import json

import pytest
import torch
from fisherhub.testing.oracles import synthetic_task

from fisherhub import HeadBatch, SketchSpec, SketchState, alignment, alignment_matrix
from fisherhub.analysis.scores import candidate_scores
from fisherhub.cli import main
from fisherhub.core import geometry as registry
from fisherhub.core.geometry import Geometry


def separable_kernel(cosine, stderr, same):
    """S_a·S_e and its delta-method standard error √(S_e² se_a² + S_a² se_e²)."""
    activation, error = cosine["activation"], cosine["error"]
    value = activation * error
    return value, (
        error.square() * stderr["activation"].square() + activation.square() * stderr["error"].square()
    ).sqrt()


SEPARABLE = Geometry(
    "separable",
    "S_a·S_e",
    "S_a_S_e",
    "separable prediction S_a·S_e",
    separable_kernel,
    rankable=True,
    shown=True,
    metric_key="separable_alignment",
)


@pytest.fixture
def separable(monkeypatch):
    """The geometry registered for one test (``monkeypatch`` takes it out again)."""
    monkeypatch.setitem(registry.GEOMETRIES, SEPARABLE.name, SEPARABLE)
    return SEPARABLE


@pytest.fixture(scope="module")
def signature_files(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("separable")
    spec = SketchSpec(d=8, vocab_size=48, m=256)
    paths = []
    for seed, block in ((1, (0, 30)), (2, (18, 48)), (3, (0, 48))):
        activations, errors = synthetic_task(400, 8, 48, seed=seed, label_block=block)
        state = SketchState(spec).update(
            HeadBatch(activations=activations, doc_index=torch.arange(len(activations)), errors=errors)
        )
        paths.append(str(folder / f"task{seed}.safetensors"))
        state.finalize({"base_model": "tester/tiny-lm", "dataset": f"tester/task{seed}"}).save(paths[-1])
    return paths


def signatures(paths):
    from fisherhub import Signature

    return [Signature.load(path) for path in paths]


def test_registering_needs_one_call_and_refuses_a_taken_name(separable):
    assert "separable" in registry.HEAD_SCORES and "separable" in registry.DECOMPOSITION
    assert "separable" in registry.SCORES and "separable" not in registry.SHRUNK
    with pytest.raises(ValueError, match="registered already"):
        registry.register(SEPARABLE)


def test_every_alignment_computes_it_by_its_kernel(separable, signature_files):
    matrix = alignment_matrix(signatures(signature_files))
    assert torch.equal(matrix.values["separable"], matrix.activation * matrix.error)
    result = alignment(*signatures(signature_files)[:2])
    assert result.values["separable"] == pytest.approx(result.activation * result.error)
    assert result.as_dict()["separable_stderr"] == result.stderrs["separable"] > 0


def test_compare_shows_it_in_its_tables_json_and_heatmap(separable, signature_files, tmp_path, capsys):
    out, png = tmp_path / "matrix.json", tmp_path / "heatmap.png"
    assert main(["compare", *signature_files, "--json", str(out), "--heatmap", str(png)]) == 0
    printed = capsys.readouterr().out
    assert "S_a·S_e" in printed
    written = json.loads(out.read_text())
    matrix = alignment_matrix(signatures(signature_files))
    assert written["separable"] == (matrix.activation * matrix.error).tolist()
    assert len(written["separable_stderr"]) == 3 and png.stat().st_size > 0


def test_the_heatmap_has_a_panel_for_it(separable, signature_files):
    from fisherhub.plotting import alignment_figure

    figure = alignment_figure(alignment_matrix(signatures(signature_files)))
    titles = [axis.get_title() for axis in figure.axes if axis.get_visible()]
    assert "separable prediction S_a·S_e" in titles and "Fisher alignment A" in titles


def test_the_metric_reports_it(separable, signature_files):
    import evaluate

    from fisherhub.metric import metric_path

    metric = evaluate.load(metric_path(), keep_in_memory=True)
    results = metric.compute(predictions=signature_files[:2], references=signature_files[1:])
    expected = [alignment(*pair) for pair in zip(signatures(signature_files[:2]), signatures(signature_files[1:]))]
    assert results["separable_alignment"] == [r.values["separable"] for r in expected]
    assert results["fisher_alignment"] == [r.fisher for r in expected]


def test_candidates_are_scored_and_ranked_by_it(separable, signature_files):
    from fisherhub import select_adapter

    target, *candidates = signature_files
    results = [alignment(source, signatures([target])[0]) for source in signatures(candidates)]
    assert candidate_scores(results)["separable"].values == tuple(r.values["separable"] for r in results)
    selection = select_adapter(target, candidates, score="separable")
    assert selection.score == "separable"
    assert [row.score for row in selection.ranking] == sorted((r.values["separable"] for r in results), reverse=True)


def test_without_it_nothing_changes(signature_files):
    """Outside the tests that register it, results hold the four built-in geometries only."""
    assert set(alignment(*signatures(signature_files)[:2]).values) == {"fisher", "activation", "error", "coupling"}
