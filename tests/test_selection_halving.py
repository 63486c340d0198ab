"""The budgeted second stage of select_adapter (``rerank="halving"``, ``rerank_budget=B``) on tiny LoRA adapters in
local folders: a budget of the shortlist's size + 1 is ``rerank=k`` of the whole shortlist, a smaller one keeps
within its document-passes and still finds the target domain's adapter, the table says who was measured on how
many documents, broken adapters are skipped with their reason, and bad input is refused without a traceback."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from test_hostile_second_stage import REASONS, world  # noqa: F401 (the fixture)
from test_selection_rerank import adapters, select  # noqa: F401 (the fixture)

from fisherhub.analysis.halving import halving_plan
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
    assert halving.rerank.full_passes == pytest.approx(len(adapters["folders"]) + 1)  # adapters on every layer


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
    assert second.full_passes == pytest.approx(second.passes / documents)  # no layer below an adapter to share
    assert f"({second.full_passes:.2f} spent on {second.passes} document-passes" in " ".join(table.split())


def test_a_subset_of_documents_is_measured_as_in_the_whole(adapters):  # noqa: F811
    from fisherhub.selection.target import SketchOptions, TargetSketcher

    sketcher = TargetSketcher(adapters["target"], adapters["base"], adapters["tokenizer"], None, SketchOptions())
    batches = sketcher.batches()
    whole = TargetLosses(batches).losses(adapters["base"])
    positions = [0, 3, 17, 39, 21, 5, 8, 30, 11, 25]
    subset = document_subset(batches, positions)
    largest = max(len(batch.doc_index) for batch in batches)
    assert len(subset) > 1 and [len(b.doc_index) for b in subset[:-1]] == [largest] * (len(subset) - 1)  # full
    whole_ids = torch.cat([batch.doc_index for batch in batches])
    assert torch.cat([batch.doc_index for batch in subset]).tolist() == whole_ids[sorted(positions)].tolist()
    part = TargetLosses(subset).losses(adapters["base"])
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
    documents = len(adapters["target"])
    most = documents + halving_plan(len(adapters["folders"]), documents, 4).passes
    assert f"{selection.rerank.passes}/{most}" in err  # the document-passes spent, of the plan's most
    select(adapters)
    assert "second stage" not in capsys.readouterr().err  # bars off: nothing


@pytest.fixture(scope="module")
def upper_adapters(adapters, tmp_path_factory):  # noqa: F811
    """The fixture's adapters with their layer-0 modules taken out: each adapts layer 1 of 2 only."""
    from safetensors.torch import load_file, save_file

    folder, upper = tmp_path_factory.mktemp("upper"), []
    for source in adapters["folders"]:
        target = folder / source.name
        shutil.copytree(source, target)
        weights = load_file(target / "adapter_model.safetensors")
        save_file({k: v for k, v in weights.items() if ".layers.0." not in k}, target / "adapter_model.safetensors")
        config = json.loads((target / "adapter_config.json").read_text())
        (target / "adapter_config.json").write_text(json.dumps(config | {"layers_to_transform": [1]}))
        upper.append(target)
    return adapters | {"folders": upper}


def test_adapters_above_the_lower_layers_cost_their_share_and_buy_more_measurement(upper_adapters):
    from fisherhub.lm.modules import pass_share

    documents, budget, base = len(upper_adapters["target"]), 3, upper_adapters["base"]
    share = pass_share(base, 1)
    assert 0.5 < share < 1
    halving = select(upper_adapters, rerank="halving", rerank_budget=budget)
    second = halving.rerank
    assert second.full_passes <= budget + 1e-9, "the passes run never cost more than the budget"
    # the same plan with every adapter at a full pass measures fewer documents
    assert second.passes - documents > halving_plan(len(upper_adapters["folders"]), documents, budget).passes
    # the base model ran the full pass, keeping layer 1's input; every adapter replayed it and ran its share: what
    # was counted as it ran
    expected = documents + (second.passes - documents) * share
    assert second.full_passes * documents == pytest.approx(expected, rel=1e-9)
    everyone = select(upper_adapters, rerank=len(upper_adapters["folders"]))
    losses = {m.candidate: m.loss for m in everyone.rerank.measured}
    assert everyone.rerank.full_passes == pytest.approx(1 + len(losses) * share)  # the base, then the shares
    for measured in second.measured:
        if measured.documents == documents:
            assert measured.loss == pytest.approx(losses[measured.candidate], rel=1e-6)
    assert halving.best.candidate == str(upper_adapters["folders"][0])


def test_an_unreadable_config_costs_a_full_pass_and_its_adapter_is_skipped_with_its_reason(world, upper_adapters):  # noqa: F811
    import types

    from fisherhub.lm.modules import pass_share
    from fisherhub.selection.budgeted import pass_shares
    from fisherhub.selection.rows import AdapterLocation

    folder = upper_adapters["folders"][0].parent
    missing, not_an_object = folder / "missing-config", folder / "list-config"
    for broken in (missing, not_an_object):
        shutil.copytree(upper_adapters["folders"][0], broken)
    (missing / "adapter_config.json").unlink()
    (not_an_object / "adapter_config.json").write_text("[" * 5000 + "]" * 5000)
    rows = [
        types.SimpleNamespace(candidate=str(path), adapter=AdapterLocation(str(path)))
        for path in (upper_adapters["folders"][0], missing, not_an_object, folder / "no-such-folder")
    ]
    from fisherhub.selection.target import SketchOptions, TargetSketcher

    base = upper_adapters["base"]
    sketcher = TargetSketcher(upper_adapters["target"], base, upper_adapters["tokenizer"], None, SketchOptions())
    batches = sketcher.batches()
    assert pass_shares(base, TargetLosses(batches), rows) == [pass_share(base, 1), 1.0, 1.0, 1.0]
    assert pass_shares(base, TargetLosses(batches, max_cache_bytes=1000), rows) == [1.0] * 4  # no room to keep
    kinds = ("wrong-shapes", "no-weights", "huge")  # read by the first stage, refused by the second
    selection = select_adapter(
        world["target"],
        [str(c) for c in (*(world["broken"][k] for k in kinds), *world["good"])],
        model=world["base"],
        tokenizer=world["tokenizer"],
        rerank="halving",
        rerank_budget=3,
    )
    assert selection.best.candidate == str(world["good"][0]) and selection.rerank.full_passes <= 3 + 1e-9
    reasons = {s.candidate: s.reason for s in selection.skipped}
    assert all(reasons[str(world["broken"][k])].startswith(REASONS[k]) for k in kinds)
