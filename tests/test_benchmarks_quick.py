"""Every benchmark suite's quick run (``python -m benchmarks.run --all --quick``: tiny random models, no
downloads) writes its JSON and PNG with sane values, and the method registry refuses what would only fail
at the end of a run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``python -m benchmarks.run ARGS`` at 1 thread, the worktree's code first."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.run", *args],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("quick")
    result = _run("--all", "--quick", "--out", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(result.stdout.splitlines()[-20:])  # the per-suite seconds (pytest -s shows them)
    return out


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _correlations(values: list) -> bool:
    """Rank correlations: each in [-1, 1] or not defined (NaN, null: too few pairs), most of them defined."""
    defined = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return len(defined) > len(values) / 2 and all(-1.0 <= v <= 1.0 for v in defined)


def _selection_values(result: dict, names: list[str]) -> None:
    """A selection suite's JSON: every method's top-1 in [0, 1] and its score matrix [tasks, tasks]."""
    n = len(names)
    assert n >= 3
    assert result["quick"] is True
    assert {"fishersketch", "activation", "error", "diagonal_fisher", "head_input", "auto"} <= set(result["scores"])
    assert "embedding" not in result["scores"] and "official_auto" not in result["scores"]  # they need downloads
    for name, matrix in result["scores"].items():
        assert len(matrix) == n and all(len(row) == n for row in matrix), name
    for name, selection in result["selection"].items():
        assert 0.0 <= selection["top1"] <= 1.0, name
        assert selection["mean_regret"] >= 0.0, name
    assert set(result["bootstrap"]["methods"]) == set(result["selection"])


def _index_values(result: dict) -> None:
    """The index suite's JSON: ranking from the index agrees with the exact ranking at every N, the warm cache
    needs fewer requests than the cold one, the builds have one row per adapter, the layouts rank alike."""
    assert [run["adapters"] for run in result["rank"]] == [40, 80, 160]
    for run in result["rank"]:
        assert run["top1_equal"] and run["top10_equal"] and run["table_equals_direct"], run["adapters"]
        assert 0 < run["warm"]["requests"] < run["cold"]["requests"] and run["cold"]["downloaded_bytes"] > 0
    assert [(run["adapters"], run["workers"]) for run in result["build"]] == [(40, 1), (40, 16), (80, 16)]
    assert all(run["rows"] == run["adapters"] and run["requests"] > run["adapters"] for run in result["build"])
    sequential, pooled = result["per_repo"]
    assert sequential["requests"] == pooled["requests"] > 40 and sequential["seconds"] > 0
    assert len(result["layouts"]) == 4
    assert all(
        layout["top1_equal"] and layout["top20_contains_top10"] and layout["bytes_per_row"] > 0
        for layout in result["layouts"]
    )


def _index_wire_values(result: dict) -> None:
    """The index_wire suite's JSON: every broken repo skipped with its reason and no other, each row once, 429s
    answered and sent again; the resumed build equal to the uninterrupted one; each update read the changed repos
    (with nothing changed: none, and pushed nothing), the first two as one more shard, the third the whole index; the two-stage selections measured adapters they loaded."""
    for build in result["build"]:
        assert build["rows"] == build["distinct_rows"] == build["adapters"] - sum(build["broken"].values())
        assert build["skipped"] == build["broken"] and not build["skipped_not_broken"]
        assert not build["broken_not_skipped"] and not build["skipped_with_another_reason"]
        assert build["retried"] >= build["answered_429"] > 0
    kill = result["kill"]
    assert kill["killed_mid_build"] and kill["duplicate_rows"] == 0 and kill["same_rows_as_uninterrupted"]
    assert (
        kill["resume"]["requests"] < next(b for b in result["build"] if b["adapters"] == kill["adapters"])["requests"]
    )
    assert [update["adapters"] for update in result["update"]] == [build["adapters"] for build in result["build"]]
    for update in result["update"]:
        assert update["repos_read"] == update["changed"] + update["unavailable_before"] and update["changed"] >= 1
        assert 0 < update["share_of_build_requests"] < 1 and update["requests_reading_changed_adapters"] > 0
        unchanged, elsewhere = update["nothing_changed"], update["elsewhere"]
        assert not unchanged["pushed"] and unchanged["repos_read"] == update["unavailable_before"]
        assert elsewhere["repos_read"] == elsewhere["changed"] + update["unavailable_before"] >= 1
        assert elsewhere["requests_reading_changed_adapters"] > 0
        whole = update["whole_index"]  # the first two pushed one more shard each, the third the whole index
        assert update["appended"] and elsewhere["appended"] and not whole["appended"]
        assert 0 < update["bytes_uploaded"] < whole["bytes_uploaded"] / 2  # one more shard, not every row
        assert whole["repos_read"] == whole["changed"] + update["unavailable_before"]
    assert [(r["adapters"], r["built"]) for r in result["rank"]] == [(60, True), (120, False)]
    for run in result["rank"]:
        assert run["signature target"]["warm"]["requests"] < run["signature target"]["cold"]["requests"]
    two_stage = [result["rank"][0]["data target, rerank=3"], result["rank"][0]["data target, rerank=halving"]]
    assert two_stage[0]["measured"] == 3 and two_stage[1]["measured"] > 3 and two_stage[1]["passes"] > 0
    assert all(not run["not_measured"] and run["top1"].startswith("bench/lora-") for run in two_stage)


def _index_sign_values(result: dict) -> None:
    """The index_sign suite's JSON: every adapter unsigned and naming a dataset, the 16 readable datasets
    sketched, the 4 others skipped with a reason, one row per (adapter, sketched dataset), the volcano target's
    best the signed adapter of that topic."""
    report = result["report"]
    assert report["unsigned"] == report["naming_datasets"] == result["adapters"] == 40
    sketched = [d for d in report["datasets"] if d["status"] == "sketched"]
    skipped = [d for d in report["datasets"] if d["status"] == "skipped"]
    assert len(sketched) == 16 and all(d["file"] for d in sketched)
    assert [d["dataset"] for d in skipped] == ["bench/data-16", "bench/data-17", "bench/data-18", "bench/data-19"]
    assert all(d["reason"] for d in skipped)
    assert report["rows_added"] == sum(len(d["adapters"]) for d in sketched) > 0
    assert result["best_for_volcano_target"].startswith("bench/signed-05@")


def _space_values(result: dict) -> None:
    """The space suite's JSON: every step of the page timed (in Chromium, unless it is missing, which it says),
    no request of the page left 127.0.0.1, the page's own computations timed."""
    assert result["rows"] == 200 and all(seconds > 0 for seconds in result["server"].values())
    if result["browser"] is None:
        assert "apt-get install -y chromium" in result["browser_missing"]
        return
    steps = result["browser"]
    assert steps.pop("requests refused (not 127.0.0.1)") == 0
    assert set(steps) == {
        "start: the page's server answers",
        "reference: its first page",
        "reference: its page again",
        "first page",
        "page again",
        "filter",
        "next page",
        "neighbours",
        "target ranked (cold)",
        "target ranked (warm)",
    }
    assert all(0 < s < 300 for value in steps.values() for s in (value if isinstance(value, list) else [value]))


