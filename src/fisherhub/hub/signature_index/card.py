"""What an index holds, for its card and ``fisherhub index show`` (``IndexSummary``), the card itself
(``render_card``: ``configs:`` for the Hub's viewer and ``load_dataset``, the ``fisherhub_index:`` block, a
summary, the heatmap) and that heatmap (``rows_figure``, drawn by ``fisherhub.plotting``)."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any


from fisherhub.hub.signature_index.layout import Layout
from fisherhub.hub.signature_index.rows import IndexRows, largest_rows, nearest_neighbours, read_rows, row_alignments
from fisherhub.hub.signature_index.schema import DATA_DIR, INDEX_FORMAT, INDEX_TAG, OBTAINED, SPLIT, STATE_PATH

if TYPE_CHECKING:
    pass


#: signatures whose nearest neighbour the card and ``index show`` list
NEIGHBOUR_ROWS = 10
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

    @classmethod
    def of(cls, table, base_model: str, repos: Iterable[dict[str, Any]]) -> IndexSummary:
        """From the rows (an Arrow table) and the state file's repo entries."""
        repos = list(repos)
        obtained = collections.Counter(table.column("obtained").to_pylist())
        sketch_ids = collections.Counter(table.column("sketch_id").to_pylist())
        problems = sum(len(repo.get("problems") or []) for repo in repos)
        rows = read_rows(table, base_model, "the index")
        neighbours = tuple(
            (
                rows.rows[i]["repo_id"],
                rows.rows[i]["dataset"] or "",
                rows.rows[i]["num_tokens"],
                rows.rows[j]["repo_id"],
                a,
            )
            for i, j, a in nearest_neighbours(rows, NEIGHBOUR_ROWS)
        )
        return cls(base_model, table.num_rows, len(repos), dict(obtained), dict(sketch_ids), problems, neighbours)

    def neighbour_table(self) -> list[str]:
        """The neighbours as a Markdown table (empty without them)."""
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
        return out + [
            f"| {repo} | {dataset} | {tokens:,} | {nearest} | {a:.3f} |"
            for repo, dataset, tokens, nearest, a in self.neighbours
        ]

    def lines(self) -> list[str]:
        out = [f"signature index of {self.base_model}: {self.rows} signatures from {self.repos} repos read"]
        out += [f"  {count:>7}  {OBTAINED.get(kind, kind)}" for kind, count in sorted(self.by_obtained.items())]
        out += [f"  sketch id {sketch_id}: {count} rows" for sketch_id, count in sorted(self.sketch_ids.items())]
        if self.problems:
            out.append(f"  {self.problems} signature(s) could not be read (listed in {STATE_PATH})")
        return out

    def neighbour_lines(self) -> list[str]:
        """The neighbours as terminal lines."""
        return [
            f"  {repo} ({tokens:,} tokens): nearest {nearest}, A = {a:.3f}"
            for repo, _, tokens, nearest, a in self.neighbours
        ]


def render_card(
    summary: IndexSummary, layout: Layout, existing: dict[str, Any], repo_id: str, figure: bool = False
) -> str:
    """The index's README.md: ``configs:`` (the data files), the tag, the ``fisherhub_index:`` block, a summary
    (with ``figure``: the heatmap at ``FIGURE_PATH``, linked relatively)."""
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


def rows_figure(rows: IndexRows, base_model: str, limit: int = PLOTTED_ROWS):
    """A heatmap (matplotlib ``Figure``, ``plotting.names_heatmap``) of A among the ``largest_rows``; None with
    fewer than two."""
    from fisherhub.core.geometry import label
    from fisherhub.plotting import names_heatmap

    chosen = largest_rows(rows, limit)
    if len(chosen) < 2:
        return None
    names = [rows.rows[i]["repo_id"] for i in chosen]
    title = f"{label('fisher')} among {len(names)} rows of {base_model}'s index"
    return names_heatmap(row_alignments(rows, chosen), names, title)
