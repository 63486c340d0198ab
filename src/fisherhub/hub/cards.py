"""Repo cards (README.md) that list signatures: the YAML ``fisher_signatures:`` block and the human section,
both rendered from the repo's listing (``fisherhub.hub.listing``) with the templates in ``hub_cards/`` (SPEC §4).
Everything that comes from signature metadata is escaped on its way into the card body. Every card we read
goes through ``parse_card`` (its file through ``card_text``): at most ``MAX_CARD_BYTES``, its YAML header
read by the bounded reader (``core.bounded.read_parsed``) before a card class parses it."""

from __future__ import annotations

import html
import importlib.resources
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import yaml
from huggingface_hub import DatasetCard, HfUri, ModelCard, RepoCard, SpaceCard, hf_hub_download
from huggingface_hub.errors import HfUriError

from fisherhub.core.bounded import read_file, read_parsed
from fisherhub.core.errors import FisherHubError
from fisherhub.hub.errors import CardError, hub_errors
from fisherhub.hub.listing import ENTRY_KEYS, check_entries, distinguishing_choice
from fisherhub.hub.refs import SignatureRef

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:  # Python 3.10 has it in importlib.abc only
        from importlib.abc import Traversable

CARD_NAME = "README.md"
CARD_KEY = "fisher_signatures"
#: card tag of every repo that carries signatures (lets discovery filter on the Hub's side)
SIGNATURE_TAG = "fisher-signatures"
SECTION_BEGIN = "<!-- fisherhub:signatures:begin (generated from .fisher_signatures/index.json) -->"
SECTION_END = "<!-- fisherhub:signatures:end -->"
_MARKERS = re.compile(r"<!-- fisherhub:signatures:(?:begin|end)\b[^>]*-->\n?")
_SECTION = re.compile(r"<!-- fisherhub:signatures:begin\b[^>]*-->.*?<!-- fisherhub:signatures:end -->\n*", re.S)
SECTION_TEMPLATES = {"dataset": "dataset_section.md", "model": "adapter_section.md"}
#: the card class of each repo type (its card data: ``ModelCardData``, ``DatasetCardData``, ``SpaceCardData``)
CARD_CLASSES: dict[str, type[RepoCard]] = {"model": ModelCard, "dataset": DatasetCard, "space": SpaceCard}
#: a card's YAML header (group 1) between its ``---`` lines, delimited as the card classes delimit it
_HEADER = re.compile(r"^\s*---(?:\r\n|\r|\n)([\S\s]*?)(?:\r\n|\r|\n)---[ \t]*(?:\r\n|\n|$)")
#: a README.md we read (YAML header and Markdown body); the Hub's longest cards are some 100 kB
MAX_CARD_BYTES = 4 * 2**20
_MARKDOWN_SPECIALS = re.compile(r"([\\`*_\[\]()|~])")  # what forms emphasis, code, links, cells mid-line
_FILE_PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)*")


def markdown_text(value: Any) -> str:
    """``value`` as inert Markdown text: one line, Markdown punctuation backslash-escaped, HTML escaped (no
    tags, links, table cells or comment markers can come out of it)."""
    text = " ".join(str(value).split())
    return html.escape(_MARKDOWN_SPECIALS.sub(r"\\\1", text), quote=True)


def _is_repo_id(value: Any) -> bool:
    """Whether ``value`` is a Hub id ``org/name`` (what a card may link to or name as ``base_model``)."""
    try:
        HfUri("model", str(value))
    except HfUriError:
        return False
    return True


def hub_link(value: Any) -> str:
    """A link to a Hub repo id's page, or the escaped text when ``value`` is no repo id."""
    return f"[{markdown_text(value)}](/{value})" if _is_repo_id(value) else markdown_text(value)


def code(value: Any) -> str:
    """``value`` as inline code when it is a plain name (letters, digits, ``._-``), else as escaped text."""
    return f"`{value}`" if re.fullmatch(r"[\w.-]+", str(value)) else markdown_text(value)


def dataset_link(value: Any) -> str:
    """A link to a Hub dataset's page, or the escaped text when ``value`` is no repo id."""
    return f"[{markdown_text(value)}](/datasets/{value})" if _is_repo_id(value) else markdown_text(value)


def file_link(path: Any) -> str:
    """A link to a file of this repo (its name as text), or the escaped text for any other path."""
    path = str(path)
    safe = _FILE_PATH.fullmatch(path) and ".." not in path.split("/")
    return f"[{code(path.rsplit('/', 1)[-1])}]({path})" if safe else markdown_text(path)