CHECKS = {
    "discovery": lambda r: (
        [run["adapters"] for run in r["runs"]] == [10, 20]
        and all(0.0 <= run["top_share_of_target_domain"] <= 1.0 for run in r["runs"])
    ),
    "index": lambda r: _index_values(r) is None,
    "index_wire": lambda r: _index_wire_values(r) is None,
    "index_sign": lambda r: _index_sign_values(r) is None,
    "space": lambda r: _space_values(r) is None,
    "estimator_accuracy": lambda r: (
        len(r["configs"]) == 3
        and _correlations([v["summary"]["spearman_A"] for c in r["configs"] for v in c["variants"]])
    ),
    "estimator_accuracy_structured": lambda r: r["seeds"] == [0] and len(r["rows"]) >= 2,
    "speed_vs_exact": lambda r: all(
        ratio > 0 for by_estimator in r["ratios"].values() for ratio in by_estimator.values()
    ),
    "throughput": lambda r: all(
        _finite(t["seconds"]) and t["seconds"] > 0 for row in r["smollm2"] for t in row["timings"].values()
    ),
    "throughput_cpu_time": lambda r: (
        all(
            figures["floor_ratio_cpu"] > 0 and _finite(figures["floor_ratio_cpu"])
            for row in r["cpu_time"]
            for figures in row["threads"].values()
        )
        and all(row["profile_1_thread"] for row in r["cpu_time"])
    ),
    "throughput_sketch_texts": lambda r: (
        [row["threads"] for row in r["sketch_texts"]] == [1, 2]
        and all(_finite(row["median_paired_ratio"]) and row["median_paired_ratio"] > 0 for row in r["sketch_texts"])
    ),
    "rerank_speed": lambda r: all(
        row["shared prefix / bare"] > 0
        and _finite(row["today / bare"])
        and max(run["largest_nll_difference_from_today"].values()) < 1e-3
        and rows[-1]["mixed batch / bare"] > 0
        for run in r["runs"].values()
        for rows in run["per_size"].values()
        for row in rows
    ),
    "halving_cost": lambda r: all(
        0 < run["ratio_to_bare_forward"]["cpu"][stage]
        and _finite(run["ratio_to_bare_forward"]["wall"][stage])
        and 0 < run["counted"][stage]["full_passes"] <= (r["budget"] if stage.startswith("halving") else 4) + 1e-9
        for run in r["runs"].values()
        for stage in run["counted"]
    ),
    "head_fingerprint": lambda r: r["vocab_size"] == 4096 and all(step["seconds"] >= 0 for step in r["steps"]),
    "network_cost": lambda r: all(s > 0 for run in r["runs"] for s in run["best_seconds"].values()),
    "mixing": lambda r: all(
        _finite(loss) and loss > 0 for t in r["targets"].values() for loss in t["held_out_loss"].values()
    ),
    "generation_signatures": lambda r: _generation_values(r) is None,
    "exp1": lambda r: _correlations([c["spearman"] for norm in r["comparisons"].values() for c in norm.values()]),
    "exp2": lambda r: len(r["tasks"]) == 4 and len(r["exact"]["fisher"]) == 4,
    "exp3": lambda r: _selection_values(r, r["tasks"]) is None,
    "exp4": lambda r: _selection_values(r, r["domains"]) is None and _two_stage(r),
    "exp5": lambda r: _selection_values(r, r["domains"]) is None and _two_stage(r),
    "exp6": lambda r: _selection_values(r, r["domains"]) is None and _two_stage(r),
    "exp7": lambda r: _selection_values(r, r["domains"]) is None and _preregistered_values(r) is None,
    "halving": lambda r: _halving_values(r) is None,
    "wide_suite": lambda r: _wide_suite_values(r) is None,
    "own_sample": lambda r: _own_sample_values(r) is None,
}


