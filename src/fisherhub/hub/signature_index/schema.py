"""The signature index's formats: one row per signature (``row_schema``, ``signature_row``: what ranking needs
without the file, the sketches of ``Layout.sketches`` as unit vectors μ̂/‖μ̂‖ in ``Layout.dtype``) and the state
file ``fisherhub_index.json`` (which repo was read at which commit, and what came of it). No numpy at import."""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from fisherhub.core.bounded import read_json
from fisherhub.core.errors import InputError
from fisherhub.core.registry import GENERATED_SOURCE, SKETCHES
from fisherhub.core.signature import Signature
from fisherhub.core.spec import SketchSpec
from fisherhub.hub.refs import SignatureRef
from fisherhub.safe_text import printable
from fisherhub.hub.signature_index.layout import Layout

if TYPE_CHECKING:
    pass


#: version of the row layout and state file; an index of another version is refused as a whole
INDEX_FORMAT = 1
#: the state file's version once updates appended shards (``deltas``): a fisherhub that reads only
#: ``INDEX_FORMAT`` refuses it, rather than take the rows those updates replaced for the index's
APPENDED_FORMAT = 2
INDEX_TAG = "fisher-signature-index"
STATE_PATH = "fisherhub_index.json"
STATE_KIND = "fisherhub-signature-index-state"
#: the state file's bound: it lists every repo read, ~150 bytes each (``read_json``)
MAX_STATE_BYTES = 64 * 2**20
DATA_DIR = "data"
SPLIT = "train"
#: an update's shard: ``<DELTA_PREFIX><the commit it updates, 12 hex>.parquet``, beside the build's shards (the card's
#: ``configs:`` glob takes both); the state file's ``deltas`` list them, oldest first, and a repo entry's ``shard``
#: names the one holding its rows (none: the build's)
DELTA_PREFIX = f"{DATA_DIR}/{SPLIT}-update-"
DELTA_NAME = re.compile(re.escape(DELTA_PREFIX) + r"[0-9a-f]{12}\.parquet")
#: how a row was obtained
OBTAINED = {
    "published": "published by the repo",
    "sketched": "sketched by the indexer from the card's datasets",
    "verified": "published by the repo and verified by the indexer",
    GENERATED_SOURCE: "sketched by the indexer from the adapter's generations (a fallback: no readable data named)",
}
_PROVENANCE = ("base_model", "base_model_revision", "dataset", "dataset_config", "dataset_split", "dataset_revision")
#: the adapter card's ``license`` and ``tags`` at the commit read (what a browser filters by); optional: an
#: index built before they were recorded has neither, and reads as null
CARD_COLUMNS = ("license", "tags")
#: at most this many card tags of at most this many characters are kept per row (a card is the publisher's text)
CARD_TAGS, CARD_TEXT = 64, 100


def row_schema():
    """The Arrow schema of a row (sketches absent from the layout are null)."""
    import pyarrow as pa

    text = pa.string()
    return pa.schema(
        [
            ("repo_id", text),
            ("repo_type", text),
            ("commit", text),
            ("path", text),
            ("obtained", text),
            ("sketch_id", text),
            ("spec", text),
            ("reflection", pa.binary()),
            *[(key, text) for key in _PROVENANCE],
            ("num_documents", pa.int64()),
            ("num_tokens", pa.int64()),
            ("split_norms", pa.list_(pa.float64())),
            ("lengths", pa.list_(pa.float64())),
            ("dtype", text),
            *[(name, pa.binary()) for name in SKETCHES],
            ("metadata", text),
            ("file_repo", text),
            ("file_commit", text),
            ("format", pa.int32()),
            ("license", text),
            ("tags", pa.list_(text)),
        ]
    )


def conform(table):
    """``table`` with this fisherhub's row schema: the ``CARD_COLUMNS`` an older index lacks added as nulls;
    ``InputError`` for a column of another type."""
    import pyarrow as pa

    schema = row_schema()
    for name in CARD_COLUMNS:
        if name not in table.column_names:
            table = table.append_column(schema.field(name), pa.nulls(table.num_rows, schema.field(name).type))
    try:
        return table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InputError(f"not a signature index of this fisherhub (a column of another type: {exc})") from exc


def card_fields(card: dict[str, Any] | None) -> dict[str, Any]:
    """The ``CARD_COLUMNS`` of a row from the repo's card metadata: its license (a list joined by commas) and up
    to ``CARD_TAGS`` tags, as printable text of at most ``CARD_TEXT`` characters."""
    card = card if isinstance(card, dict) else {}

    def texts(value: Any) -> list[str]:
        values = value if isinstance(value, list) else [value] if value else []
        return [printable(v).strip()[:CARD_TEXT] for v in values if isinstance(v, (str, int, float)) and str(v).strip()]

    licenses = texts(card.get("license"))
    return {"license": ", ".join(licenses) or None, "tags": texts(card.get("tags"))[:CARD_TAGS] or None}


@functools.lru_cache(maxsize=64)
def spec_json(spec: SketchSpec) -> str:
    """The spec as a row stores it (the signatures of one base model share a few specs: made once each)."""
    return json.dumps(spec.to_dict(), sort_keys=True)


