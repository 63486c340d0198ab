"""The budgeted second stage (``select_adapter(rerank="halving")``, issue 33) simulated over the committed
per-document losses of every adapter on every target: no model is run.

The suites (exp3–exp7: ``paper_exp*.json``, the same numbers as ``results/ledgers/*_document_nll_*.json``) hold
each adapter's NLL on each target's held-out documents (17 of 64 tokens; exp3: 1,024 prompts), the suites' ground
truth. The second stage is simulated in three settings:

- **own sample** (a real second stage; exp4–exp6, where ``benchmarks.paper.own_sample`` measured it, and the
  pre-registered exp7, which measured it itself): the second
  stage measures the target's own sample (its 32 task documents, what a user gives ``select_adapter``) under the
  shortlisted adapters, and the pick is scored against the suite's ground truth (transfer on the held-out
  documents, never measured by the second stage).
- **same documents** (fidelity): the second stage measures the held-out documents and is scored against the
  ground truth on them, so measuring every candidate is right by construction (the ceiling is 100%): what a
  schedule loses against measure-all, at 17 documents (a real target has 32).
- **independent halves**: each target's held-out documents are cut at random into a measuring half and a truth
  half (``SPLITS`` cuts, means over them); the pick is scored against the truth half. Both halves are small (8–9
  documents of 64 tokens), so every figure here, the ceiling's too, is below what 32 documents and the full
  ground truth give; the rows are comparable with each other, not with the suites' tables.

Each row: top-1 (the pick is the true best of all candidates), mean regret and max regret (over targets and
LoRA seeds; means over the cuts), beside measure-all's (the ceiling) and ``rerank=3`` (the default first stage's
top 3 measured on every document, the cost of B = 4). Regret is in the suite's transfer units (relative
perplexity drop; exp3: nats per label).

Recall@k (k = 1 … 32, capped by the candidates) of every first stage with scores in the committed results; the
default pool and shortlist are chosen leave-one-suite-out (``choose_shortlist``). P(best) of the pick
(``measured_probability`` × ``recall_at``) = the first stage's recall at the shortlist measured (leave-one-suite-out)
× the library's ``best_chance`` share of double bootstrap resamples of the measuring documents (the population, then a truth sample of the
truth documents' size) in which the pick beats every other measured candidate on the documents both were measured
on; its reliability per suite against how often the pick was the best on the truth documents (independent halves
and own sample).

Budgets count full passes as ``select_adapter`` does: a document under a suite's adapter (layers 20 … of 30
adapted) costs ``common.adapter_pass_share`` of a full pass, the layers below replaying what the base model's pass
kept (``fisherhub.analysis.halving.candidate_capacity``); the default budget's rows with every document-pass a full
pass (the count before) are printed beside them.

Every row and reliability input is kept in ``<cache>/halving_rows.json`` under a hash of the losses it read, so a
rerun recomputes only what changed (a new own sample, say).

    python -m benchmarks.paper.halving [--quick]   # table, benchmarks/results/paper_halving.json and .png
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence


from benchmarks.paper import common, halving_simulation
from benchmarks.paper.halving_simulation import (
    DEFAULT_POOL,
    OWN_SAMPLE,
    SETTINGS,
    SPLITS,
    Suite,
    budget_rows,
    choose_shortlist,
    cuts,
    fit_exponent,
    load_suites,
    pool_rows,
    quick_suites,
    recall_curves,
    reliability,
    reliability_inputs,
)
from benchmarks.paper.report import print_table, write_json
from fisherhub.core.registry import DEFAULT_RERANK_BUDGET, HALVING_SHORTLIST

#: the issue's targets at the default budget
TARGET_BUDGET, MAX_REGRET, MIN_TOP1, CEILING_GAP = DEFAULT_RERANK_BUDGET, 0.01, 0.75, 0.05
#: today's two-stage selection (rerank=3 on the targets' own 32-document samples), from paper_recall.json
TODAY = {"exp4": (0.917, 0.005), "exp5": (0.833, 0.002)}


def print_budget_tables(rows: Mapping[str, Mapping[str, list[dict]]]) -> None:
    for setting, by_suite in rows.items():
        for suite, table in by_suite.items():
            print_table(
                [
                    "B",
                    "shortlist",
                    "top-1",
                    "mean regret",
                    "max regret",
                    "ceiling top-1",
                    "ceiling max",
                    "documents",
                    "selections",
                ],
                [
                    [
                        r["budget"],
                        r["shortlist"],
                        r["top1"],
                        r["mean_regret"],
                        r["max_regret"],
                        r["ceiling"]["top1"],
                        r["ceiling"]["max_regret"],
                        r["measured_documents"],
                        r["selections"],
                    ]
                    for r in table
                ],
                title=f"{suite}, {setting}: successive halving against the budget B (passes, the base model's "
                "included); the ceiling is measure-all on the measuring documents; shortlist: candidates entered",
            )


def verdict_lines(rows: Mapping[str, Mapping[str, list[dict]]], rerank3: Mapping[str, Mapping[str, dict]]) -> list[str]:
    """The issue's targets at B = 4, checked row by row, and the smallest budget within 5 points of measure-all's
    top-1 on every suite from there on."""
    lines = []
    for setting, by_suite in rows.items():
        within = {
            suite: next(
                (
                    r["budget"]
                    for i, r in enumerate(table)
                    if all(x["ceiling"]["top1"] - x["top1"] <= CEILING_GAP for x in table[i:])
                ),
                None,
            )
            for suite, table in by_suite.items()
        }
        lines.append(
            f"{setting}: the smallest B within {CEILING_GAP:.2f} of measure-all's top-1 from there on: {within}"
        )
        for suite, table in by_suite.items():
            row = next(r for r in table if r["budget"] == TARGET_BUDGET)
            gap = row["ceiling"]["top1"] - row["top1"]
            today = rerank3[setting][suite]
            lines.append(
                f"{setting}, {suite}, B = {TARGET_BUDGET}: top-1 {row['top1']:.3f} (ceiling {row['ceiling']['top1']:.3f}, "
                f"{'within' if gap <= CEILING_GAP else 'NOT within'} {CEILING_GAP:.2f}; rerank=3 {today['top1']:.3f}), "
                f"max regret {row['max_regret']:.4f} (rerank=3 {today['max_regret']:.4f})"
                + (
                    f"; targets top-1 ≥ {MIN_TOP1}: {'met' if row['top1'] >= MIN_TOP1 else 'missed'}, max regret ≤ "
                    f"{MAX_REGRET}: {'met' if row['max_regret'] <= MAX_REGRET else 'missed'}"
                    if suite == "exp6"
                    else ""
                )
                + (
                    f"; no worse than today (rerank=3 on the same {row['selections']} selections; all seeds "
                    f"{TODAY[suite][0]:.3f}): {'met' if row['top1'] >= today['top1'] - 1e-9 else 'missed'}"
                    if suite in TODAY and setting == OWN_SAMPLE
                    else ""
                )
            )
    return lines


def full_pass_rows(suites: Mapping[str, Mapping[str, Suite]], splits: int) -> dict[str, dict[str, dict]]:
    """The default budget's rows with every document-pass counted as a full pass (``ADAPTER_SHARE`` 1)."""
    share, halving_simulation.ADAPTER_SHARE = halving_simulation.ADAPTER_SHARE, 1.0
    try:
        return {
            setting: {
                n: pool_rows(
                    s,
                    setting,
                    cuts(setting, splits),
                    DEFAULT_POOL,
                    min(HALVING_SHORTLIST, len(s.names) - 1),
                    TARGET_BUDGET,
                )
                for n, s in by_suite.items()
            }
            for setting, by_suite in suites.items()
        }
    finally:
        halving_simulation.ADAPTER_SHARE = share


