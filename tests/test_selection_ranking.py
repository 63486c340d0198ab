"""The pure parts of selection, without a model or a Hub: which option each candidate compares, whether a
candidate's spec is comparable with the target's, the base model signatures agree on, the order, and the
report (tables, a bar chart that leaves the matplotlib backend alone)."""

from __future__ import annotations

import math

import pytest
import torch

from fisherhub.core.alignment import AlignmentResult
from fisherhub.core.errors import InputError
from fisherhub.core.spec import SketchSpec
from fisherhub.selection import RankedCandidate, Selection, Skipped, adapter_names
from fisherhub.selection.candidates import Candidate, SignatureOption
from fisherhub.selection.errors import Skip
from fisherhub.selection.ranking import best_first, choose_options, common_base_model, incompatibility


def option(sketch_id: str, base_model: str | None = "org/base") -> SignatureOption:
    return SignatureOption(sketch_id, base_model, f"source-{sketch_id}", lambda: None)


def result(fisher: float, activation: float, error: float) -> AlignmentResult:
    record = {"fisher": fisher, "activation": activation, "error": error, "coupling": None}
    stderrs = {"stderr": 0.01, "activation_stderr": 0.02, "error_stderr": 0.03, "coupling_stderr": None}
    return AlignmentResult.from_record({**record, **stderrs, "sketch_id": "id"})


def test_choose_options_prefers_the_target_then_the_shared_sketch_id():
    a = Candidate("a", None, [option("x"), option("y")])
    b = Candidate("b", None, [option("y"), option("z")])
    c = Candidate("c", None, [option("z")])
    usable = [(candidate, candidate.options) for candidate in (a, b, c)]
    chosen = {candidate.name: o.sketch_id for candidate, o in choose_options(usable, [])}
    assert chosen == {"a": "y", "b": "y", "c": "z"}  # y and z are shared by two each; a and b agree on y
    chosen = {candidate.name: o.sketch_id for candidate, o in choose_options(usable[:2], ["x"])}
    assert chosen == {"a": "x", "b": "y"}


def test_options_for_base_model():
    candidate = Candidate("a", None, [option("x", "org/base"), option("y", None), option("z", "org/other")])
    assert [o.sketch_id for o in candidate.options_for("org/base")] == ["x", "y"]
    assert len(candidate.options_for(None)) == 3
    with pytest.raises(Skip, match="other base model: its signatures are for 'org/other', not 'org/else'"):
        Candidate("b", None, [option("z", "org/other")]).options_for("org/else")
    with pytest.raises(Skip, match="no signature"):
        Candidate("c", None, []).options_for("org/base")


def test_incompatibility_names_the_pilot_direction_or_the_fields():
    spec = SketchSpec(d=4, vocab_size=8, m=16, reflection=(1.0, 0.0, 0.0, 0.0))
    assert incompatibility(spec, spec) is None
    close = spec.with_reflection(torch.tensor([1.0, 1e-5, 0.0, 0.0]))
    assert incompatibility(spec, close) is None  # within REFLECTION_TOLERANCE
    turned = spec.with_reflection(torch.tensor([math.cos(0.016), math.sin(0.016), 0.0, 0.0]))
    assert turned.sketch_id == spec.sketch_id
    reason = incompatibility(spec, turned)
    assert reason.startswith("other pilot direction") and "0.016 rad" in reason and "--like" in reason
    other = SketchSpec(d=4, vocab_size=8, m=32, reflection=(1.0, 0.0, 0.0, 0.0))
    reason = incompatibility(spec, other)
    assert reason.startswith(f"other sketch id {other.sketch_id}") and "m: target 16 vs 32" in reason


def test_common_base_model_is_order_free():
    assert common_base_model([None, "org/a", "", "org/a"], "the candidates") == "org/a"
    assert common_base_model([None, ""], "the candidates") is None
    for order in (["org/a", "org/b"], ["org/b", "org/a"]):
        with pytest.raises(InputError, match=r"the candidates name several base models \(org/a, org/b\)"):
            common_base_model(order, "the candidates")


def selection() -> Selection:
    rows = [
        RankedCandidate("org/low", "fisher", result(0.2, 0.9, 0.5), "org/low@" + "a" * 40, None),
        RankedCandidate("org/high", "fisher", result(0.8, 0.1, 0.4), "org/high@" + "b" * 40, None),
    ]
    return Selection(best_first(rows), [Skipped("org/other", "other base model")], "fisher", {})


