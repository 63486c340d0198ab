"""The index Space's page (Gradio): the rows of a signature index as a table with filters and pages, a chosen
row's neighbours and snippet, the heatmap of A among the rows shown, a target signature ranked. What it shows
comes from ``space.browse`` and ``space.index_view``; this module only lays it out and wires the events.

The index is read when the page is built (a Space's start), and the page is made with its first view (every row,
the first 50, the heatmap), so a visitor's browser shows the rows with the page itself. When a page opens, one
``repo_info`` says the commit the index's revision is now: the same, nothing more is sent; another, its rows are
read once (``BrowserCache``) and the page shows them. A session keeps the commit it opened, so its filters, pages
and neighbours stay on the rows it shows.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fisherhub.core.errors import FisherHubError, InputError
from fisherhub.space import index_view
from fisherhub.space.browse import Filters, IndexBrowser
from fisherhub.space.ui import gradio

if TYPE_CHECKING:
    import gradio as gr

#: the filter value that keeps every row
ANY = "any"
#: browsers kept (the index at its last commits)
KEPT_COMMITS = 2


class BrowserCache:
    """The index ``name`` read at each commit asked for; ``current()`` asks the Hub which commit that is."""

    def __init__(self, name: str, token: str | None = None):
        from fisherhub.hub.signature_index import index_ref

        self.ref, self.token = index_ref(name), token
        self.browsers: dict[str, IndexBrowser] = {}
        self.lock = threading.Lock()

    def current(self) -> IndexBrowser:
        """The index at the commit its revision is now (one ``repo_info``; rows read once per commit)."""
        from huggingface_hub import HfApi

        from fisherhub.hub.errors import hub_errors

        with hub_errors(f"datasets/{self.ref.repo_id}"):
            commit = (
                HfApi(token=self.token).repo_info(self.ref.repo_id, repo_type="dataset", revision=self.ref.revision).sha
            )
        if commit is None:
            raise InputError(f"datasets/{self.ref.repo_id}: the Hub names no commit of it")
        return self.at(commit)

    def at(self, commit: str) -> IndexBrowser:
        """The index at ``commit`` (read on first use)."""
        with self.lock:
            if commit not in self.browsers:
                self.browsers[commit] = IndexBrowser.open(f"datasets/{self.ref.repo_id}@{commit}", self.token)
                for old in list(self.browsers)[:-KEPT_COMMITS]:
                    del self.browsers[old]
            return self.browsers[commit]


def _filters(base_model: str, words: list[str] | None, license_: str, search: str) -> Filters:
    return Filters(
        "" if base_model in (None, ANY) else base_model,
        tuple(words or ()),
        "" if license_ in (None, ANY) else license_,
        search or "",
    )


class IndexPage:
    """The page's handlers over one index: every event's outputs from the commit, rows and page a session shows."""

    def __init__(self, index: str, token: str | None, page_size: int):
        self.gr = gradio()
        self.index, self.page_size = index, page_size
        self.cache = BrowserCache(index, token)

    def table_update(self, browser: IndexBrowser, indices: list[int], page: int) -> tuple[Any, str]:
        shown = indices[page * self.page_size : (page + 1) * self.page_size]
        rows = browser.table(shown)
        return (
            self.gr.update(value=rows or [["—"] * len(IndexBrowser.COLUMNS)]),
            index_view.status(len(indices), len(browser.rows), page, self.page_size),
        )

    def first_view(self, browser: IndexBrowser) -> dict[str, Any]:
        """What a visitor sees first: every row, no filter, the first page, the heatmap of the rows (by output)."""
        gr = self.gr
        choices, indices = browser.choices(), browser.select(Filters())
        table, line = self.table_update(browser, indices, 0)
        return {
            "header": browser.summary(),
            "commit": browser.loaded.commit,
            "indices": indices,
            "page": 0,
            "base_model": gr.update(choices=[ANY, *choices["base_model"]], value=ANY),
            "words": gr.update(choices=choices["task_words"], value=[]),
            "license": gr.update(choices=[ANY, *choices["license"]], value=ANY),
            "table": table,
            "line": line,
            "plot": browser.figure(indices),
        }

    def initial_view(self) -> dict[str, Any]:
        """The first view, read when the page is built so that no visitor waits for it (empty: unreadable now, and
        the page says why when it opens)."""
        with contextlib.suppress(FisherHubError):
            return self.first_view(self.cache.current())
        return {}

    def open_page(self, seen: str | None):
        """A visit: the first view again only when the index is at another commit than the page shows."""
        gr = self.gr
        try:
            browser = self.cache.current()
        except FisherHubError as exc:
            message = index_view.problem(f"cannot read the index {self.index}: {exc}")
            return message, None, [], 0, *[gr.skip()] * 4, "", None
        if browser.loaded.commit == seen:
            return tuple(gr.skip() for _ in range(10))
        return tuple(self.first_view(browser).values())

    def filter_rows(self, commit, base_model, words, license_, search):
        if commit is None:
            return [], 0, self.gr.update(), ""
        browser = self.cache.at(commit)
        indices = browser.select(_filters(base_model, words, license_, search))
        return indices, 0, *self.table_update(browser, indices, 0)

    def turn(self, commit, indices, page, step):
        if commit is None:
            return page, self.gr.update(), ""
        browser = self.cache.at(commit)
        page = min(max(page + step, 0), index_view.pages(len(indices), self.page_size) - 1)
        return page, *self.table_update(browser, indices, page)

    def code(self, text: str):
        """A snippet box: shown with ``text``, hidden without."""
        return self.gr.update(value=text, visible=bool(text))

    def heatmap(self, commit, indices):
        return None if commit is None else self.cache.at(commit).figure(indices)

    def choose_row(self, commit, indices, page, event):
        gr = self.gr
        if commit is None or event.index is None:
            return gr.update(), gr.update()
        position = page * self.page_size + int(event.index[0])
        if position >= len(indices):
            return gr.update(), gr.update()
        browser, row = self.cache.at(commit), indices[position]
        try:
            details = index_view.row_details(browser, browser.neighbours(row))
        except FisherHubError as exc:
            details = index_view.problem(f"the neighbours of {browser.row_name(row)} cannot be computed: {exc}")
        return details, self.code(index_view.row_snippet(browser, row))

    def rank_upload(self, commit, upload):
        if commit is None or upload is None:
            return "", self.code("")
        browser, shown_as = self.cache.at(commit), Path(upload).name
        try:
            selection = browser.rank_target(upload, shown_as)
        except FisherHubError as exc:
            return index_view.problem(str(exc)), self.code("")
        target = next(iter(selection.targets.values()))
        return index_view.ranking(selection, target, shown_as), self.code(index_view.target_snippet(browser, selection))


def _shown(initial: dict[str, Any], name: str, default: Any = None) -> Any:
    """The first view's value of one output (an update's ``value``), else ``default``."""
    value = initial.get(name, default)
    return value.get("value", default) if isinstance(value, dict) else value


def _offered(initial: dict[str, Any], name: str, default: list[str]) -> list[str]:
    """The first view's choices of one filter, else ``default``."""
    return initial[name]["choices"] if name in initial else default


