"""The index Space's text: a row's details and neighbours, a target's ranking, the snippets, the table's status
line, as Markdown (every repo-published text escaped, ``space.text``) and Python. No Gradio here."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from fisherhub.core.geometry import GEOMETRIES
from fisherhub.space.text import escape, hub_url, link, markdown_table, with_error

if TYPE_CHECKING:
    from fisherhub.core.alignment import AlignmentResult
    from fisherhub.core.signature import Signature
    from fisherhub.selection.results import Selection
    from fisherhub.space.browse import IndexBrowser, Neighbourhood

#: a Hub repo id (``org/name``): a row's dataset is linked only when it is one
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")
#: rows of the table per page
PAGE_SIZE = 50
#: what the target's file is called in the snippets
TARGET_FILE = "my-target.safetensors"
_SYMBOLS = [GEOMETRIES[name].symbol for name in ("fisher", "activation", "error", "coupling")]


def decomposition(result: AlignmentResult) -> list[str]:
    """A, S_a, S_e and ρ, each ± its standard error (ρ — where undefined)."""
    return [
        with_error(result.fisher, result.stderr),
        with_error(result.activation, result.activation_stderr),
        with_error(result.error, result.error_stderr),
        with_error(result.coupling, result.coupling_stderr),
    ]


def pages(count: int, size: int = PAGE_SIZE) -> int:
    return max(1, math.ceil(count / size))


def status(shown: int, total: int, page: int, size: int = PAGE_SIZE) -> str:
    """``rows 1–50 of 1,234 shown (10,000 in the index), page 1 of 25``."""
    if not shown:
        return f"no row of the {total:,} in the index matches the filters"
    first, last = page * size + 1, min(shown, (page + 1) * size)
    return (
        f"rows {first:,}–{last:,} of {shown:,} shown ({total:,} in the index), page {page + 1} of {pages(shown, size)}; "
        "click a row for its nearest neighbours"
    )


def _row_link(browser: IndexBrowser, i: int) -> str:
    view = browser.views[i]
    return link(browser.row_name(i), hub_url(view.repo_type, view.repo_id, view.commit))


def row_details(browser: IndexBrowser, neighbourhood: Neighbourhood) -> str:
    """The chosen row (links to its repo, signature file and dataset on the Hub; what the table says of it)
    and its nearest neighbours with A ± se, the decomposition and the verdict."""
    i = neighbourhood.row
    view, ref = browser.views[i], browser.rows.file_ref(i)
    dataset = browser.rows.rows[i].get("dataset")
    links = [
        link(f"{view.kind} {view.repo_id}", hub_url(view.repo_type, view.repo_id, view.commit)),
        link("signature file", hub_url(ref.repo_type, ref.repo_id, ref.revision, ref.path)),
    ]
    if dataset and HUB_ID.fullmatch(dataset):
        revision = browser.rows.rows[i].get("dataset_revision")
        links.append(link(f"dataset {dataset}", hub_url("dataset", dataset, revision)))
    facts = (
        f"{view.tokens:,} tokens in {view.documents:,} documents; signature: {escape(view.source)}, "
        f"{'verified by the indexer' if view.verified else 'not verified'}; license: {escape(view.license)}"
    )
    flags = "".join(f"\n- ⚠ {escape(flag)}" for flag in view.flags)
    out = [f"### {escape(browser.row_name(i))}", " · ".join(links), "", facts + flags, ""]
    if not neighbourhood.neighbours:
        out.append("No other row of the index can be compared with this one.")
    else:
        rows = [
            [
                str(rank),
                _row_link(browser, neighbourhood.rows[n.name]),
                *decomposition(n.alignment),
                escape(n.alignment.doubt or n.alignment.noise or "—"),
            ]
            for rank, n in enumerate(neighbourhood.neighbours, start=1)
        ]
        out += [
            f"**Nearest neighbours** (by A; the {len(neighbourhood.rows)} rows nearest by the index's sketches, "
            "ranked from their own files):",
            "",
            markdown_table(["#", "neighbour", *_SYMBOLS, "not to be trusted"], rows),
        ]
        if neighbourhood.verdict is not None:
            out += ["", f"**Verdict** for this row's data: {escape(neighbourhood.verdict.message)}"]
    if neighbourhood.unreadable:
        out += ["", f"{len(neighbourhood.unreadable)} shortlisted row(s) could not be read:"]
        out += [f"- {escape(name)}: {escape(reason)}" for name, reason in neighbourhood.unreadable]
    return "\n".join(out)


def row_snippet(browser: IndexBrowser, i: int) -> str:
    """Python that loads the chosen row's adapter at the row's commit (``PeftModel.from_pretrained``), or its
    dataset, and ranks every row for one's own data (``select_adapter``)."""
    view = browser.views[i]
    rank = [
        "import fisherhub as fh",
        "",
        "# every adapter of the index ranked for your data (a signature made with `fisherhub sketch`):",
        f"selection = fh.select_adapter({TARGET_FILE!r}, index={browser.name!r})",
        "print(selection)",
    ]
    if view.repo_type != "model":
        return "\n".join(
            [
                "import datasets",
                "",
                f"data = datasets.load_dataset({view.repo_id!r}, revision={view.commit!r})",
                "",
                *rank,
            ]
        )
    return "\n".join(
        [
            "from peft import PeftModel",
            "from transformers import AutoModelForCausalLM",
            "",
            f"base = AutoModelForCausalLM.from_pretrained({browser.base_model!r})",
            f"model = PeftModel.from_pretrained(base, {view.repo_id!r}, revision={view.commit!r})",
            "",
            *rank,
        ]
    )


