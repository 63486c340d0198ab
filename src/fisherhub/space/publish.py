"""The Spaces' files and how they get to the Hub: the index Space (``hub_cards/index_space/``: its card rendered
for one index, its app, its requirements, ``index_space.json`` naming the index) and the metric's Space
(``hub_cards/evaluate_space/`` as it is), each created or updated in one commit (``push_space``); and which index
a running index Space reads (``space_index``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fisherhub.core.errors import InputError

#: the Space variable that names the index (it overrides the settings file)
INDEX_VARIABLE = "FISHERHUB_INDEX"
#: the index Space's settings file: ``{"index": "datasets/org/name"}``
SETTINGS_FILE = "index_space.json"
INDEX_SPACE, METRIC_SPACE = "index_space", "evaluate_space"
CARD = "README.md"


def card_folder(name: str) -> Path:
    """``hub_cards/<name>/`` as installed with the package."""
    return Path(__file__).resolve().parent.parent / "hub_cards" / name


def space_index(folder: str | os.PathLike) -> str:
    """The index a Space reads: its variable ``FISHERHUB_INDEX``, else ``index_space.json`` in ``folder``."""
    if os.environ.get(INDEX_VARIABLE, "").strip():
        return os.environ[INDEX_VARIABLE].strip()
    settings = Path(folder) / SETTINGS_FILE
    try:
        index = json.loads(settings.read_text(encoding="utf-8")).get("index")
    except (OSError, ValueError, AttributeError) as exc:
        raise InputError(
            f"no index to show: set the Space variable {INDEX_VARIABLE} to datasets/ORG/NAME, or write "
            f"{SETTINGS_FILE} ({exc})"
        ) from exc
    if not isinstance(index, str) or not index.strip():
        raise InputError(f"{SETTINGS_FILE} names no index: write {{'index': 'datasets/ORG/NAME'}} into it")
    return index.strip()


def space_repo(name: str) -> str:
    """The repo id of ``spaces/ORG/NAME``; ``InputError`` for anything else."""
    from fisherhub.hub.refs import SignatureRef

    ref = SignatureRef.parse(name) if name.startswith("spaces/") else None
    if ref is None or ref.repo_type != "space" or ref.revision is not None or ref.path is not None:
        raise InputError(f"{name!r}: a Space is named spaces/ORG/NAME")
    return ref.repo_id


def _front_matter(text: str) -> tuple[dict[str, Any], str]:
    import yaml

    _, front, body = text.split("---\n", 2)
    return yaml.safe_load(front), body


def index_space_files(index: str, base_model: str) -> dict[str, bytes]:
    """The index Space's files for the index ``index`` (``datasets/org/name[@rev]``) of ``base_model``: the card (its
    ``datasets:`` links the Space to the index on the Hub), the app, the requirements, ``index_space.json``."""
    import jinja2
    import yaml

    from fisherhub.hub.signature_index import index_ref
    from fisherhub.space.text import escape, hub_url, link

    folder, ref = card_folder(INDEX_SPACE), index_ref(index)
    metadata, body = _front_matter((folder / CARD).read_text(encoding="utf-8"))
    metadata["datasets"] = [ref.repo_id]
    text = jinja2.Template(body, keep_trailing_newline=True).render(
        base_model=escape(base_model),
        index=ref.short(),
        index_link=link(ref.repo_id, hub_url("dataset", ref.repo_id, ref.revision)),
    )
    card = f"---\n{yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True)}---\n{text}"
    settings = json.dumps({"index": ref.short()}, indent=1) + "\n"
    return {
        CARD: card.encode(),
        "app.py": (folder / "app.py").read_bytes(),
        "requirements.txt": (folder / "requirements.txt").read_bytes(),
        SETTINGS_FILE: settings.encode(),
    }


def metric_space_files() -> dict[str, bytes]:
    """The metric's Space as ``hub_cards/evaluate_space/`` holds it: the metric card, the app, the
    requirements and the module ``fisher_alignment.py``."""
    folder = card_folder(METRIC_SPACE)
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


def push_space(
    space: str, files: dict[str, bytes], message: str, *, token: str | None = None, private: bool = False
) -> tuple[str, bool]:
    """Create the Gradio Space ``space`` (``spaces/ORG/NAME``) unless it exists, and commit ``files`` to it in one
    commit on the head it was read at; returns (the commit's URL, whether anything changed: a Space that already
    holds these files gets no commit)."""
    from huggingface_hub import CommitOperationAdd, HfApi

    from fisherhub.hub.errors import hub_errors

    repo_id, api = space_repo(space), HfApi(token=token)
    with hub_errors(space):
        api.create_repo(repo_id, repo_type="space", space_sdk="gradio", private=private, exist_ok=True)
        head = api.repo_info(repo_id, repo_type="space").sha
        info = api.create_commit(
            repo_id,
            repo_type="space",
            commit_message=message,
            operations=[CommitOperationAdd(path, data) for path, data in files.items()],
            parent_commit=head,
        )
    return info.commit_url, info.oid != head
