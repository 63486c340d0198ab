"""The budgeted second stage of select_adapter (``rerank="halving"``, ``rerank_budget=B``) on tiny LoRA adapters in
local folders: a budget of the shortlist's size + 1 is ``rerank=k`` of the whole shortlist, a smaller one keeps
within its document-passes and still finds the target domain's adapter, the table says who was measured on how
many documents, broken adapters are skipped with their reason, and bad input is refused without a traceback."""

from __future__ import annotations

import json
import re

import pytest
import torch
from test_hostile_second_stage import REASONS, world  # noqa: F401 (the fixture)
from test_selection_rerank import adapters, select  # noqa: F401 (the fixture)

from fisherhub.core.errors import InputError
from fisherhub.selection import select_adapter
from fisherhub.selection.budgeted import document_subset
from fisherhub.selection.errors import UnmeasurableAdaptersError
from fisherhub.selection.target_losses import TargetLosses


def test_a_budget_of_the_shortlist_plus_one_is_rerank_of_every_candidate(adapters):  # noqa: F811
    everyone = select(adapters, rerank=len(adapters["folders"]))
    halving = select(adapters, rerank="halving", rerank_budget=len(adapters["folders"]) + 1)
    assert [row.candidate for row in halving.ranking] == [row.candidate for row in everyone.ranking]
    for ours, theirs in zip(halving.rerank.measured, everyone.rerank.measured):
        assert ours.candidate == theirs.candidate and ours.documents == theirs.documents == len(adapters["target"])
        assert ours.loss == pytest.approx(theirs.loss, rel=1e-9) and ours.stderr == pytest.approx(theirs.stderr)
    assert halving.verdict.best == everyone.verdict.best and halving.verdict.clear
    # every candidate measured on every document: P(best of all) is the measured P(best), on the same resamples
    assert halving.verdict.probability_best == pytest.approx(everyone.verdict.probability_best)
    assert f"P(best of all {len(adapters['folders'])} candidates)" in halving.verdict.message
    assert halving.rerank.passes == (len(adapters["folders"]) + 1) * len(adapters["target"])


def test_a_small_budget_keeps_its_passes_and_finds_the_target_domain(adapters):  # noqa: F811
    documents, budget = len(adapters["target"]), 3
    selection = select(adapters, rerank="halving", rerank_budget=budget)
    second = selection.rerank
    assert second.budget == budget and second.passes <= budget * documents
    assert selection.best.candidate == str(adapters["folders"][0])
    counts = sorted((m.documents for m in second.measured), reverse=True)
    assert counts[0] == documents and counts[-1] < documents, "the finalists on every document, the others on fewer"
    assert sum(counts) + documents == second.passes
    best = second.measured[selection.verdict.best]
    assert best.candidate == selection.best.candidate and best.documents == documents
    everyone = select(adapters, rerank=len(adapters["folders"]))
    assert best.loss == pytest.approx(next(m.loss for m in everyone.rerank.measured if m.candidate == best.candidate))
    dropped = re.search(r"(\d+) clearly behind the leader, (\d+) for the budget", selection.verdict.message)
    assert dropped and int(dropped[1]) + int(dropped[2]) == sum(c < documents for c in counts)
    if counts.count(documents) == 1:  # one finalist: clear when no other was dropped for the budget alone
        assert "the only adapter left for the last round" in selection.verdict.message
        assert selection.verdict.clear == (dropped[2] == "0")
    chance = re.search(
        r"P\(best of all (\d+) candidates\) (\d+)% .* recall at the shortlist measured, (\d+)%, × .* "
        r"every adapter measured, (\d+)%\)",
        selection.verdict.message,
    )
    assert chance and int(chance[1]) == len(adapters["folders"]) and chance[3] == "100"
    assert selection.verdict.probability_best == pytest.approx(int(chance[4]) / 100, abs=0.006)
    assert selection.verdict.random_top1 == pytest.approx(1 / len(adapters["folders"]))
    table = selection.table()
    assert f"successive halving within {budget} passes" in table and f"of {documents} docs)" in table
    assert "dropped in earlier rounds" in table
    assert f"({second.passes} of {budget * documents} document-passes" in table