def count(value: Any) -> str:
    """An integer with thousands separators; anything else escaped (None: empty)."""
    return "" if value is None else f"{value:,}" if isinstance(value, int) else markdown_text(value)


def python_string(value: Any) -> str:
    """A Python string literal for ``value`` (one line: it cannot close the code block it is in)."""
    return json.dumps(str(value))


def template_folder() -> Traversable:
    """The card templates: ``fisherhub/hub_cards`` when installed as package data, else ``hub_cards/`` of
    the source checkout this module is in."""
    packaged = importlib.resources.files("fisherhub").joinpath("hub_cards")
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[3] / "hub_cards"


_TEMPLATES = jinja2.Environment(
    loader=jinja2.FunctionLoader(lambda name: template_folder().joinpath(name).read_text(encoding="utf-8")),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
_TEMPLATES.filters.update(
    md=markdown_text,
    code=code,
    count=count,
    hub_link=hub_link,
    dataset_link=dataset_link,
    file_link=file_link,
    py=python_string,
)


def signature_entries(card_data: Any, where: str) -> list[dict[str, Any]]:
    """The ``fisher_signatures`` entries of card metadata (a dict or ``CardData``; None: no card)."""
    return check_entries(
        card_data.get(CARD_KEY) if card_data is not None else None, where, f"the card's `{CARD_KEY}` block"
    )


def _safe_yaml(text: str) -> Any:
    return yaml.load(text, Loader=yaml.SafeLoader)  # pure Python: a deep document ends in RecursionError


def card_text(file: str | Path, where: str) -> str:
    """The text of the card file ``file`` (of the repo or folder ``where``); ``CardError`` unread when it is larger
    than ``MAX_CARD_BYTES`` or not UTF-8."""
    data = read_file(file, f"{where}: {CARD_NAME}", max_bytes=MAX_CARD_BYTES, error=CardError)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CardError(f"{where}: {CARD_NAME} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def parse_card(text: str, where: str, repo_type: str) -> RepoCard:
    """``text`` (a README.md of the ``repo_type`` repo or folder ``where``) as that type's card class, its YAML
    header read first by ``read_parsed`` (at most ``MAX_CARD_BYTES``, ``MAX_DEPTH`` deep, no more values than
    bytes once its aliases are expanded); ``CardError`` naming ``where`` when the header is malformed."""
    match = _HEADER.match(text)
    try:
        if match:
            read_parsed(
                match.group(1),
                "the header",
                _safe_yaml,
                max_bytes=MAX_CARD_BYTES,
                parse_errors=(yaml.YAMLError,),
                what="YAML",
                error=CardError,
            )
        return CARD_CLASSES[repo_type](text)
    except (CardError, yaml.YAMLError, ValueError) as exc:  # the card classes raise ValueError on a bad header
        reason = " ".join(str(exc).split())[:300]
        raise CardError(f"{where}: {CARD_NAME} has a malformed YAML header ({reason})") from exc


def download_card(repo: SignatureRef, token: str | None = None) -> tuple[str, str]:
    """(README.md text, the commit id it was read at) of ``repo`` at its revision, through the local cache
    (so it works offline for what was fetched before); ``card_text``'s bound."""
    with hub_errors(str(repo), CARD_NAME):
        local = hf_hub_download(repo.repo_id, CARD_NAME, repo_type=repo.repo_type, revision=repo.revision, token=token)
    return card_text(local, str(repo)), Path(local).parent.name  # the cache keeps files under snapshots/<commit id>/


def read_card(text: str | None, where: str, repo_type: str, *, repair: bool = False) -> RepoCard:
    """The card of a ``repo_type`` repo to edit (None: a new one), as that type's card class. A card whose YAML
    header (including a model card's ``model-index``) or signature block is malformed is refused with
    ``CardError``, or with ``repair`` rebuilt: the body is kept, the header is rewritten with the keys that could
    be read, and the old header is kept verbatim in a collapsed block at the top of the body."""
    card_class = CARD_CLASSES[repo_type]
    if text is None:
        return card_class(f"---\n{CARD_KEY}: []\n---\n")
    try:
        card = parse_card(text, where, repo_type)
        signature_entries(card.data, where)
        return card
    except CardError as exc:
        if not repair:
            raise CardError(
                f"{exc}; nothing was changed. Fix the header, or push with repair_card=True (--repair-card), which "
                "rewrites only the header and keeps the body (and the old header, in a collapsed block)"
            ) from exc
    match = _HEADER.match(text)
    assert match is not None  # the card classes only fail on a header they found
    header, body = match.group(1), text[match.end() :]
    try:
        readable = read_parsed(
            header, "the header", _safe_yaml, max_bytes=MAX_CARD_BYTES, parse_errors=(yaml.YAMLError,), what="YAML"
        )
    except FisherHubError:
        readable = None
    kept = {k: v for k, v in readable.items() if k != CARD_KEY} if isinstance(readable, dict) else {}
    try:
        data = card_class.card_data_class(**{**kept, CARD_KEY: []})
    except ValueError:  # a model-index ModelCardData cannot parse: it stays in the old header only
        data = card_class.card_data_class(**{**{k: v for k, v in kept.items() if k != "model-index"}, CARD_KEY: []})
    old_header = (
        "<details><summary>Card metadata replaced by fisherhub (it was malformed)</summary>\n\n"
        f"```yaml\n{header}\n```\n\n</details>\n\n"
    )
    return card_class(f"---\n{data.to_yaml()}\n---\n{old_header}{body}")


def render_section(entries: list[dict[str, Any]], repo_type: str, name: str, index: str | None = None) -> str:
    """The human section for ``entries`` from ``repo_type``'s template in ``hub_cards/``; every value that
    comes from metadata goes through the escaping filters (``md``, ``code``, ``count``, ``hub_link``,
    ``dataset_link``, ``file_link``, ``py``). ``index``: the signature index dataset (``org/name``) the repo is
    in, linked from the section."""
    rows = [{**dict.fromkeys(ENTRY_KEYS), **entry} for entry in entries]
    example_ref, example_choice = _example(entries, name)
    return _TEMPLATES.get_template(SECTION_TEMPLATES[repo_type]).render(
        signatures=rows, repo=name, example_ref=example_ref, example_choice=example_choice, index=index
    )


def _example(entries: list[dict[str, Any]], name: str) -> tuple[str, list[tuple[str, str]]]:
    """The reference and keywords of the card's ``load_signature`` example: the first signature of a Hub base
    model (else the first), by its base model and whatever else tells it apart from the others
    (``listing.distinguishing_choice``), else by its path; it loads that one signature, however many the repo has."""
    if not entries:
        return name, []
    entry = next((e for e in entries if _is_repo_id(e.get("base_model"))), entries[0])
    given = {"base_model": str(entry["base_model"])} if _is_repo_id(entry.get("base_model")) else {}
    extra = distinguishing_choice(entry, entries, given)
    if extra is None:
        return f"{name}:{entry['path']}", []
    return name, [*given.items(), *extra.items()]


def _with_section(body: str, section: str) -> str:
    """``body`` with exactly one generated section: in place of the first one it has (every other one and any
    stray marker removed), or appended when it has none."""
    block = f"{SECTION_BEGIN}\n{section.strip()}\n{SECTION_END}\n"
    first = _SECTION.search(body)
    if first is None:
        body = _MARKERS.sub("", body)
        return f"{body.rstrip()}\n\n{block}" if body.strip() else f"\n{block}"
    before, after = _MARKERS.sub("", body[: first.start()]), _MARKERS.sub("", _SECTION.sub("", body[first.end() :]))
    return before + block + after


def set_entries(
    card: RepoCard,
    entries: list[dict[str, Any]],
    repo_type: str,
    name: str,
    adapter_of: str | None = None,
    index: str | None = None,
) -> None:
    """Make the card list ``entries`` (the index's): its YAML block, the signature tag and the human section
    (for a ``repo_type`` repo that ``load_signature(name)`` reads).
    ``adapter_of``: the base model of an adapter repo, written as ``base_model`` with ``library_name: peft``
    where the card has none (so the Hub's ``base_model:adapter:`` filter finds the repo), and the Hub datasets
    its signatures name as ``datasets:`` where the card names none (what it was trained on).
    ``index``: the signature index dataset (``org/name``) the section links to."""
    card.data[CARD_KEY] = entries
    tags = card.data.get("tags") or []
    tags = [tags] if isinstance(tags, str) else list(tags)
    card.data["tags"] = tags if SIGNATURE_TAG in tags else [*tags, SIGNATURE_TAG]
    if adapter_of is not None and _is_repo_id(adapter_of):
        if not card.data.get("base_model"):
            card.data["base_model"] = adapter_of
        if not card.data.get("library_name"):
            card.data["library_name"] = "peft"
        trained_on = sorted(
            {e["dataset"] for e in entries if "/" in str(e.get("dataset", "")) and _is_repo_id(e["dataset"])}
        )
        if trained_on and not card.data.get("datasets"):
            card.data["datasets"] = trained_on
    card.text = _with_section(card.text, render_section(entries, repo_type, name, index))
