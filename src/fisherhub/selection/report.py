"""The ranking for people: plain and ``rich`` tables, and a bar chart (a matplotlib ``Figure``; the user's
backend is left alone)."""

from __future__ import annotations

import re
import shutil
import textwrap
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


def _measured_loss(measured, second) -> str:
    """A measured loss ± se, with the number of documents it is over where that is fewer than the target's (an
    adapter a budgeted second stage dropped early)."""
    fewer = f" ({measured.documents} of {second.documents} docs)" if measured.documents < second.documents else ""
    return _format(measured.loss, measured.stderr) + fewer


def _second_stage_line(second) -> str:
    """What the second stage measured: which adapters, on how many documents, at what cost."""
    unmeasured = f", {len(second.skipped)} more tried and skipped (below)" if second.skipped else ""
    where = (
        f"the target's {second.tokens} scored tokens ({second.documents} documents; base model loss "
        f"{second.base_loss:.4f}) in {second.seconds:.1f} s"
    )
    if second.budget is None:
        return f"two-stage: first {len(second.measured)} adapters of the S_a and S_e rankings measured{unmeasured} on {where}"
    finalists = sum(m.documents == second.documents for m in second.measured)
    return (
        f"two-stage, successive halving within {second.budget} passes ({second.full_passes:.2f} spent on "
        f"{second.passes} document-passes, the base model's included): "
        f"{len(second.measured)} adapters of the S_a and S_e rankings measured{unmeasured} on {where}: {finalists} "
        "of them on every document, the others on fewer (dropped in earlier rounds)"
    )


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
                    _measured_loss(m, selection.rerank) if (m := measured.get(row.candidate)) else "—",
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
    from fisherhub.legend import ABOVE_ONE, BLANK_COUPLING, FROM_GENERATIONS, GENERATED_FALLBACK

    rows = selection.ranking[:limit]
    legend = [
        *(
            [f"note: {ABOVE_ONE}"]
            if any(max(row.fisher, row.activation, row.error) > 1.0 for row in rows if not row.doubt)
            else []
        ),
        *([f"note: {BLANK_COUPLING}"] if any(row.coupling is None for row in rows) else []),
        *([f"note: {GENERATED_FALLBACK}"] if any(FROM_GENERATIONS in row.provenance for row in rows) else []),
    ]
    trust = []
    if selection.choice is not None:
        trust.append(auto_explanation(selection.choice, selection.score))
    if selection.rerank is not None:
        second = selection.rerank
        trust.append(_second_stage_line(second))
        if second.first_stage_verdict is not None:
            trust.append(f"first stage: {second.first_stage_verdict.message}")
    if selection.verdict is not None:
        generated = f" (the pick is signed {FROM_GENERATIONS})" if FROM_GENERATIONS in selection.best.provenance else ""
        trust.append(f"verdict: {selection.verdict.message}{generated}")
    doubted = [row for row in rows if row.doubt]
    doubts = (
        ["! ranked last, not to be trusted:", *(f"  {row.candidate}: {row.doubt}" for row in doubted)]
        if doubted
        else []
    )
    skipped = ["skipped:", *(f"  {s.candidate}: {s.reason}" for s in selection.skipped)] if selection.skipped else []
    return "\n".join(printable(line) for line in [*trust, *doubts, *legend, *skipped])  # a name's \n breaks no line


#: the columns of ``_table_rows`` shown below the table (the details) unless wide: long, and about trust, not rank
DETAIL_COLUMNS = ("signature source", "provenance")
#: the width tables fit when the terminal's is not known (``shutil.get_terminal_size``'s fallback)
DEFAULT_WIDTH = 100
#: the fewest characters a shortened candidate name keeps (its full name is in the details)
_SHORTEST_NAME = 12