def print_accounting(rows: Mapping[str, Mapping[str, list[dict]]], full: Mapping[str, Mapping[str, dict]]) -> None:
    at_cost = {
        s: {n: next(r for r in t if r["budget"] == TARGET_BUDGET) for n, t in b.items()} for s, b in rows.items()
    }
    print_table(
        ["setting", "suite", "full passes: entered", "top-1", "max regret", "at cost: entered", "top-1", "max regret"],
        [
            [setting, n, f["shortlist"], f["top1"], f["max_regret"], c["shortlist"], c["top1"], c["max_regret"]]
            for setting, by_suite in full.items()
            for n, f in by_suite.items()
            for c in [at_cost[setting][n]]
        ],
        title=f"B = {TARGET_BUDGET}: every document-pass a full pass, or at its cost "
        f"({halving_simulation.ADAPTER_SHARE:.3f} of one)",
    )


def reliability_by_suite(suites: Mapping[str, Suite], setting: str, splits: int) -> dict[str, dict[str, dict]]:
    """The reliability tables of P(best) in ``setting`` per suite (those that have it) and over them together,
    printed; halving's P(best) also with its exponent fitted on the other suites (``fit_exponent``)."""
    splits = cuts(setting, splits)
    parts = {
        name: dict(reliability_inputs(suite, suites, setting, splits))
        for name, suite in suites.items()
        if setting != OWN_SAMPLE or suite.own is not None
    }
    halving = f"halving B={TARGET_BUDGET}"
    fitted, exponents = f"{halving}, exponent fitted on the other suites", {}
    for name, by_method in parts.items():
        others = [parts[other][halving] for other in parts if other != name]
        if others:
            gamma = exponents[name] = fit_exponent(*([x for other in others for x in other[i]] for i in range(3)))
            measured, entered, observed = by_method[halving]
            by_method[fitted] = (
                [m**gamma for m in measured],
                entered,
                observed,
            )
    inputs = {
        name: {method: ([m * e for m, e in zip(*x[:2])], x[2]) for method, x in by_method.items()}
        for name, by_method in parts.items()
    }
    methods = {m for by_method in inputs.values() for m in by_method}
    pooled = {
        method: tuple(
            [x for by_method in inputs.values() if method in by_method for x in by_method[method][i]] for i in (0, 1)
        )
        for method in sorted(methods)
    }
    tables = {}
    for name, by_method in {**inputs, "all suites": pooled}.items():
        tables[name] = {method: reliability(p, o, splits) for method, (p, o) in by_method.items()}
        if name in exponents:
            tables[name][fitted]["exponent"] = exponents[name]
        for method, table in tables[name].items():
            exponent = f"; exponent {table['exponent']:.2f}" if "exponent" in table else ""
            print_reliability(f"{name}, {method}", f"{setting}; selections = rows / cuts{exponent}", table)
    return tables


