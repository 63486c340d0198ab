"""The ranking for people: plain and ``rich`` tables, and a bar chart (a matplotlib ``Figure``; the user's
backend is left alone)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

from fisherhub.core.geometry import DECOMPOSITION, GEOMETRIES, HEAD_SCORES, label
from fisherhub.extras import require
from fisherhub.safe_text import printable

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.table import Table

    from fisherhub.analysis.auto import AutoChoice
    from fisherhub.analysis.verdict import Verdict
    from fisherhub.selection.rerank import Rerank
    from fisherhub.selection.rows import RankedCandidate, Skipped


class Shown(Protocol):
    """What the report shows of a selection (``results.Selection``)."""

    ranking: list[RankedCandidate]
    skipped: list[Skipped]
    score: str
    verdict: Verdict | None
    choice: AutoChoice | None
    rerank: Rerank | None

    @property
    def best(self) -> RankedCandidate: ...


_COMMIT_ID = re.compile(r"@[0-9a-f]{40}\b")


def short_commits(text: str) -> str:
    """``text`` with each ``@<40-hex commit>`` cut to ``@`` + its first 7 hex digits."""
    return _COMMIT_ID.sub(lambda match: match.group(0)[:8], text)


def _format(value: float | None, stderr: float | None = None) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" if stderr is None else f"{value:.3f} ± {stderr:.3f}"


def _table_rows(selection: Shown, limit: int | None) -> tuple[list[str], list[list[str]]]:
    """One row per candidate: rank, name, first stage (score ± se, A, S_a, S_e, ρ) and, after a second stage, the
    measured loss on the target ± se and its drop from the base model's (— for the candidates not measured)."""
    measured = {} if selection.rerank is None else {m.candidate: m for m in selection.rerank.measured}
    second = ["target loss", "gain vs base"] if measured else []
    symbols = [GEOMETRIES[name].symbol for name in DECOMPOSITION]
    header = ["#", "candidate", *second, f"score: {label(selection.score)}", *symbols, "signature source", "provenance"]
    rows = [
        [
            f"{rank} !" if row.doubt else str(rank),
            row.candidate,
            *(
                []
                if not measured
                else [
                    _format(m.loss, m.stderr) if (m := measured.get(row.candidate)) else "—",
                    _format(m.gain, m.gain_stderr) if m else "—",
                ]
            ),
            _format(row.score, row.stderr),
            _format(row.fisher),
            _format(row.activation),
            _format(row.error),
            _format(row.coupling),
            short_commits(row.signature_source),
            row.provenance,
        ]
        for rank, row in enumerate(selection.ranking[:limit], start=1)
    ]
    return header, [[printable(cell) for cell in row] for row in rows]


#: ``score="auto"`` in plain words, by the regime of the head (answer first; the evidence follows it)
_AUTO_WHY = {
    "coupled": "the candidates differ both in their inputs (S_a) and in the words they teach (S_e), and not as "
    "the two factors alone would say, so the full alignment A decides",
    "separable": "the candidates differ both in their inputs (S_a) and in the words they teach (S_e); A combines the two",
    "activation-dark": "the candidates' inputs look alike to the model; the words they teach differ, so S_e decides",
    "error-flat": "the words the candidates teach look alike; their inputs differ, so S_a decides",
}


def auto_explanation(choice: AutoChoice, score: str) -> str:
    """What ``score="auto"`` ranked by (``score``, the geometry ``choice`` took) and why, in plain words, then
    the statistics behind it."""
    separation = choice.separations.get(choice.geometry)
    if choice.geometry == choice.regime.geometry:
        why = _AUTO_WHY[choice.regime.name]
    elif separation is not None and separation.separates:
        why = f"the head's own scores do not tell the candidates apart; the {label(choice.geometry)} does"
    else:
        why = "no score tells the candidates apart beyond their error bars, so this ranking is close to a guess"
    return f"auto: ranked by {label(score)}, because {why}. (Evidence: {choice.reason}.)"