def _wide_suite_values(result: dict) -> None:
    """The wide suite: 4 variants of every candidate domain, none of the target's own; recall@k rising to 1 at
    the candidates' count at most; halving's last budget its own ceiling; each pick's P(best) its two factors'
    product."""
    domains = {c["domain"] for c in result["candidates"]}
    assert len(result["candidates"]) == 4 * len(domains)
    for target in result["targets"]:
        assert all(result["candidates"][c]["domain"] != target["target"] for c in target["allowed"])
        assert len(target["held_out"]["adapted"]) == len(target["allowed"])
    assert {"fishersketch", "activation + error", "network_lora"} <= set(result["recall"])  # network-level A too
    for curve in result["recall"].values():
        values = [curve[k] for k in sorted(curve, key=int)]
        assert values == sorted(values) and all(0 <= v <= 1 for v in values)
    rows = result["budgets"]
    assert rows[-1]["top1"] == rows[-1]["ceiling"]["top1"] and all(r["max_regret"] >= 0 for r in rows)
    assert 0 < result["adapter_pass_share"] < 1  # the quick adapters leave the lower layers as the base model's
    full = result["budgets_every_pass_full"]  # every document-pass a full pass: measure-all at the same last budget
    assert [r["budget"] for r in full] == [r["budget"] for r in rows] and full[-1]["top1"] == rows[-1]["top1"]
    for row in [*rows, result["rerank3"]]:  # each pick's P(best of all): recall × measured share, both in [0, 1]
        factors = row["recall_and_measured_share"]
        assert len(factors) == len(result["targets"]) and all(0 < r <= 1 and 0 <= q <= 1 for r, q in factors)
        assert row["p_best"] == pytest.approx(sum(r * q for r, q in factors) / len(factors))