def print_reliability(name: str, how: str, table: Mapping) -> None:
    """A reliability table of P(best of all candidates) (``halving_simulation.reliability``), printed."""
    print_table(
        ["P(best) bin", "rows", "selections", "predicted", "observed [95%]", "says"],
        [
            [
                f"{b['bin'][0]:.2f}-{b['bin'][1]:.2f}",
                b["rows"],
                b["selections"],
                b["predicted"],
                f"{b['observed']:.2f} [{b['observed_interval'][0]:.2f}, {b['observed_interval'][1]:.2f}]",
                b["says"],
            ]
            for b in table["bins"]
        ],
        title=f"{name}: reliability of P(best of all candidates) ({how}); Brier {table['brier']:.3f}",
    )


def figure(curves: Mapping[str, dict], rows: Mapping[str, Mapping[str, list[dict]]], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = list(curves)
    fig, axes = plt.subplots(3, len(suites), figsize=(4.5 * len(suites), 10), squeeze=False)
    for column, suite in enumerate(suites):
        for name, by_k in curves[suite].items():
            ks = sorted(int(k) for k in by_k)
            axes[0, column].plot(ks, [by_k[k] for k in ks], marker=".", label=name)
        axes[0, column].set_title(f"{suite}: recall@k of the true best")
        axes[0, column].set_xlabel("k")
        for setting, style in zip(rows, ("-", "--", ":")):
            table = rows[setting].get(suite)
            if table is None:
                continue
            budgets = [r["budget"] for r in table]
            axes[1, column].plot(budgets, [r["top1"] for r in table], style, marker="o", label=f"halving, {setting}")
            axes[1, column].plot(
                budgets, [r["ceiling"]["top1"] for r in table], style, color="gray", label=f"measure-all, {setting}"
            )
            axes[2, column].plot(budgets, [r["max_regret"] for r in table], style, marker="o", label=setting)
        axes[1, column].set_title(f"{suite}: top-1 against B")
        axes[2, column].set_title(f"{suite}: max regret against B")
        axes[2, column].set_xlabel("B (passes, the base model's included)")
    axes[0, 0].legend(fontsize=6)
    axes[1, -1].legend(fontsize=6)  # the last suite has every setting (exp3 has no own sample)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    options = common.paper_arguments(__doc__.splitlines()[0], argv=argv)
    started = time.time()
    halving_simulation.ROWS = common.Ledger(common.SETUP.cache_dir / "halving_rows.json")
    halving_simulation.ADAPTER_SHARE = common.adapter_pass_share()
    print(f"an adapter's document: {halving_simulation.ADAPTER_SHARE:.4f} of a full pass")
    suites: dict[str, Suite] = quick_suites() if options.quick else load_suites(common.RESULTS_DIR)
    splits = 2 if options.quick else SPLITS
    curves = {name: recall_curves(suite) for name, suite in suites.items()}
    shortlist = choose_shortlist(suites, splits)
    for name, choice in shortlist.items():
        print(f"{name}: pool and shortlist chosen on the other suites: {choice}")
    having = {setting: {n: s for n, s in suites.items() if setting != OWN_SAMPLE or s.own} for setting in SETTINGS}
    rows = {
        setting: {n: budget_rows(s, setting, cuts(setting, splits)) for n, s in by_suite.items()}
        for setting, by_suite in having.items()
    }
    print_budget_tables(rows)
    full_pass = full_pass_rows(having, splits)
    print_accounting(rows, full_pass)
    rerank3 = {
        setting: {n: pool_rows(s, setting, cuts(setting, splits), DEFAULT_POOL, 3, 4) for n, s in by_suite.items()}
        for setting, by_suite in having.items()
    }
    reliability_tables = {setting: reliability_by_suite(suites, setting, splits) for setting in SETTINGS[1:]}
    verdict = verdict_lines(rows, rerank3)
    print("\n".join(verdict))
    path = common.SETUP.results_dir / "paper_halving.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    figure(curves, rows, path)
    write_json(
        "paper_halving",
        {
            "description": __doc__.splitlines()[0],
            "quick": bool(options.quick),
            "splits": splits,
            "recall": curves,
            "shortlist_by_held_out_suite": shortlist,
            "adapter_pass_share": halving_simulation.ADAPTER_SHARE,
            "budgets": rows,
            "default_budget_every_pass_full": full_pass,
            "rerank3": rerank3,
            "reliability": reliability_tables,
            "today": TODAY,
            "verdict": verdict,
        },
        started,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