def table_width(width: int | None = None) -> int:
    """``width``, else the terminal's (``COLUMNS`` or the size of the terminal), else ``DEFAULT_WIDTH``."""
    return width if width is not None else shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def _shortened(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: the middle replaced by ``…`` (the end of a repo id tells most)."""
    if len(text) <= width:
        return text
    head = (width - 1) // 3
    return f"{text[:head]}…{text[len(text) - (width - 1 - head) :]}"


def _layout(
    selection: Shown, limit: int | None, wide: bool, width: int
) -> tuple[list[str], list[list[str]], list[tuple[str, str, list[tuple[str, str]]]]]:
    """(header, rows, details) as shown. Wide: every column of ``_table_rows`` in one row per candidate, no
    details. Otherwise the ``DETAIL_COLUMNS`` go to the details ((rank, full candidate name, [(column, value)])),
    the score's own column is dropped (the score column is it, ± its stderr), and candidate names are shortened
    in the middle until the rows fit ``width``."""
    header, rows = _table_rows(selection, limit)
    if wide:
        return header, rows, []
    symbol = GEOMETRIES[selection.score].symbol if selection.score in GEOMETRIES else None
    score_column = f"score: {label(selection.score)}"
    hidden = {*DETAIL_COLUMNS, *([symbol] if symbol else [])}
    keep = [i for i, name in enumerate(header) if name not in hidden]
    details_at = [i for i, name in enumerate(header) if name in DETAIL_COLUMNS]
    details = [(row[0], row[1], [(header[i], row[i]) for i in details_at]) for row in rows]
    shown = [f"score: {symbol}" if name == score_column and symbol else name for name in (header[i] for i in keep)]
    shown_rows = [[row[i] for i in keep] for row in rows]
    name_at = shown.index("candidate")
    widths = [max(len(line[i]) for line in [shown, *shown_rows]) for i in range(len(shown))]
    room = widths[name_at] - (sum(widths) + 2 * (len(widths) - 1) - width)
    if room < widths[name_at]:
        fitted = max(room, _SHORTEST_NAME, len("candidate"))
        for line in shown_rows:
            line[name_at] = _shortened(line[name_at], fitted)
    return shown, shown_rows, details


def fill(text: str, width: int, indent: str = "", more: str = "  ") -> list[str]:
    """``text`` wrapped to ``width`` after ``indent`` (continuations after ``more``), split at spaces and
    before a signature's path in its repo (``:.fisher_signatures/``); a word longer than a line is cut."""
    text = text.replace(":.fisher_signatures/", ": .fisher_signatures/")
    wrapped = textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=more, break_on_hyphens=False)
    return [line.replace(": .fisher_signatures/", ":.fisher_signatures/") for line in wrapped]


def _detail_lines(details: list[tuple[str, str, list[tuple[str, str]]]], width: int) -> list[str]:
    """The details under a table: per candidate, its rank and full name, then each detail column's value, wrapped
    to ``width``."""
    if not details:
        return []
    lines = [f"{' and '.join(name for name, _ in details[0][2])}:"]
    for rank, candidate, values in details:
        lines += fill(f"{rank} {candidate}", width, "  ", "    ")
        for _, value in values:
            lines += fill(value, width, "    ", "      ")
    return lines


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` (lines) wrapped to ``width``, each continuation indented under its line's text."""
    out = []
    for line in text.splitlines():
        out += fill(line, width, "", " " * (len(line) - len(line.lstrip(" ")) + 2)) or [""]
    return out


def below_table(selection: Shown, limit: int | None = None, *, wide: bool = False, width: int | None = None) -> str:
    """What follows the rows: (unless ``wide``) each candidate's signature source and provenance, then the
    verdict, the legend lines that apply and the skipped candidates; wrapped to ``width`` unless ``wide``."""
    width = table_width(width)
    caption = _caption(selection, limit)
    if wide:
        return caption
    details = _layout(selection, limit, wide, width)[2]
    return "\n".join([*_detail_lines(details, width), *(_wrapped(caption, width) if caption else [])])


def plain_table(selection: Shown, limit: int | None = None, *, wide: bool = False, width: int | None = None) -> str:
    """Aligned columns, a rule under the header, then ``below_table``; within ``width`` columns (``table_width``)
    unless ``wide``, which puts every column on one line per candidate."""
    width = table_width(width)
    header, rows, _ = _layout(selection, limit, wide, width)
    sizes = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(size) for cell, size in zip(line, sizes)).rstrip() for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * size for size in sizes))
    below = below_table(selection, limit, wide=wide, width=width)
    return "\n".join(lines) + (f"\n{below}" if below else "")


def rich_table(
    selection: Shown, limit: int | None = None, *, wide: bool = False, width: int | None = None, caption: bool = True
) -> Table:
    """The same rows as a ``rich.table.Table``, with ``below_table`` as its caption (``caption=False``: none;
    print ``below_table`` under it instead, at the terminal's width rather than the table's)."""
    require("rich")
    from rich.table import Table
    from rich.text import Text

    width = table_width(width)
    header, rows, _ = _layout(selection, limit, wide, width)
    text = below_table(selection, limit, wide=wide, width=width) if caption else ""
    table = Table(
        *header,
        title=f"candidates ranked by {label(selection.score)}",
        caption=Text(text) if text else None,
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