def _halving_values(result: dict) -> None:
    """The budgeted second stage's simulation: top-1 in [0, 1] at every budget, the last budget measure-all (its
    own ceiling), no regret below 0, reliability bins that count their selections, in each setting (the own
    sample's among them)."""
    assert result["quick"] is True and list(result["budgets"]) == ["same documents", "independent halves", "own sample"]
    for by_suite in result["budgets"].values():
        for rows in by_suite.values():
            assert [row["budget"] for row in rows] == list(range(2, len(rows) + 2))
            assert all(0.0 <= row["top1"] <= 1.0 and row["max_regret"] >= row["mean_regret"] >= 0 for row in rows)
            assert rows[-1]["top1"] == rows[-1]["ceiling"]["top1"]
    assert 0 < result["adapter_pass_share"] < 1
    assert result["default_budget_every_pass_full"].keys() == result["budgets"].keys()
    assert all(0.0 <= v <= 1.0 for curves in result["recall"].values() for c in curves.values() for v in c.values())
    for setting in ("independent halves", "own sample"):
        pooled = result["reliability"][setting]["all suites"]
        assert all(sum(b["rows"] for b in table["bins"]) == table["rows"] > 0 for table in pooled.values())


def _own_sample_values(result: dict) -> None:
    """Each target's own sample under every other domain's adapter of each seed: positive NLL sums where
    measured (never a target under its own domain's adapter), on the documents the counts say."""
    suite = next(iter(result["suites"].values()))
    counts = suite["counts"]
    for seed in suite["adapted"]:
        for s, by_target in enumerate(seed):
            for t, row in enumerate(by_target):
                scored = [nll for nll, n in zip(row, counts[t]) if n > 0]
                assert all(nll == 0 for nll in scored) if s == t else all(nll > 0 for nll in scored)
    assert all(b > 0 for row, n in zip(suite["base"], counts) for b, c in zip(row, n) if c > 0)


def _preregistered_values(result: dict) -> None:
    """The pre-registered suite: every target's own sample measured under every other domain's adapter (never
    its own), halving at every budget 2 … candidates + 1 with the last one measure-all (its own ceiling), every
    second stage's picks one per seed and target, in the paired bootstrap, and reliability bins counting them."""
    measured, n = result["sample_measured"], len(result["domains"])
    assert all(measured[s][t] == (s != t) for s in range(n) for t in range(n))
    stage = result["second_stage"]
    rows = stage["budgets"]
    assert [row["budget"] for row in rows] == list(range(2, n + 1))
    assert rows[-1]["top1"] == rows[-1]["ceiling"]["top1"] and rows[-1]["shortlist"] == n - 1
    assert all(0.0 <= row["top1"] <= 1.0 and row["max_regret_of_all"] >= row["max_regret"] >= 0 for row in rows)
    at_cost = stage["budgets_at_cost"]  # cheaper passes: measure-all reached from a budget no larger
    assert [row["budget"] for row in at_cost] == [row["budget"] for row in rows] and 0 < stage["adapter_pass_share"] < 1
    assert at_cost[-1]["top1"] == rows[-1]["top1"]
    assert all(c["shortlist"] >= r["shortlist"] for c, r in zip(at_cost, rows))
    seeds = len(result["seeds"])
    assert all(len(picks) == seeds * n for picks in stage["picks"].values())
    assert {"rerank3", f"halving_B{n}"} <= set(stage["bootstrap"]["methods"])
    assert all(
        sum(b["rows"] for b in table["bins"]) == table["rows"] == seeds * n for table in stage["reliability"].values()
    )
    assert all(0.0 <= v <= 1.0 for curve in result["recall"].values() for v in curve.values())