def _filter_controls(gr, initial: dict[str, Any]) -> list[Any]:
    """The base-model, task-words and license dropdowns and the search box, in one row."""
    with gr.Row():
        return [
            gr.Dropdown(
                _offered(initial, "base_model", [ANY]), value=ANY, label="Base model", elem_id="base-model", scale=2
            ),
            gr.Dropdown(
                _offered(initial, "words", []),
                value=[],
                multiselect=True,
                label="Task words",
                elem_id="task-words",
                scale=3,
            ),
            gr.Dropdown(_offered(initial, "license", [ANY]), value=ANY, label="License", elem_id="license", scale=1),
            gr.Textbox(label="Search", placeholder="repo or dataset name", elem_id="search", scale=2),
        ]


def _rows_table(gr, initial: dict[str, Any]):
    return gr.Dataframe(
        _shown(initial, "table"),
        headers=list(IndexBrowser.COLUMNS),
        datatype=["markdown", *["str"] * (len(IndexBrowser.COLUMNS) - 1)],
        interactive=False,
        wrap=True,
        max_height=380,
        column_widths=["18%", "8%", "12%", "15%", "7%", "11%", "7%", "9%", "13%"],
        elem_id="rows",
    )


def _tabs(gr, initial: dict[str, Any]) -> dict[str, Any]:
    """The chosen row's details, the heatmap and the target upload, as tabs (their components by name)."""
    parts: dict[str, Any] = {}
    with gr.Tabs():
        with gr.Tab("Chosen row", id="row"):
            parts["details"] = gr.Markdown(
                "Click a row of the table to see its nearest neighbours.", elem_id="row-details"
            )
            parts["snippet"] = gr.Code(
                language="python", label="Use it", interactive=False, visible=False, elem_id="row-snippet"
            )
        with gr.Tab("Heatmap of A", id="heatmap"):
            parts["plot"] = gr.Plot(
                _shown(initial, "plot"), label="A among the rows shown with the most tokens", elem_id="heatmap"
            )
        with gr.Tab("Rank your target", id="target"):
            gr.Markdown(
                "Upload the signature of your own data (`fisherhub sketch --dataset ... --model "
                "BASE_MODEL --output my-target.safetensors`): every row of the index is ranked for it, as "
                "`select_adapter(target, index=...)` ranks it."
            )
            parts["upload"] = gr.File(
                label="Target signature (.safetensors)", file_types=[".safetensors"], elem_id="target-upload"
            )
            parts["ranked"] = gr.Markdown(elem_id="target-ranking")
            parts["ranked_snippet"] = gr.Code(
                language="python", label="Use it", interactive=False, visible=False, elem_id="target-snippet"
            )
    return parts


