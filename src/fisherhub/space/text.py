"""What the Spaces write into their pages: text a repo published, escaped so that it shows as text (never as
Markdown, HTML or a link of its own), links to repos on the Hub the app reads (``HF_ENDPOINT``), and numbers
with their error bars."""

from __future__ import annotations

import re
from urllib.parse import quote

from fisherhub.safe_text import printable

#: what Markdown (and the HTML inside it) gives a meaning to: escaped with a backslash
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>&\"'=:])")
#: the web prefix of each repo type on the Hub
_WEB_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}


def escape(value: object) -> str:
    """``value`` as Markdown that shows it literally, on one line (control characters and line breaks become
    spaces)."""
    return _MARKDOWN.sub(r"\\\1", " ".join(printable(value).split()))


def endpoint() -> str:
    """The Hub the app reads (``HF_ENDPOINT``, as ``huggingface_hub`` resolved it)."""
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def hub_url(repo_type: str, repo_id: str, revision: str | None = None, path: str | None = None) -> str:
    """The web page of a repo (at ``revision``; of the file ``path`` in it) on ``endpoint()``: the Hub's own URL
    forms (``/datasets/org/name/blob/<rev>/<path>``)."""
    url = f"{endpoint()}/{_WEB_PREFIX[repo_type]}{quote(repo_id, safe='/')}"
    if path is not None:
        return f"{url}/blob/{quote(revision or 'main', safe='')}/{quote(path, safe='/')}"
    return url if revision is None else f"{url}/tree/{quote(revision, safe='')}"


def link(text: object, url: str) -> str:
    """A Markdown link showing ``text`` (escaped)."""
    return f"[{escape(text)}]({url})"


def with_error(value: float | None, stderr: float | None = None, digits: int = 3) -> str:
    """``0.352 ± 0.089``; ``—`` for an undefined value (a blank ρ)."""
    if value is None:
        return "—"
    return f"{value:.{digits}f}" if stderr is None else f"{value:.{digits}f} ± {stderr:.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of cells already escaped (or links)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