def _candidate_link(candidate: str) -> str:
    """A ranked candidate (``org/name@commit``, ``datasets/org/name@commit``) as a link to the repo at that commit."""
    from fisherhub.hub.refs import SignatureRef

    ref = SignatureRef.parse(candidate)
    if ref is None:
        return escape(candidate)
    return link(
        ref.repo_id if ref.repo_type == "model" else ref.repo, hub_url(ref.repo_type, ref.repo_id, ref.revision)
    )


def target_line(target: Signature, shown_as: str) -> str:
    return (
        f"Target **{escape(shown_as)}**: {target.num_tokens:,} tokens in {target.num_documents:,} documents under "
        f"{escape(target.metadata.get('base_model', ''))}, sketch id {escape(target.sketch_id)}."
    )


def ranking(selection: Selection, target: Signature, shown_as: str) -> str:
    """The target's ranking as ``select_adapter`` gives it: each candidate's score ± se, A, S_a, S_e and ρ ± se,
    where its signature comes from, why it is not to be trusted (ranked last); then the verdict's words, what
    ``auto`` ranked by and why, and the candidates left out."""
    from fisherhub.core.geometry import label
    from fisherhub.selection.report import auto_explanation, short_commits

    rows = [
        [
            f"{rank} ⚠" if row.doubt else str(rank),
            _candidate_link(row.candidate),
            with_error(row.score, row.stderr),
            *decomposition(row.alignment),
            escape(short_commits(row.provenance)),
            escape(row.doubt or "—"),
        ]
        for rank, row in enumerate(selection.ranking, start=1)
    ]
    out = [
        target_line(target, shown_as),
        "",
        markdown_table(
            ["#", "candidate", f"score: {label(selection.score)}", *_SYMBOLS, "provenance", "not to be trusted"], rows
        ),
        "",
    ]
    if selection.verdict is not None:
        out.append(f"**Verdict**: {escape(short_commits(selection.verdict.message))}")
    if selection.choice is not None:
        out += ["", escape(auto_explanation(selection.choice, selection.score))]
    if selection.skipped:
        out += ["", f"{len(selection.skipped)} candidate(s) left out:"]
        out += [f"- {escape(s.candidate)}: {escape(s.reason)}" for s in selection.skipped[:20]]
    return "\n".join(out)


def target_snippet(browser: IndexBrowser, selection: Selection) -> str:
    """Python that gives this ranking again and loads its best adapter."""
    best = selection.best
    lines = [
        "import fisherhub as fh",
        "",
        f"selection = fh.select_adapter({TARGET_FILE!r}, index={browser.name!r})",
        "print(selection)  # the table above, with its verdict",
    ]
    if best.adapter is not None:
        lines += [f"model = selection.load()  # {best.candidate.split('@')[0]} on {browser.base_model} (a PeftModel)"]
    return "\n".join(lines)


def problem(message: str) -> str:
    """A message for the person who uploaded, in place of a ranking."""
    return f"⚠ **{escape(message)}**"