def signature_row(
    signature: Signature, ref: SignatureRef, obtained: str, layout: Layout, card: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The index row of ``signature``, the file ``ref`` names (pinned to a commit); ``card``: the metadata of the
    card of the repo the row is for (its license and tags, ``card_fields``)."""
    if obtained not in OBTAINED:
        raise InputError(f"obtained must be one of {tuple(OBTAINED)}, got {obtained!r}")
    means = [getattr(signature, name).double() for name in SKETCHES]
    lengths = [float(mean.norm()) for mean in means]
    reflection = signature.spec.reflection_tensor
    row = {
        "repo_id": ref.repo_id,
        "repo_type": ref.repo_type,
        "commit": ref.revision,
        "path": ref.path,
        "obtained": obtained,
        "sketch_id": signature.sketch_id,
        "spec": spec_json(signature.spec),
        "reflection": None if reflection is None else reflection.numpy().astype("<f4").tobytes(),
        **{key: signature.metadata.get(key) or None for key in _PROVENANCE},
        "num_documents": signature.num_documents,
        "num_tokens": signature.num_tokens,
        "split_norms": signature.split_norms.double().tolist(),
        "lengths": lengths,
        "dtype": layout.dtype,
        "metadata": json.dumps(signature.metadata, sort_keys=True),
        "file_repo": None,
        "file_commit": None,
        "format": INDEX_FORMAT,
        **card_fields(card),
    }
    dtype = np.dtype(layout.dtype).newbyteorder("<")
    for name, mean, length in zip(SKETCHES, means, lengths):
        row[name] = (mean / length).numpy().astype(dtype).tobytes() if name in layout.sketches and length > 0 else None
    return row


def render_state(
    base_model: str,
    layout: Layout,
    repos: list[dict[str, Any]],
    sketch_ids: list[str],
    deltas: list[str] | None = None,
) -> bytes:
    """The bytes of the state file: every repo read (``repos``: at which commit, how many rows, what failed, and
    the update's shard holding its rows); ``deltas``: the updates' shards (``DELTA_PREFIX``), None for an index
    whose shards are all the build's."""
    document = {
        "kind": STATE_KIND,
        "format": INDEX_FORMAT if deltas is None else APPENDED_FORMAT,
        "base_model": base_model,
        "layout": layout.as_dict(),
        "sketch_ids": sketch_ids,
        "repos": repos,
        **({"deltas": deltas} if deltas is not None else {}),
    }
    return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode()


def _state_problem(document: dict[str, Any]) -> str | None:
    """What is wrong with the repos, base model and layout of a state file of this format (None: nothing)."""
    repos = document.get("repos")
    if not isinstance(repos, list) or not isinstance(document.get("base_model"), str):
        return "lists no repos or base model"
    for number, entry in enumerate(repos):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("repo_id"), str)
            and entry.get("repo_type") in ("model", "dataset")
            and isinstance(entry.get("commit"), str)
            and isinstance(entry.get("problems", []), list)
        ):
            return f"repo entry {number} is not a mapping with a repo_id, a repo_type and a commit"
    if ("deltas" in document) != (document["format"] == APPENDED_FORMAT):
        return f"lists update shards if and only if its format is {APPENDED_FORMAT}: it does not"
    deltas = document.get("deltas", [])
    if not isinstance(deltas, list) or not all(isinstance(d, str) and DELTA_NAME.fullmatch(d) for d in deltas):
        return f"lists update shards that are not {DELTA_PREFIX}<12 hex>.parquet"
    if any(entry.get("shard") is not None and entry.get("shard") not in deltas for entry in repos):
        return "names a repo's shard that its update shards do not list"
    layout = document.get("layout", {})
    if not (isinstance(layout, dict) and isinstance(layout.get("sketches", []), list)) or not isinstance(
        document.get("sketch_ids", []), list
    ):
        return "its layout or sketch ids are malformed"
    return None


def parse_state(data: bytes, where: str) -> dict[str, Any]:
    """The state file of an index, read by ``read_json`` (at most ``MAX_STATE_BYTES``); ``InputError`` for one
    this fisherhub does not read (older or newer, malformed, out of bounds)."""
    document = read_json(data, f"{where}: {STATE_PATH}", max_bytes=MAX_STATE_BYTES)
    if not isinstance(document, dict) or document.get("kind") != STATE_KIND:
        raise InputError(f"{where}: not a fisherhub signature index (no {STATE_PATH} of kind {STATE_KIND!r})")
    if document.get("format") not in (INDEX_FORMAT, APPENDED_FORMAT):
        raise InputError(
            f"{where}: index format {printable(repr(document.get('format')))[:40]}, this fisherhub reads formats "
            f"{INDEX_FORMAT} and {APPENDED_FORMAT}: rebuild it with `fisherhub index build` (or upgrade fisherhub)"
        )
    problem = _state_problem(document)
    if problem is not None:
        raise InputError(f"{where}: {STATE_PATH} {problem}; rebuild the index with `fisherhub index build`")
    return document