def test_order_and_report():
    chosen = selection()
    assert [row.candidate for row in chosen.ranking] == ["org/high", "org/low"]
    assert [row.candidate for row in chosen.ranked_by("activation")] == ["org/low", "org/high"]
    assert [row.stderr for row in chosen.ranked_by("error")] == [0.03, 0.03]
    lines = chosen.table(wide=True).splitlines()  # every column on one line per candidate
    assert lines[0].split()[:3] == ["#", "candidate", "score:"] and set(lines[1]) == {"-", " "}
    assert lines[2].split()[:4] == ["1", "org/high", "0.800", "±"] and lines[2].endswith("org/high@bbbbbbb")
    assert lines[-2:] == ["skipped:", "  org/other: other base model"]
    shown = chosen.table(limit=1, wide=True).splitlines()  # header, rule, one row, the ρ note, the skipped one
    assert len(shown) == 6 and shown[3].startswith("note: ρ — (blank)")
    # the default: the scores in the table (the score's own column once, with its error bar), the signature
    # source below it, per candidate
    narrow = chosen.table(width=60).splitlines()
    assert narrow[0].split() == ["#", "candidate", "score:", "A", "S_a", "S_e", "ρ"]
    assert narrow[2].split() == ["1", "org/high", "0.800", "±", "0.010", "0.100", "0.400", "—"]
    assert narrow[4:7] == ["signature source and provenance:", "  1 org/high", "    org/high@bbbbbbb"]
    assert max(map(len, narrow)) <= 60 and narrow[-2:] == lines[-2:]
    assert chosen.rich_table().row_count == 2 and "org/other" in chosen.rich_table().caption
    assert adapter_names(["org/lora-a", "local/lora-a/", "x/--"]) == ["lora_a", "lora_a_2", "adapter"]


def test_bar_chart_leaves_the_backend_alone(tmp_path):
    import matplotlib

    backend = matplotlib.get_backend()
    matplotlib.use("svg")  # the user's choice, which a PNG must not switch
    try:
        figure = selection().figure()
        assert [len(axes.patches) for axes in figure.axes] == [6]  # 3 scores x 2 candidates
        path = selection().plot(tmp_path / "bars.png")
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(backend)


def test_auto_scores_by_the_geometry_with_the_signal_and_every_selection_has_a_verdict():
    from fisherhub.analysis.verdict import score_selection

    # activation-dark: S_a is the same for every candidate, S_e tells them apart
    results = [result(0.1 * k, 0.95, 0.2 + 0.25 * k) for k in range(3)]
    scored = score_selection(results, "auto", names=["a", "b", "c"])
    assert scored.choice.regime.name == "activation-dark" and scored.scores.geometry == "error"
    assert scored.verdict.best == 2 and "c" in scored.verdict.message
    rows = [RankedCandidate(name, "fisher", r, name, None).ranked_by("error") for name, r in zip("abc", results)]
    shown = Selection(best_first(rows), [], "error", {}, verdict=scored.verdict, choice=scored.choice).table(wide=True)
    [auto] = [line for line in shown.splitlines() if line.startswith("auto:")]  # the answer in plain words first
    assert auto.startswith(
        "auto: ranked by error-only S_e, because the candidates' inputs look alike to the model; the "
        "words they teach differ, so S_e decides. (Evidence: head regime activation-dark"
    )
    assert f"verdict: {scored.verdict.message}" in shown
    with pytest.raises(InputError, match="a row is ranked by one of"):
        rows[0].ranked_by("auto")


def test_weights_mix_exactly_the_candidates_the_verdict_counts_as_aligned():
    """Ten candidates, the best 2.3 standard errors above 0: above the 2 se one alignment needs, below the
    one-sided Bonferroni z over ten (2.58). The verdict finds no signal, so weights() has nothing to mix (it used
    to mix the best on the 2 se rule); with the best at 6 se both count it as aligned, and only it."""
    from fisherhub.analysis.scores import Scores
    from fisherhub.analysis.separation import separation
    from fisherhub.analysis.verdict import score_selection
    from fisherhub.core.geometry import ALPHA, SIGNIFICANCE_Z, bonferroni_z

    assert SIGNIFICANCE_Z < 2.3 < bonferroni_z(ALPHA, 10)
    for best_z, aligned in ((2.3, False), (6.0, True)):
        results = [result(best_z * 0.01 if k == 0 else 0.001 * k, 0.5, 0.5) for k in range(10)]
        rows = [RankedCandidate(f"c{k}", "fisher", r, f"c{k}", None) for k, r in enumerate(results)]
        scored = score_selection(results, "fisher", names=[row.candidate for row in rows])
        selection = Selection(best_first(rows), [], "fisher", {}, verdict=scored.verdict)
        assert separation(Scores.of("fisher", results)).detected is aligned
        assert ("no geometry separates" in scored.verdict.message) is not aligned
        if aligned:
            assert selection.weights() == {"c0": 1.0} | {f"c{k}": 0.0 for k in range(1, 10)}
            assert selection.weights(top_k=2) == {"c0": 1.0, "c9": 0.0}  # Bonferroni over all ten ranked
        else:
            with pytest.raises(InputError, match="nothing to mix"):
                selection.weights()
