"""What an index holds, for its card and ``fisherhub index show`` (``IndexSummary``), the card itself
(``render_card``: ``configs:`` for the Hub's viewer and ``load_dataset``, the ``fisherhub_index:`` block, a
summary, the heatmap) and that heatmap (``rows_figure``, drawn by ``fisherhub.plotting``)."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any


from fisherhub.hub.signature_index.layout import Layout
from fisherhub.hub.signature_index.rows import (
    IndexRows,
    largest_rows,
    nearest_neighbours,
    read_rows,
    row_alignment_checks,
    row_alignments,
)
from fisherhub.safe_text import printable
from fisherhub.hub.signature_index.schema import DATA_DIR, INDEX_FORMAT, INDEX_TAG, OBTAINED, SPLIT, STATE_PATH

if TYPE_CHECKING:
    pass


#: signatures whose nearest neighbour the card and ``index show`` list
NEIGHBOUR_ROWS = 10
#: left-out rows whose reason the card and ``index show`` list
LEFT_OUT_SHOWN = 10
#: rows in the heatmap of the card and of ``index show --plot``
PLOTTED_ROWS = 24
#: the card's heatmap: in a hidden folder, which ``datasets`` never resolves as data (and outside ``configs:``)
FIGURE_PATH = ".fisherhub/alignments.png"


@dataclasses.dataclass(frozen=True)
class IndexSummary:
    """What an index holds, for its card and ``fisherhub index show``."""

    base_model: str
    rows: int
    repos: int
    by_obtained: dict[str, int]
    sketch_ids: dict[str, int]
    problems: int
    #: (repo, dataset, tokens, nearest other repo, A) for the signatures with the most tokens
    neighbours: tuple[tuple[str, str, int, str, float], ...] = ()
    #: per neighbour: why its A is not to be trusted (``nearest_neighbours``), or None
    neighbour_doubts: tuple[str | None, ...] = ()
    #: the rows ``read_rows`` left out, as "repo:path: reason" (a row that fails the bounded-claims checks too)
    left_out: tuple[str, ...] = ()

    @classmethod
    def of(cls, table, base_model: str, repos: Iterable[dict[str, Any]], rows: IndexRows | None = None) -> IndexSummary:
        """From the rows (an Arrow table; ``rows``: its ``read_rows``, when read already) and the state file's repo
        entries."""
        repos = list(repos)
        obtained = collections.Counter(table.column("obtained").to_pylist())
        sketch_ids = collections.Counter(table.column("sketch_id").to_pylist())
        problems = sum(len(repo.get("problems") or []) for repo in repos)
        rows = rows if rows is not None else read_rows(table, base_model, "the index")
        found = nearest_neighbours(rows, NEIGHBOUR_ROWS)
        neighbours = tuple(
            (
                rows.rows[i]["repo_id"],
                rows.rows[i]["dataset"] or "",
                rows.rows[i]["num_tokens"],
                rows.rows[j]["repo_id"],
                a,
            )
            for i, j, a, _ in found
        )
        doubts = tuple(doubt for *_, doubt in found)
        left_out = tuple(f"{row.repo_id}:{row.path}: {row.reason}" for row in rows.skipped)
        return cls(
            base_model,
            table.num_rows,
            len(repos),
            dict(obtained),
            dict(sketch_ids),
            problems,
            neighbours,
            doubts,
            left_out,
        )

    def _shown(self) -> list[tuple[str, str, int, str, str]]:
        """The neighbours as shown: repo, dataset and nearest repo ``printable`` (they come from the rows), A with
        " !" where it is doubted."""
        doubts = self.neighbour_doubts or (None,) * len(self.neighbours)
        return [
            (printable(repo), printable(dataset), tokens, printable(nearest), f"{a:.3f}" + (" !" if doubt else ""))
            for (repo, dataset, tokens, nearest, a), doubt in zip(self.neighbours, doubts)
        ]

    def _doubt_lines(self) -> list[str]:
        doubts = self.neighbour_doubts or (None,) * len(self.neighbours)
        return [
            f"! {printable(repo)} and {printable(nearest)}: {doubt}"
            for (repo, _, _, nearest, _), doubt in zip(self.neighbours, doubts)
            if doubt
        ]

    def neighbour_table(self) -> list[str]:
        """The neighbours as a Markdown table (empty without them), then why a doubted A (!) is not to be trusted."""
        if not self.neighbours:
            return []
        from fisherhub.core.geometry import GEOMETRIES

        fisher = GEOMETRIES["fisher"]
        out = [
            (
                f"Nearest neighbours among the {len(self.neighbours)} signatures with the most tokens "
                f"({fisher.label} from the index's sketches):"
            ),
            "",
            f"| adapter | dataset | tokens | nearest | {fisher.symbol} |",
            "|---|---|---|---|---|",
        ]
        cells = [
            [cell.replace("|", "\\|") for cell in (repo, dataset, f"{tokens:,}", nearest, a)]
            for repo, dataset, tokens, nearest, a in self._shown()
        ]
        doubts = self._doubt_lines()
        return out + [f"| {' | '.join(row)} |" for row in cells] + (["", *doubts] if doubts else [])

    def lines(self) -> list[str]:
        out = [f"signature index of {printable(self.base_model)}: {self.rows} signatures from {self.repos} repos read"]
        out += [
            f"  {count:>7}  {printable(OBTAINED.get(kind, kind))}" for kind, count in sorted(self.by_obtained.items())
        ]
        out += [
            f"  sketch id {printable(sketch_id)}: {count} rows" for sketch_id, count in sorted(self.sketch_ids.items())
        ]
        if self.problems:
            out.append(f"  {self.problems} signature(s) could not be read (listed in {STATE_PATH})")
        if self.left_out:
            out.append(f"  {len(self.left_out)} row(s) left out (neither ranked nor shown):")
            out += [f"    {printable(line)}" for line in self.left_out[:LEFT_OUT_SHOWN]]
            out += [f"    ... and {len(self.left_out) - LEFT_OUT_SHOWN} more"] * (len(self.left_out) > LEFT_OUT_SHOWN)
        return out

    def neighbour_lines(self) -> list[str]:
        """The neighbours as terminal lines, then why a doubted A (!) is not to be trusted."""
        return [
            f"  {repo} ({tokens:,} tokens): nearest {nearest}, A = {a}" for repo, _, tokens, nearest, a in self._shown()
        ] + self._doubt_lines()


def render_card(
    summary: IndexSummary,
    layout: Layout,
    existing: dict[str, Any],
    repo_id: str,
    figure: bool = False,
    stored_rows: int | None = None,
) -> str:
    """The index's README.md: ``configs:`` (the data files), the tag, the ``fisherhub_index:`` block, a summary
    (with ``figure``: the heatmap at ``FIGURE_PATH``, linked relatively); ``stored_rows``: the rows its shards
    hold, when updates left older versions of some there (``shards``)."""
    import yaml

    metadata = dict(existing)
    metadata["configs"] = [
        {"config_name": "default", "data_files": [{"split": SPLIT, "path": f"{DATA_DIR}/{SPLIT}-*"}]}
    ]
    metadata["tags"] = sorted(set(metadata.get("tags") or []) | {INDEX_TAG, "fisherhub"})
    metadata["fisherhub_index"] = {
        "format": INDEX_FORMAT,
        "base_model": summary.base_model,
        "rows": summary.rows,
        "layout": layout.as_dict(),
        "sketch_ids": sorted(summary.sketch_ids),
    }
    front = yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True)
    name = summary.base_model
    sketches = ", ".join(layout.sketches)
    body = "\n".join(
        [
            f"# Fisher signature index of {name}",
            "",
            (
                f"Every published fisherhub signature of the adapters of `{name}`, one row per signature (repo, commit, "
                "file, sketch id and spec, provenance, counts, split norms, and the sketches as unit vectors in "
                f"{layout.dtype}: {sketches})."
            ),
            "",
            "```",
            *summary.lines(),
            "```",
            "",
            *superseded_note(summary.rows, stored_rows),
            *summary.neighbour_table(),
            "",
            *([f"![A among the signatures with the most tokens]({FIGURE_PATH})", ""] if figure else []),
            "Rank every adapter for your data in one download:",
            "",
            "```bash",
            f"fisherhub select my-target.safetensors --index {repo_id}",
            "```",
            "",
        ]
    )
    return f"---\n{front}---\n\n{body}"


def superseded_note(rows: int, stored_rows: int | None) -> list[str]:
    """The card's lines saying that the shards hold ``stored_rows``, ``rows`` of them the index's (none when equal)."""
    if stored_rows is None or stored_rows <= rows:
        return []
    return [
        f"The data files hold {stored_rows:,} rows: {stored_rows - rows:,} of them replaced by an update (an older "
        "commit of an adapter read again, or an adapter gone), which the viewer and `load_dataset` show until the "
        "next full push, and `fisherhub` leaves out.",
        "",
    ]


def rows_figure(rows: IndexRows, base_model: str, limit: int = PLOTTED_ROWS, among: Iterable[int] | None = None):
    """A heatmap (matplotlib ``Figure``, ``plotting.names_heatmap``) of A among the ``largest_rows`` (of the rows
    ``among``, default all); None with fewer than two."""
    from fisherhub.core.geometry import label
    from fisherhub.plotting import names_heatmap

    chosen = largest_rows(rows, limit, among)
    if len(chosen) < 2:
        return None
    matrix = row_alignments(rows, chosen)
    doubted = row_alignment_checks(rows, chosen, matrix)[2]
    names = [printable(rows.rows[i]["repo_id"]) for i in chosen]
    title = f"{label('fisher')} among {len(names)} rows of {printable(base_model)}'s index"
    return names_heatmap(matrix, names, title, doubted)
