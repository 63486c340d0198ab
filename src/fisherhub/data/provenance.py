"""What a signature records about its data, as ``datasets`` resolved it: the Hub id with its org and the commit
the rows were read at (a map-style dataset from the Hub keeps them in its cache folder,
``<org>___<name>/<config>/<version>/<commit>/``; a streamed one is read at the commit its builder resolves), and
a local path as a path (published as its file name, never as a Hub id)."""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from fisherhub.core.registry import COMMIT_ID
from fisherhub.options import DataOptions

logger = logging.getLogger(__name__)
_HUB_CACHE_FOLDER = re.compile(r"(?:^|[\\/])([\w.-]+)___([\w.-]+)[\\/][^\\/]+[\\/][^\\/]+[\\/]([0-9a-f]{40})[\\/]")


def hub_origin(source: Any) -> tuple[str, str] | None:
    """(``org/name``, commit) of a map-style dataset loaded from the Hub, from its cache files; None otherwise
    (a local file, an in-memory or a streamed dataset)."""
    files = getattr(source, "cache_files", None) or []
    for file in files:
        match = _HUB_CACHE_FOLDER.search(str(file.get("filename", "")))
        if match:
            return f"{match.group(1)}/{match.group(2)}", match.group(3)
    return None


def streamed_hub_commit(args: DataOptions) -> str | None:
    """The commit a Hub dataset streamed by its id is read at: the one ``datasets`` resolves the id and revision
    to (``load_dataset_builder``, as ``load_dataset(streaming=True)`` does; the builder's hash, which also names the
    cache folder of the map-style path). None for anything else, or when it cannot be resolved (then logged: a
    finished run is never lost to it)."""
    if not args.streaming or not isinstance(args.dataset, (str, os.PathLike)) or os.path.exists(args.dataset):
        return None
    import datasets

    try:
        commit = datasets.load_dataset_builder(os.fspath(args.dataset), name=args.config, revision=args.revision).hash
    except (OSError, ValueError, ConnectionError) as exc:
        logger.warning("cannot resolve the commit of %s (%s): no dataset revision is recorded", args.dataset, exc)
        return None
    return commit if isinstance(commit, str) and COMMIT_ID.fullmatch(commit) else None


def dataset_provenance(args: DataOptions, source: Any) -> dict[str, str]:
    """``args.provenance()`` pinned to what was read: a ``Dataset`` loaded from the Hub named by its full id
    (``org/pets``, not ``pets``), the revision the commit its rows came from (of a stream by id: the commit the
    id resolves to, ``streamed_hub_commit``), and a dataset given as an
    existing local path recorded as that path (``data/train.jsonl`` is a file here, not the Hub dataset
    ``data/train.jsonl``), with the limits on documents and tokens that were set."""
    metadata = args.provenance()
    for key in ("max_documents", "max_tokens"):  # what a re-sketch needs to read the same rows
        if getattr(args, key, None) is not None:
            metadata[key] = str(getattr(args, key))
    if isinstance(args.dataset, (str, os.PathLike)) and os.path.exists(args.dataset):
        metadata["dataset"] = os.path.abspath(args.dataset)
    origin = hub_origin(source) or hub_origin(args.dataset)  # a map-style Dataset given to stream: its own files
    if origin is not None:
        repo_id, commit = origin
        if not isinstance(args.dataset, (str, os.PathLike)):
            metadata["dataset"] = repo_id
        metadata["dataset_revision"] = commit
    elif (streamed := streamed_hub_commit(args)) is not None:
        metadata["dataset_revision"] = streamed
    return metadata