def _caption(selection: Shown, limit: int | None) -> str:
    """The legend lines that apply to the shown rows (scores above 1, blank ρ), then the skipped candidates
    with their reasons."""
    from fisherhub.legend import ABOVE_ONE, BLANK_COUPLING

    rows = selection.ranking[:limit]
    legend = [
        *(
            [f"note: {ABOVE_ONE}"]
            if any(max(row.fisher, row.activation, row.error) > 1.0 for row in rows if not row.doubt)
            else []
        ),
        *([f"note: {BLANK_COUPLING}"] if any(row.coupling is None for row in rows) else []),
    ]
    trust = []
    if selection.choice is not None:
        trust.append(auto_explanation(selection.choice, selection.score))
    if selection.rerank is not None:
        second = selection.rerank
        unmeasured = f", {len(second.skipped)} more tried and skipped (below)" if second.skipped else ""
        trust.append(
            f"two-stage: first {len(second.measured)} adapters of the S_a and S_e rankings measured{unmeasured} on "
            f"the target's {second.tokens} scored tokens ({second.documents} documents; base model loss "
            f"{second.base_loss:.4f}) in {second.seconds:.1f} s"
        )
        if second.first_stage_verdict is not None:
            trust.append(f"first stage: {second.first_stage_verdict.message}")
    if selection.verdict is not None:
        trust.append(f"verdict: {selection.verdict.message}")
    doubted = [row for row in rows if row.doubt]
    doubts = (
        ["! ranked last, not to be trusted:", *(f"  {row.candidate}: {row.doubt}" for row in doubted)]
        if doubted
        else []
    )
    skipped = ["skipped:", *(f"  {s.candidate}: {s.reason}" for s in selection.skipped)] if selection.skipped else []
    return "\n".join(printable(line) for line in [*trust, *doubts, *legend, *skipped])  # a name's \n breaks no line


def plain_table(selection: Shown, limit: int | None = None) -> str:
    """Aligned columns, a rule under the header, then the legend lines that apply and the skipped candidates."""
    header, rows = _table_rows(selection, limit)
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    caption = _caption(selection, limit)
    return "\n".join(lines) + (f"\n{caption}" if caption else "")


def rich_table(selection: Shown, limit: int | None = None) -> Table:
    """The same rows as a ``rich.table.Table``, the skipped candidates in its caption."""
    require("rich")
    from rich.table import Table
    from rich.text import Text

    header, rows = _table_rows(selection, limit)
    caption = _caption(selection, limit)
    table = Table(
        *header,
        title=f"candidates ranked by {label(selection.score)}",
        caption=Text(caption) if caption else None,
        caption_justify="left",
    )
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # Text: a repo's "[...]" is not read as rich markup
    return table


def bar_chart(selection: Shown, limit: int | None = None) -> Figure:
    """A, S_a and S_e of each candidate side by side with ±1 stderr error bars, candidates in ranking order."""
    import numpy as np

    require("matplotlib")
    from matplotlib.figure import Figure

    rows = selection.ranking[:limit]
    positions = np.arange(len(rows))
    width = 0.8 / len(HEAD_SCORES)
    figure = Figure(figsize=(max(4.0, 1.2 * len(rows) + 2.0), 3.8), layout="constrained")
    axes = figure.subplots()
    for offset, score in enumerate(HEAD_SCORES):
        ranked = [row.ranked_by(score) for row in rows]
        axes.bar(
            positions + (offset - 1) * width,
            [row.score for row in ranked],
            width,
            yerr=[row.stderr for row in ranked],
            capsize=3,
            label=label(score),
        )
    ticks = [f"! {printable(row.candidate)}" if row.doubt else printable(row.candidate) for row in rows]
    axes.set_xticks(positions, ticks, rotation=20, ha="right", fontsize=8)
    for tick, row in zip(axes.get_xticklabels(), rows):
        tick.set_color("red" if row.doubt else "black")
    axes.set_ylabel("alignment with the target")
    best = selection.best
    title = f"ranked by {label(selection.score)}; best: {printable(best.candidate)}"
    if any(row.doubt for row in rows):
        title += " (! in red: not to be trusted, ranked last)" if best.doubt is None else " (! none to be trusted)"
    axes.set_title(title, fontsize=10)
    axes.axhline(0.0, color="black", linewidth=0.6)
    figure.legend(loc="outside lower center", ncol=len(HEAD_SCORES), fontsize=8)
    return figure
