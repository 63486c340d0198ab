"""Repo cards (README.md) that list signatures: the YAML ``fisher_signatures:`` block and the human section
rendered from the templates in ``hub_cards/`` (SPEC §4)."""

from __future__ import annotations

import importlib.resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import jinja2
import yaml
from huggingface_hub import RepoCard, hf_hub_download
from huggingface_hub.repocard import REGEX_YAML_BLOCK
from huggingface_hub.utils import yaml_dump

from fisherhub.core.signature import Signature
from fisherhub.hub.errors import CardError, hub_errors
from fisherhub.hub.refs import SignatureRef

CARD_NAME = "README.md"
CARD_KEY = "fisher_signatures"
#: card tag of every repo that carries signatures (lets discovery filter on the Hub's side)
SIGNATURE_TAG = "fisher-signatures"
ENTRY_KEYS = ("path", "base_model", "sketch_id", "tokens", "documents", "dataset", "dataset_config", "dataset_split")
SECTION_BEGIN = "<!-- fisherhub:signatures:begin (generated from the fisher_signatures block) -->"
SECTION_END = "<!-- fisherhub:signatures:end -->"
SECTION_TEMPLATES = {"dataset": "dataset_section.md", "model": "adapter_section.md"}


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


def card_entry(signature: Signature, path: str) -> dict[str, Any]:
    """The YAML entry for a signature file: path, base model, sketch id, token and document counts, dataset."""
    metadata = signature.metadata
    entry = {
        "path": path,
        "base_model": metadata.get("base_model"),
        "sketch_id": signature.sketch_id,
        "tokens": signature.num_tokens,
        "documents": signature.num_documents,
        **{key: metadata.get(key) for key in ("dataset", "dataset_config", "dataset_split")},
    }
    return {key: value for key, value in entry.items() if value not in (None, "")}


def signature_entries(card_data: Any, where: str) -> list[dict[str, Any]]:
    """The ``fisher_signatures`` entries of card metadata (a dict or ``CardData``; None: no card)."""
    value = card_data.get(CARD_KEY) if card_data is not None else None
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(e, dict) and isinstance(e.get("path"), str) for e in value):
        raise CardError(f"{where}: the card's `{CARD_KEY}` block must be a list of mappings with a `path`, got {value!r:.200}")
    return [dict(entry) for entry in value]


def entry_matches(entry: dict[str, Any], base_model: str | None, sketch_id: str | None) -> bool:
    return (base_model is None or entry.get("base_model") == base_model) and (
        sketch_id is None or entry.get("sketch_id") == sketch_id
    )


def download_card(repo: SignatureRef, token: str | None = None) -> tuple[str, str]:
    """(README.md text, the commit id it was read at) of ``repo`` at its revision, through the local cache
    (so it works offline for what was fetched before)."""
    with hub_errors(str(repo), CARD_NAME):
        local = hf_hub_download(repo.repo_id, CARD_NAME, repo_type=repo.repo_type, revision=repo.revision, token=token)
    with open(local, encoding="utf-8-sig", newline="") as handle:
        return handle.read(), Path(local).parent.name  # the cache keeps files under snapshots/<commit id>/


def read_card(text: str | None, where: str, *, repair: bool = False) -> RepoCard:
    """The card to edit (None: a new one). A card whose YAML header or signature block is malformed is refused
    with ``CardError``, or with ``repair`` rebuilt: the body is kept, the header is rewritten with the keys that
    could be read, and the old header is kept verbatim in a collapsed block at the top of the body."""
    if text is None:
        return RepoCard(f"---\n{CARD_KEY}: []\n---\n")
    try:
        card = RepoCard(text)
        signature_entries(card.data, where)
        return card
    except (yaml.YAMLError, ValueError, CardError) as exc:  # RepoCard raises ValueError on a bad header
        if not repair:
            reason = " ".join(str(exc).split())[:300]
            raise CardError(
                f"{where}: README.md has a malformed YAML header ({reason}); nothing was changed. Fix the header, or "
                "push with repair_card=True (--repair-card), which rewrites only the header and keeps the body "
                "(and the old header, in a collapsed block)"
            ) from exc
    match = REGEX_YAML_BLOCK.search(text)  # RepoCard only fails on a header it found
    header, body = match.group(2), text[match.end() :]
    try:
        readable = yaml.safe_load(header)
    except yaml.YAMLError:
        readable = None
    kept = {k: v for k, v in readable.items() if k != CARD_KEY} if isinstance(readable, dict) else {}
    old_header = (
        "<details><summary>Card metadata replaced by fisherhub (it was malformed)</summary>\n\n"
        f"```yaml\n{header}\n```\n\n</details>\n\n"
    )
    return RepoCard(f"---\n{yaml_dump({**kept, CARD_KEY: []}, sort_keys=False)}---\n{old_header}{body}")


def render_section(entries: list[dict[str, Any]], repo: SignatureRef) -> str:
    """The human section for ``entries`` from the repo type's template in ``hub_cards/``."""
    rows = [{**dict.fromkeys(ENTRY_KEYS), **entry} for entry in entries]
    return _TEMPLATES.get_template(SECTION_TEMPLATES[repo.repo_type]).render(signatures=rows, repo=repo.repo)


def _with_section(body: str, section: str) -> str:
    """``body`` with the generated section replaced, or appended when it has none."""
    block = f"{SECTION_BEGIN}\n{section.strip()}\n{SECTION_END}\n"
    start, end = body.find(SECTION_BEGIN), body.find(SECTION_END)
    if 0 <= start < end:
        return body[:start] + block + body[end + len(SECTION_END) :].lstrip("\n")
    return f"{body.rstrip()}\n\n{block}" if body.strip() else f"\n{block}"


def add_entry(card: RepoCard, entry: dict[str, Any], repo: SignatureRef) -> None:
    """Put ``entry`` in the card's block (in place of the entry with the same path: signatures of other
    base models stay), tag the card, and re-render the human section from the whole block."""
    entries = signature_entries(card.data, str(repo))
    index = next((i for i, old in enumerate(entries) if old["path"] == entry["path"]), len(entries))
    entries[index : index + 1] = [entry]
    card.data[CARD_KEY] = entries
    tags = card.data.get("tags") or []
    tags = [tags] if isinstance(tags, str) else list(tags)
    card.data["tags"] = tags if SIGNATURE_TAG in tags else [*tags, SIGNATURE_TAG]
    card.text = _with_section(card.text, render_section(entries, repo))