def build_index_app(index: str, *, token: str | None = None, page_size: int = index_view.PAGE_SIZE) -> gr.Blocks:
    """The page for the index ``index`` (``datasets/org/name[@rev]``), read from the Hub ``HF_ENDPOINT`` names."""
    handlers = IndexPage(index, token, page_size)
    gr, initial = handlers.gr, handlers.initial_view()
    with gr.Blocks(title=f"Fisher signatures: {index}", analytics_enabled=False) as demo:
        header = gr.Markdown(
            _shown(initial, "header", f"## Fisher signature index {index}\n\nreading the index…"), elem_id="header"
        )
        commit, indices, page = gr.State(initial.get("commit")), gr.State(initial.get("indices", [])), gr.State(0)
        filters = _filter_controls(gr, initial)
        with gr.Row(equal_height=True):
            line = gr.Markdown(_shown(initial, "line", ""), elem_id="status")
            previous = gr.Button("◀ previous", size="sm", elem_id="previous", scale=0)
            following = gr.Button("next ▶", size="sm", elem_id="next", scale=0)
        table = _rows_table(gr, initial)
        parts = _tabs(gr, initial)
        _wire(handlers, demo, [commit, indices, page], filters, (line, previous, following, table), header, parts)
    return demo


def _wire(handlers: IndexPage, demo, states: list[Any], filters: list[Any], pager, header, parts) -> None:
    """Connect the page's events to ``handlers``."""
    gr = handlers.gr
    commit, indices, page = states
    line, previous, following, table = pager
    views = [header, commit, indices, page, *filters[:3], table, line, parts["plot"]]
    rows_out = [indices, page, table, line]
    demo.load(handlers.open_page, commit, views)
    for control in filters[:3]:
        control.input(handlers.filter_rows, [commit, *filters], rows_out).then(
            handlers.heatmap, [commit, indices], parts["plot"]
        )
    filters[3].change(handlers.filter_rows, [commit, *filters], rows_out, trigger_mode="always_last").then(
        handlers.heatmap, [commit, indices], parts["plot"]
    )
    previous.click(lambda c, i, p: handlers.turn(c, i, p, -1), states, [page, table, line])
    following.click(lambda c, i, p: handlers.turn(c, i, p, 1), states, [page, table, line])

    def choose_row(commit, indices, page, event):
        return handlers.choose_row(commit, indices, page, event)

    choose_row.__annotations__ = {"event": gr.SelectData}  # Gradio passes the click to the parameter so annotated
    table.select(choose_row, states, [parts["details"], parts["snippet"]])
    upload, out = parts["upload"], [parts["ranked"], parts["ranked_snippet"]]
    upload.upload(handlers.rank_upload, [commit, upload], out)
    upload.clear(lambda: ("", handlers.code("")), None, out)