def _generation_values(result: dict) -> None:
    """The generation_signatures suite's JSON: per suite, seed and number of samples, A of each adapter's two
    signatures in [-1, 2] with a positive stderr, top-1 in [0, 1] and regret ≥ 0 of each stage (the first, the
    two-stage, the default halving) for each signing (data, generations, mix), and a positive cost at 1 and 2 threads for each number of samples timed."""
    assert result["quick"] is True and set(result["suites"]) == {"exp4"}
    for suite in result["suites"].values():
        for seed in map(str, result["seeds"]):
            for row in suite[seed]["by_samples"].values():
                assert set(row["A_generations_vs_data"]) == set(suite["domains"])
                assert all(-1 <= a <= 2 and se > 0 for a, se in row["A_generations_vs_data"].values())
                assert set(row["selection"]) == {"data", "generations", "mix"}
                for q in row["selection"].values():
                    assert all(0 <= q[f"{stage}_top1"] <= 1 for stage in ("first", "two_stage", "halving"))
                    assert all(q[f"{stage}_max_regret"] >= 0 for stage in ("first", "two_stage", "halving"))
    assert set(result["cost_seconds"]) == {"1", "2"}
    assert all(min(curve.values()) > 0 for curve in result["cost_seconds"].values())


def _two_stage(result: dict) -> bool:
    """An LM-domain suite's second stage: the target-sample losses of the first stage's 3 candidates of each
    target (never the target itself), and the two-stage method among the scored ones."""
    measured = result["sample_measured"]
    return "two_stage" in result["scores"] and all(
        sum(row[t] for row in measured) == 3 and not measured[t][t] for t in range(len(measured))
    )


def test_every_suite_has_a_check():
    from benchmarks.registry import SUITES

    assert set(CHECKS) == set(SUITES)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_quick_run_writes_its_table_json_and_png(quick_runs, name):
    from benchmarks.registry import SUITES

    folder = quick_runs / name
    for output in SUITES[name].outputs:
        path = folder / output
        assert path.is_file() and path.stat().st_size > 0, f"{name} did not write {output}"
        if output.endswith(".png"):
            assert path.read_bytes()[:8] == PNG_MAGIC
    result = json.loads((folder / next(o for o in SUITES[name].outputs if o.endswith(".json"))).read_text())
    assert CHECKS[name](result), f"{name}: implausible values in its JSON"


def test_quick_runs_leave_the_committed_results_alone(quick_runs):
    """Nothing under benchmarks/results/ is newer than the quick runs' start."""
    started = min(p.stat().st_mtime for p in quick_runs.iterdir())
    assert not [p.name for p in (REPO / "benchmarks" / "results").iterdir() if p.stat().st_mtime >= started]


def test_a_quick_run_refuses_the_results_folder():
    result = _run("speed_vs_exact", "--quick", "--out", str(REPO / "benchmarks" / "results"))
    assert result.returncode != 0 and "committed full-run results" in result.stderr


def test_an_unknown_method_or_a_wrong_shape_is_refused_before_any_run():
    import torch

    from benchmarks.paper import selection_methods  # noqa: F401  (registers the methods)
    from benchmarks.registry import check_references, check_scores, method, methods_of

    with pytest.raises(SystemExit, match="no_such_method"):
        methods_of("exp4", only=["fishersketch", "no_such_method"])
    with pytest.raises(ValueError, match="not registered"):
        check_references("exp4", ["exact_fisher"])  # an exp3-only diagnostic
    with pytest.raises(ValueError, match="registered twice"):
        method("fishersketch", "again")(lambda inputs: None)
    with pytest.raises(ValueError, match="unknown suites"):
        method("new", "new", suites=("exp9",))
    with pytest.raises(ValueError, match="'broken' returned"):
        check_scores({"fine": torch.zeros(3, 3), "broken": torch.zeros(3, 2)}, 3)
    assert "embedding" in methods_of("exp4", available=["embedding model"])
    assert "embedding" not in methods_of("exp4")


def test_a_new_method_is_one_function_and_one_decorator():
    """Registered for exp4 only, it is in exp4's methods and labels (so its tables, plots and JSON), in
    registration order, and in no other suite's."""
    from benchmarks.paper import selection_methods  # noqa: F401
    from benchmarks.registry import METHODS, labels, method, methods_of

    try:

        @method("test_mean_activation", "test: mean activation cosine", suites=("exp4",))
        def mean_activation(inputs):
            return inputs.sketch.activation

        assert list(methods_of("exp4"))[-1] == "test_mean_activation"
        assert labels("exp4")["test_mean_activation"] == "test: mean activation cosine"
        assert "test_mean_activation" not in methods_of("exp5")
    finally:
        METHODS["exp4"].pop("test_mean_activation", None)