def test_a_subset_of_documents_is_measured_as_in_the_whole(adapters):  # noqa: F811
    from fisherhub.selection.target import SketchOptions, TargetSketcher

    sketcher = TargetSketcher(adapters["target"], adapters["base"], adapters["tokenizer"], None, SketchOptions())
    batches = sketcher.batches()
    whole = TargetLosses(batches).losses(adapters["base"])
    positions = [0, 3, 17, 39, 21]
    part = TargetLosses(document_subset(batches, positions)).losses(adapters["base"])
    assert torch.allclose(part.nll, whole.nll[sorted(positions)], rtol=1e-6)
    assert torch.equal(part.tokens, whole.tokens[sorted(positions)])


def test_bad_input_is_refused_with_what_to_pass(adapters):  # noqa: F811
    for bad in (1, 0, -3, 2.5, True):
        with pytest.raises(InputError, match="budget counts full passes"):
            select(adapters, rerank="halving", rerank_budget=bad)
    with pytest.raises(InputError, match="rerank_budget is the budget of rerank='halving'"):
        select(adapters, rerank=3, rerank_budget=4)
    with pytest.raises(InputError, match="rerank must be a number of adapters .* or 'halving'"):
        select(adapters, rerank="halve")
    signature = next(iter(select(adapters).targets.values()))
    with pytest.raises(InputError, match="rerank needs the target's data"):
        select_adapter(signature, [str(f) for f in adapters["folders"]], rerank="halving")


def test_a_broken_adapter_is_skipped_with_its_reason_never_the_pick(world):  # noqa: F811
    nan, good = world["broken"]["nan"], world["good"]
    selection = select_adapter(
        world["target"],
        [str(c) for c in (nan, *good)],
        model=world["base"],
        tokenizer=world["tokenizer"],
        rerank="halving",
        rerank_budget=3,
    )
    assert selection.best.candidate == str(good[0])
    assert str(nan) not in [row.candidate for row in selection.ranking]
    assert {s.candidate: s.reason for s in selection.skipped}[str(nan)].startswith(REASONS["nan"])
    assert "nan ±" not in selection.table()
    with pytest.raises(UnmeasurableAdaptersError):
        select_adapter(
            world["target"],
            [str(world["broken"][kind]) for kind in ("nan", "no-weights")],
            model=world["base"],
            tokenizer=world["tokenizer"],
            rerank="halving",
        )


@pytest.mark.usefixtures("wide_terminal")
def test_cli_select_rerank_halving(adapters, tmp_path, capsys):  # noqa: F811
    from fisherhub.cli import main

    adapters["base"].save_pretrained(tmp_path / "base")
    adapters["tokenizer"].save_pretrained(tmp_path / "base")
    data_file = tmp_path / "target.jsonl"
    data_file.write_text("".join(json.dumps({"text": text}) + "\n" for text in adapters["target"]))
    folders = [str(f) for f in adapters["folders"]]
    command = ["select", str(data_file), *folders, "--base-model", str(tmp_path / "base"), "--rerank", "halving"]
    assert main([*command, "--rerank-budget", "3"]) == 0
    out = capsys.readouterr().out
    assert "successive halving within 3 passes" in out and f"best: {folders[0]} (target loss " in out
    assert main([*command, "--rerank-budget", "1"]) != 0
    captured = capsys.readouterr()
    assert "budget counts full passes" in captured.err and "Traceback" not in captured.err
    with pytest.raises(SystemExit):
        main(["select", str(data_file), *folders, "--rerank", "halve"])
    assert "a number of adapters (0: none) or halving" in capsys.readouterr().err


def test_the_second_stage_shows_a_progress_bar_when_bars_are_on(adapters, capsys, monkeypatch):  # noqa: F811
    import importlib

    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    monkeypatch.setattr(importlib.import_module("huggingface_hub.utils.tqdm"), "HF_HUB_DISABLE_PROGRESS_BARS", None)
    enable_progress_bars()  # as without HF_HUB_DISABLE_PROGRESS_BARS=1 (the tests' setting)
    try:
        selection = select(adapters)  # the default second stage
    finally:
        disable_progress_bars()
    err = capsys.readouterr().err
    assert f"second stage (halving, {len(adapters['folders'])} adapters)" in err
    assert f"{selection.rerank.passes}/{4 * len(adapters['target'])}" in err  # the document-passes spent, of B · D
    select(adapters)
    assert "second stage" not in capsys.readouterr().err  # bars off: nothing
