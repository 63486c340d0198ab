"""A base model's published signatures gathered in one Hub dataset (the *signature index*): one row per
signature, Parquet shards pushed with ``datasets`` (``push_to_hub``), a card whose ``configs:`` make the
Hub's viewer show it and ``load_dataset("org/name")`` load it, and ``fisherhub_index.json`` (the state file:
which repo was read at which commit, and what came of it). Not to be confused with ``hub/index.py``, a
repo's own ``.fisher_signatures/index.json``.

A row holds what ranking needs without the file: the sketch id and spec, counts, the split norms
⟨μ̂^A, μ̂^B⟩ and lengths ‖μ̂‖ of the three sketches, and the sketches of ``Layout.sketches`` (by default
the joint one only) as unit vectors μ̂/‖μ̂‖ in ``Layout.dtype`` (default float16; unit vectors keep the
entries near 1/√m, well inside float16's range). The error bars, regime and verdict come from the files
of the few best rows (``selection/index_ranking.py``). Building never writes to the repos it reads.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from fisherhub.core.bounded import check_size, read_file, read_json
from fisherhub.core.errors import FisherHubError, InputError, SignatureFileError
from fisherhub.core.features import SKETCHES
from fisherhub.core.plausibility import outside_range, range_doubt, self_dominance_findings
from fisherhub.core.signature import Signature
from fisherhub.core.state import CLAMPED_NORMS_KEY
from fisherhub.core.spec import SketchSpec
from fisherhub.hub.errors import HubError, hub_errors
from fisherhub.hub.index_layout import (
    DEFAULT_DTYPE,
    DEFAULT_SKETCHES,
    INDEX_DTYPES,
    Layout,
)
from fisherhub.hub.pool import DEFAULT_WORKERS, bounded_map
from fisherhub.hub.refs import SignatureRef, is_signature_file
from fisherhub.hub.snapshot import RepoSnapshot
from fisherhub.safe_text import printable
from fisherhub.lm.loading import canonical_model_id

logger = logging.getLogger(__name__)

#: version of the row layout and state file; an index of another version is refused as a whole
INDEX_FORMAT = 1
INDEX_TAG = "fisher-signature-index"
STATE_PATH = "fisherhub_index.json"
STATE_KIND = "fisherhub-signature-index-state"
DATA_DIR = "data"
SPLIT = "train"
#: how a row was obtained
OBTAINED = {
    "published": "published by the repo",
    "sketched": "sketched by the indexer from the card's datasets",
    "verified": "published by the repo and verified by the indexer",
}
#: signatures whose nearest neighbour the card and ``index show`` list
NEIGHBOUR_ROWS = 10
#: left-out rows whose reason the card and ``index show`` list
LEFT_OUT_SHOWN = 10
#: rows in the heatmap of the card and of ``index show --plot``
PLOTTED_ROWS = 24
#: the card's heatmap: in a hidden folder, which ``datasets`` never resolves as data (and outside ``configs:``)
FIGURE_PATH = ".fisherhub/alignments.png"
#: rows written to one resume chunk of the work folder
CHUNK_ROWS = 256
#: the state file's bound: it lists every repo read, ~150 bytes each (``read_json``)
MAX_STATE_BYTES = 64 * 2**20
#: a row's metadata JSON: a signature's metadata (~200 bytes; a signature file holds at most 64 MiB in all)
MAX_METADATA_BYTES = 2**16
#: a stored unit vector is refused when its length is this far from 1 (float16 rounding stays < 1e-3)
UNIT_TOLERANCE = 1e-2
_COMMIT = re.compile(r"[0-9a-f]{40}")
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


# ----- reading an index's rows back: every row checked as a signature file is --------------------------------
@dataclasses.dataclass(frozen=True)
class SkippedRow:
    """A row of an index left out, and why."""

    repo_id: str
    path: str | None
    reason: str


@dataclasses.dataclass
class IndexRows:
    """The usable rows of an index for one base model: ``rows`` (the row fields but the sketches),
    ``specs`` (one parsed ``SketchSpec`` per row, shared between equal specs), ``units`` (sketch name ->
    (n, m) float32 unit vectors, for the sketches the index stores), ``lengths`` and ``split_norms``
    ((n, 3) float64, in ``SKETCHES`` order); ``skipped`` the rows left out with their reason."""

    rows: list[dict[str, Any]]
    specs: list[SketchSpec]
    units: dict[str, np.ndarray]
    lengths: np.ndarray
    split_norms: np.ndarray
    skipped: list[SkippedRow]
    commit: str | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def ref(self, i: int) -> SignatureRef:
        row = self.rows[i]
        return SignatureRef(row["repo_id"], row["repo_type"], row["commit"], row["path"])

    def file_ref(self, i: int) -> SignatureRef:
        """Where row ``i``'s signature file is: in the row's repo, or (sketched by the indexer) in the index repo."""
        row = self.rows[i]
        if row.get("file_repo"):
            return SignatureRef(row["file_repo"], "dataset", row["file_commit"], row["path"])
        return self.ref(i)


def _decode(data: bytes | None, dtype: str, m: int, what: str) -> np.ndarray:
    if data is None:
        raise SignatureFileError(f"no {what} sketch")
    item = np.dtype(dtype).newbyteorder("<")
    if len(data) != m * item.itemsize:
        raise SignatureFileError(
            f"the {what} sketch has {len(data)} bytes, expected m × {item.itemsize} = {m * item.itemsize}"
        )
    vector = np.frombuffer(data, dtype=item).astype(np.float32)
    if not np.isfinite(vector).all():
        raise SignatureFileError(f"the {what} sketch contains NaN or inf")
    if abs(float(np.linalg.norm(vector.astype(np.float64))) - 1.0) > UNIT_TOLERANCE:
        raise SignatureFileError(f"the {what} sketch is not a unit vector (length {np.linalg.norm(vector):.4g})")
    return vector


class _SpecCache:
    """Parsed specs by (spec JSON, reflection bytes), and their sketch ids: the rows of one sketch id share a
    handful; and the canonical form of each base model named (``canonical_model_id``, once per name)."""

    def __init__(self):
        self.parsed: dict[tuple[str, bytes | None], SketchSpec] = {}
        self.sketch_ids: dict[int, str] = {}
        self.models: dict[Any, str | None] = {}

    def sketch_id(self, spec: SketchSpec) -> str:
        if id(spec) not in self.sketch_ids:
            self.sketch_ids[id(spec)] = spec.sketch_id
        return self.sketch_ids[id(spec)]

    def canonical(self, name: Any) -> str | None:
        if not isinstance(name, str):
            return canonical_model_id(name)
        if name not in self.models:
            self.models[name] = canonical_model_id(name)
        return self.models[name]

    def __call__(self, row: dict[str, Any]) -> SketchSpec:
        key = (row["spec"], row["reflection"])
        if key not in self.parsed:
            import torch

            reflection = None
            if row["reflection"] is not None:
                reflection = torch.from_numpy(np.frombuffer(row["reflection"], dtype="<f4").copy())
            try:
                self.parsed[key] = SketchSpec.from_json(row["spec"], reflection, "its spec")
            except FisherHubError as exc:
                raise SignatureFileError(f"malformed spec ({exc})") from exc
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                raise SignatureFileError(f"malformed spec ({exc!r})") from exc
        return self.parsed[key]


def _check_row(row: dict[str, Any], specs: _SpecCache, base_model: str | None):
    """(spec, lengths, split norms) of a row, or ``SignatureFileError`` saying what is wrong:
    the checks ``Signature.from_bytes`` makes of a file (spec and sketch id, positive split norms, at least 2
    documents each with a scored token) and its plausibility bounds (``plausibility.self_dominance_findings``: each
    sketch's R̂ = ‖μ̂‖²/⟨μ̂^A, μ̂^B⟩ within what its counts allow), plus the row's own (its repo, commit and
    path, its base model); the sketches' shapes and values are checked by ``_SketchColumn``."""
    if row.get("format") != INDEX_FORMAT:
        raise SignatureFileError(f"row format {row.get('format')!r}; this fisherhub reads {INDEX_FORMAT}")
    if not (
        isinstance(row.get("repo_id"), str)
        and row.get("repo_type") in ("model", "dataset")
        and _COMMIT.fullmatch(str(row.get("commit")))
        and is_signature_file(str(row.get("path")))
        and ".." not in str(row.get("path")).split("/")
    ):
        raise SignatureFileError(
            "the row does not name a repo, a 40-hex commit and a signature file under .fisher_signatures/"
        )
    if row.get("file_repo") is not None and not (
        isinstance(row["file_repo"], str) and _COMMIT.fullmatch(str(row.get("file_commit")))
    ):
        raise SignatureFileError("the row's file is in another repo but names no 40-hex commit of it")
    if base_model is not None and specs.canonical(row.get("base_model")) != specs.canonical(base_model):
        raise SignatureFileError(f"other base model {row.get('base_model')!r}, not {base_model!r}")
    spec = specs(row)
    if specs.sketch_id(spec) != row.get("sketch_id"):
        raise SignatureFileError(f"stored sketch id {row.get('sketch_id')} does not match its spec ({spec.sketch_id})")
    documents, tokens = row.get("num_documents"), row.get("num_tokens")
    if not (isinstance(documents, int) and isinstance(tokens, int) and 2 <= documents <= tokens < 2**63):
        raise SignatureFileError(
            f"num_tokens = {tokens} and num_documents = {documents}: a signature has at least "
            "2 documents, each with at least one scored token"
        )
    norms, lengths = (np.asarray(row.get(key) or [], dtype=np.float64) for key in ("split_norms", "lengths"))
    if norms.shape != (3,) or not (np.isfinite(norms).all() and (norms > 0).all()):
        raise SignatureFileError(f"split_norms must be 3 positive finite numbers, got {row.get('split_norms')}")
    if lengths.shape != (3,) or not (np.isfinite(lengths).all() and (lengths > 0).all()):
        raise SignatureFileError(f"lengths must be 3 positive finite numbers, got {row.get('lengths')}")
    metadata = read_json(
        row.get("metadata") or "{}", "its metadata", max_bytes=MAX_METADATA_BYTES, error=SignatureFileError
    )
    if not isinstance(metadata, dict):
        raise SignatureFileError(f"its metadata is a JSON {type(metadata).__name__}, not an object")
    unresolved = str(metadata.get(CLAMPED_NORMS_KEY, ""))
    doubt, noise = self_dominance_findings(spec, tokens, documents, unresolved, (lengths**2 / norms).tolist())
    if doubt or noise:
        raise SignatureFileError(doubt or noise)
    if row.get("dtype") not in INDEX_DTYPES:
        raise SignatureFileError(f"sketch dtype {row.get('dtype')!r} is none of {INDEX_DTYPES}")
    return spec, lengths, norms


def check_table_columns(table, where: str) -> None:
    """``InputError`` unless ``table`` has every column of this fisherhub's rows (the ``CARD_COLUMNS`` may be absent)."""
    missing = sorted(set(row_schema().names) - set(CARD_COLUMNS) - set(table.column_names))
    if missing:
        raise InputError(
            f"{where}: not a signature index of this fisherhub (columns {missing} missing); rebuild it "
            "with `fisherhub index build`"
        )


class _SketchColumn:
    """One sketch column's vectors. When every row has the same dtype and byte length (an index this fisherhub
    wrote), all are read at once from the Arrow buffer and checked together; otherwise row by row."""

    def __init__(self, column, dtypes: list[Any]):
        import pyarrow as pa

        self.array, self.matrix = column.combine_chunks(), None
        array = self.array
        if not len(array) or array.null_count or len(set(dtypes)) != 1 or dtypes[0] not in INDEX_DTYPES:
            return
        wide = pa.types.is_large_binary(array.type)
        offsets = np.frombuffer(
            array.buffers()[1],
            dtype=np.int64 if wide else np.int32,
            count=len(array) + 1,
            offset=array.offset * (8 if wide else 4),
        )
        sizes, item = np.diff(offsets), np.dtype(dtypes[0]).newbyteorder("<")
        if (sizes == sizes[0]).all() and sizes[0] % item.itemsize == 0 and sizes[0] > 0:
            data = np.frombuffer(array.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
            self.matrix = data.view(item).reshape(len(array), -1).astype(np.float32)
            self.finite = np.isfinite(self.matrix).all(axis=1)
            self.length = np.sqrt(np.einsum("ij,ij->i", self.matrix, self.matrix, dtype=np.float64))

    def vector(self, i: int, dtype: str, m: int, what: str) -> np.ndarray:
        """Row ``i``'s unit vector (m floats), or ``SignatureFileError``."""
        if self.matrix is None or self.matrix.shape[1] != m:
            return _decode(self.array[i].as_py(), dtype, m, what)
        if not self.finite[i]:
            raise SignatureFileError(f"the {what} sketch contains NaN or inf")
        if abs(self.length[i] - 1.0) > UNIT_TOLERANCE:
            raise SignatureFileError(f"the {what} sketch is not a unit vector (length {self.length[i]:.4g})")
        return self.matrix[i]


def read_rows(table, base_model: str | None, where: str, commit: str | None = None) -> IndexRows:
    """The checked rows of an Arrow ``table`` of index rows, for ``base_model`` (None: any): each row that
    fails a check skipped with its reason. Reads the sketches every row stores (the joint one always)."""
    check_table_columns(table, where)
    table = conform(table)
    scalar_columns = [name for name in table.column_names if name not in SKETCHES]
    columns = {name: table.column(name).to_pylist() for name in scalar_columns}
    stored = [name for name in SKETCHES if table.column(name).null_count == 0] or ["joint"]
    sketches = {name: _SketchColumn(table.column(name), columns["dtype"]) for name in stored}
    specs = _SpecCache()
    rows, parsed, units, lengths, norms, skipped, kept = [], [], {name: [] for name in stored}, [], [], [], []
    for i in range(table.num_rows):
        row = {name: values[i] for name, values in columns.items()}
        try:
            spec, row_lengths, row_norms = _check_row(row, specs, base_model)
            row_units = {name: sketches[name].vector(i, row["dtype"], spec.m, name) for name in stored}
        except SignatureFileError as exc:
            skipped.append(SkippedRow(str(row.get("repo_id")), row.get("path"), f"index row: {exc}"))
            continue
        rows.append(row)
        parsed.append(spec)
        kept.append(i)
        for name in stored:
            units[name].append(row_units[name])
        lengths.append(row_lengths)
        norms.append(row_norms)
    stack = {}
    for name, vectors in units.items():
        matrix = sketches[name].matrix
        if (
            matrix is not None
            and len(kept) == table.num_rows
            and matrix.shape[1] == (vectors[0].shape[0] if vectors else 0)
        ):
            stack[name] = matrix  # every row kept, read at once: no copy
        else:
            stack[name] = np.stack(vectors) if vectors else np.zeros((0, 0), np.float32)
    return IndexRows(
        rows, parsed, stack, np.array(lengths).reshape(-1, 3), np.array(norms).reshape(-1, 3), skipped, commit
    )


def row_alignments(rows: IndexRows, indices: list[int], sketch: str = "joint") -> np.ndarray:
    """(k, k) alignment A among the rows ``indices`` (rows of one sketch id), 1 on the diagonal (a signature
    with itself, as ``alignment_matrix`` gives it)."""
    k = SKETCHES.index(sketch)
    units = rows.units[sketch][indices].astype(np.float64)
    scaled = units * (rows.lengths[indices, k] / np.sqrt(rows.split_norms[indices, k]))[:, None]
    matrix = scaled @ scaled.T
    np.fill_diagonal(matrix, 1.0)
    return matrix


def row_alignment_checks(rows: IndexRows, indices: list[int], alignments: np.ndarray, sketch: str = "joint"):
    """(standard errors, ``plausibility.shared_allowance``, doubted mask), each (k, k), of ``alignments``
    (``row_alignments`` of the rows ``indices``, of one spec), as ``alignment_matrix`` computes them from files
    (``core.alignment.cosine_stderr``, ``plausibility.outside_range``; a pair with a row of fewer than
    ``MIN_DOCUMENTS`` documents is noise, not doubted); the diagonal is exact."""
    import torch

    from fisherhub.core.alignment import cosine_stderr, stderr_constants
    from fisherhub.core.plausibility import shared_allowance
    from fisherhub.core.state import MIN_DOCUMENTS

    k = SKETCHES.index(sketch)
    lengths, norms = rows.lengths[indices, k], rows.split_norms[indices, k]
    spec = rows.specs[indices[0]]
    c = getattr(stderr_constants(spec.estimator, spec.reflection is not None), sketch)
    dominances = torch.from_numpy(lengths**2 / norms)
    means = torch.from_numpy(rows.units[sketch][indices].astype(np.float64) * lengths[:, None])
    cosines = torch.from_numpy(alignments)
    stderr = cosine_stderr(means, torch.from_numpy(norms), cosines, dominances, torch.tensor(c, dtype=torch.float64))
    stderr.fill_diagonal_(0.0)
    allowance = shared_allowance(dominances)
    long = torch.tensor([rows.rows[i]["num_documents"] >= MIN_DOCUMENTS for i in indices])
    doubted = outside_range(cosines, stderr, allowance) & long[:, None] & long[None, :]
    return stderr.numpy(), allowance.numpy(), doubted.numpy()


def largest_rows(rows: IndexRows, limit: int, among: Iterable[int] | None = None) -> list[int]:
    """The ``limit`` rows with the most tokens among those of the most common sketch id (rows that compare), of
    the rows ``among`` (default: all)."""
    candidates = range(len(rows)) if among is None else list(among)
    if not len(candidates):
        return []
    common = collections.Counter(rows.rows[i]["sketch_id"] for i in candidates).most_common(1)[0][0]
    same = [i for i in candidates if rows.rows[i]["sketch_id"] == common]
    return sorted(same, key=lambda i: -rows.rows[i]["num_tokens"])[:limit]


def nearest_neighbours(rows: IndexRows, limit: int) -> list[tuple[int, int, float, str | None]]:
    """(row, its nearest other row, their A, why A is not to be trusted or None) for the ``largest_rows``, the
    neighbour among them; a neighbour whose A is outside what [0, 1] and its error bar allow
    (``plausibility.range_doubt``) is taken only when no other is left."""
    chosen = largest_rows(rows, limit)
    if len(chosen) < 2:
        return []
    matrix = row_alignments(rows, chosen)
    stderr, allowance, doubted = row_alignment_checks(rows, chosen, matrix)
    out = []
    for k, i in enumerate(chosen):
        others = [j for j in range(len(chosen)) if j != k]
        j = max([j for j in others if not doubted[k, j]] or others, key=lambda j: matrix[k, j])
        doubt = range_doubt({"fisher": (matrix[k, j], stderr[k, j], allowance[k, j])}) if doubted[k, j] else None
        out.append((i, chosen[j], float(matrix[k, j]), doubt))
    return out


def rows_figure(rows: IndexRows, base_model: str, limit: int = PLOTTED_ROWS, among: Iterable[int] | None = None):
    """A heatmap (matplotlib ``Figure``) of A among the ``largest_rows`` (of the rows ``among``, default all);
    None with fewer than two."""
    from fisherhub.extras import require

    require("matplotlib")
    from matplotlib.figure import Figure

    from fisherhub.core.geometry import label

    chosen = largest_rows(rows, limit, among)
    if len(chosen) < 2:
        return None
    matrix = row_alignments(rows, chosen)
    doubted = row_alignment_checks(rows, chosen, matrix)[2]
    names = [printable(rows.rows[i]["repo_id"]) for i in chosen]
    figure = Figure(figsize=(2 + 0.35 * len(names), 1.5 + 0.35 * len(names)))
    axis = figure.subplots()
    image = axis.imshow(np.where(doubted, np.nan, matrix), cmap="viridis")
    for i, j in zip(*np.nonzero(doubted)):  # outside what [0, 1] and its error bar allow: not to be read
        axis.text(j, i, "!", ha="center", va="center", fontsize=6, color="red")
    axis.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
    axis.set_yticks(range(len(names)), names, fontsize=6)
    title = f"{label('fisher')} among {len(names)} rows of {printable(base_model)}'s index"
    axis.set_title(title + (" (! red: not to be trusted)" if doubted.any() else ""), fontsize=8)
    figure.colorbar(image, ax=axis, shrink=0.8)
    figure.tight_layout()
    return figure


# ----- the rows of one repo ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RepoResult:
    """What reading one repo gave: its rows, and the signatures it could not give (path, reason)."""

    repo_id: str
    repo_type: str
    commit: str
    rows: list[dict[str, Any]]
    problems: list[tuple[str, str]]


def repo_rows(snapshot: RepoSnapshot, base_model: str, layout: Layout, token: str | None = None) -> RepoResult:
    """The rows of the signatures ``snapshot`` (a repo at one commit) publishes for ``base_model``, each
    file downloaded at that commit and loaded as ``load_signature`` loads it; the rest with their reason."""
    from fisherhub.hub.read import load_signature, snapshot_signatures

    ref = snapshot.ref
    rows, problems = [], []
    for info in snapshot_signatures(snapshot, token, read_headers=False):
        if info.base_model is not None and canonical_model_id(info.base_model) != canonical_model_id(base_model):
            continue  # a signature under another base model belongs to that model's index
        if info.problem is not None:
            problems.append((info.path, info.problem))
            continue
        try:
            signature = load_signature(info.location, token=token)
        except FisherHubError as exc:
            problems.append((info.path, str(exc)))
            continue
        if canonical_model_id(signature.metadata.get("base_model")) != canonical_model_id(base_model):
            problems.append((info.path, f"the file names base model {signature.metadata.get('base_model')!r}"))
            continue
        rows.append(signature_row(signature, ref.with_path(info.path), "published", layout, snapshot.card_data))
    return RepoResult(ref.repo_id, ref.repo_type, str(ref.revision), rows, problems)


# ----- the work folder: rows read so far, so that an interrupted build resumes -----------------------------------
def work_folder(folder: str | os.PathLike) -> Path:
    """``folder``, made when missing (with its parents); ``InputError`` saying what is in the way when it, or a
    folder above it, is a file (which is left as it is), or when it cannot be made."""
    path = Path(folder)
    in_the_way = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if in_the_way is not None:
        raise InputError(
            f"the work folder {path} cannot be made: {in_the_way} is a file, not a folder (it is left as it is); "
            "pass --work (work=) a folder, or a path that does not exist yet"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"the work folder {path} cannot be made ({exc.strerror or exc}): pass another --work") from exc
    return path


class WorkFolder:
    """``journal.jsonl`` (one line per repo read: id, type, commit, rows, problems, chunk) and
    ``chunks/NNNNN.parquet`` (the rows of the repos journaled with that chunk). A chunk is written (to a
    temporary name, then renamed) before its repos are journaled, so a kill loses at most the repos not yet
    journaled; a torn last journal line is ignored."""

    def __init__(self, folder: str | os.PathLike, base_model: str, layout: Layout):
        self.folder = work_folder(folder)
        work_folder(self.folder / "chunks")
        self.journal = self.folder / "journal.jsonl"
        settings = {"base_model": base_model, "layout": layout.as_dict(), "format": INDEX_FORMAT}
        settings_file = self.folder / "settings.json"
        if settings_file.is_file():
            recorded = json.loads(settings_file.read_text())
            if recorded != settings:
                raise InputError(
                    f"{self.folder} holds a build with {recorded}, not {settings}: pass another work folder "
                    "or delete it"
                )
        else:
            settings_file.write_text(json.dumps(settings, sort_keys=True))
        self.done: dict[tuple[str, str], dict[str, Any]] = {}
        if self.journal.is_file():
            for line in self.journal.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the line a kill tore
                self.done[(entry["repo_type"], entry["repo_id"])] = entry
        self.next_chunk = (
            max((entry["chunk"] for entry in self.done.values() if entry["chunk"] is not None), default=-1) + 1
        )

    def is_done(self, snapshot: RepoSnapshot) -> bool:
        entry = self.done.get((snapshot.ref.repo_type, snapshot.ref.repo_id))
        return entry is not None and entry["commit"] == snapshot.ref.revision

    def add(self, results: list[RepoResult]) -> None:
        """Journal ``results`` (their rows in one new chunk)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [row for result in results for row in result.rows]
        chunk = None
        if rows:
            chunk = self.next_chunk
            path = self.folder / "chunks" / f"{chunk:05d}.parquet"
            pq.write_table(pa.Table.from_pylist(rows, schema=row_schema()), f"{path}.tmp")
            os.replace(f"{path}.tmp", path)
            self.next_chunk += 1
        lines = []
        for result in results:
            entry = {
                "repo_id": result.repo_id,
                "repo_type": result.repo_type,
                "commit": result.commit,
                "rows": len(result.rows),
                "problems": result.problems,
                "chunk": chunk if result.rows else None,
            }
            self.done[(result.repo_type, result.repo_id)] = entry
            lines.append(json.dumps(entry) + "\n")
        with open(self.journal, "a", encoding="utf-8") as handle:
            handle.write("".join(lines))
            handle.flush()
            os.fsync(handle.fileno())

    def entries(self) -> list[dict[str, Any]]:
        """The journal's repo entries (without chunk numbers), sorted."""
        keys = ("repo_id", "repo_type", "commit", "rows", "problems")
        return sorted(
            ({key: entry[key] for key in keys} for entry in self.done.values()),
            key=lambda entry: (entry["repo_type"], entry["repo_id"]),
        )

    def table(self):
        """Every journaled repo's rows at the commit it was last read (one Arrow table)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        wanted = {
            (e["repo_type"], e["repo_id"]): (e["commit"], e["chunk"])
            for e in self.done.values()
            if e["chunk"] is not None
        }
        tables = []
        for chunk in sorted({chunk for _, chunk in wanted.values()}):
            table = conform(pq.read_table(self.folder / "chunks" / f"{chunk:05d}.parquet"))
            keep = [
                wanted.get((t, r)) == (c, chunk)
                for t, r, c in zip(*(table.column(k).to_pylist() for k in ("repo_type", "repo_id", "commit")))
            ]
            tables.append(table.filter(pa.array(keep)))
        return pa.concat_tables(tables) if tables else row_schema().empty_table()


def read_repos(
    snapshots: list[RepoSnapshot],
    base_model: str,
    layout: Layout,
    work: WorkFolder,
    *,
    token: str | None = None,
    workers: int = DEFAULT_WORKERS,
    progress: bool = False,
    stop_after: int | None = None,
) -> int:
    """Read every snapshot the work folder does not hold at its commit, ``workers`` repos at once, and
    journal them in chunks; returns how many were read. ``stop_after``: stop after about that many repos
    (a test's stand-in for a kill)."""
    todo = [snapshot for snapshot in snapshots if not work.is_done(snapshot)]
    if stop_after is not None:
        todo = todo[:stop_after]
    bar = None
    if progress:
        from huggingface_hub.utils import tqdm  # off under HF_HUB_DISABLE_PROGRESS_BARS=1 or disable_progress_bars()

        bar = tqdm(total=len(todo), desc="reading repos", unit="repo")
    batch = workers * 4  # repos journaled together: a kill loses at most this many repos' reading
    for start in range(0, len(todo), batch):
        outcomes = bounded_map(
            lambda s: repo_rows(s, base_model, layout, token),
            todo[start : start + batch],
            workers,
            catch=(FisherHubError,),
        )
        results = []
        for outcome in outcomes:
            if outcome.error is not None:
                ref = outcome.item.ref
                results.append(
                    RepoResult(ref.repo_id, ref.repo_type, str(ref.revision), [], [("", str(outcome.error))])
                )
            else:
                results.append(outcome.value)
        for first in range(0, len(results), CHUNK_ROWS):
            work.add(results[first : first + CHUNK_ROWS])
        if bar is not None:
            bar.update(len(outcomes))
    if bar is not None:
        bar.close()
    return len(todo)


# ----- the index on the Hub ------------------------------------------------------------------------------
def index_ref(name: str) -> SignatureRef:
    """``datasets/org/name[@rev]`` or ``org/name[@rev]`` (an index is always a dataset repo)."""
    ref = SignatureRef.parse(name if name.startswith(("datasets/", "hf://")) else f"datasets/{name}")
    if ref is None or ref.repo_type != "dataset" or ref.path is not None:
        raise InputError(
            f"{name!r}: an index is a dataset repo, named datasets/org/name[@revision] or org/name[@revision]"
        )
    return ref


def render_state(base_model: str, layout: Layout, work: WorkFolder, sketch_ids: list[str]) -> bytes:
    """The bytes of the state file: every repo read (at which commit, how many rows, what failed)."""
    repos = work.entries()
    document = {
        "kind": STATE_KIND,
        "format": INDEX_FORMAT,
        "base_model": base_model,
        "layout": layout.as_dict(),
        "sketch_ids": sketch_ids,
        "repos": repos,
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
    if document.get("format") != INDEX_FORMAT:
        raise InputError(
            f"{where}: index format {printable(repr(document.get('format')))[:40]}, this fisherhub reads format "
            f"{INDEX_FORMAT}: rebuild it with `fisherhub index build` (or upgrade fisherhub)"
        )
    problem = _state_problem(document)
    if problem is not None:
        raise InputError(f"{where}: {STATE_PATH} {problem}; rebuild the index with `fisherhub index build`")
    return document


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
    def of(cls, table, base_model: str, repos: Iterable[dict[str, Any]]) -> IndexSummary:
        """From the rows (an Arrow table) and the state file's repo entries."""
        repos = list(repos)
        obtained = collections.Counter(table.column("obtained").to_pylist())
        sketch_ids = collections.Counter(table.column("sketch_id").to_pylist())
        problems = sum(len(repo.get("problems") or []) for repo in repos)
        rows = read_rows(table, base_model, "the index")
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


def push_index(
    table,
    repo: SignatureRef,
    base_model: str,
    layout: Layout,
    work: WorkFolder,
    *,
    token: str | None = None,
    private: bool = False,
) -> str:
    """Push ``table`` as the index ``repo``: the Parquet shards through ``datasets`` (``push_to_hub``), then the
    card, state file and (with matplotlib installed) the card's heatmap in one commit; returns that commit."""
    import io

    import datasets
    from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download

    from fisherhub.hub.cards import card_text, parse_card

    api = HfApi(token=token)
    where = f"datasets/{repo.repo_id}"
    with hub_errors(where):
        dataset = datasets.Dataset(conform(table))
        dataset.push_to_hub(
            repo.repo_id,
            split=SPLIT,
            data_dir=DATA_DIR,
            token=token,
            private=private,
            max_shard_size="100MB",
            commit_message="signature index: rows",
        )
        card_file = hf_hub_download(repo.repo_id, "README.md", repo_type="dataset", token=token)
        existing = parse_card(card_text(card_file, where), where, "dataset").data.to_dict()
        summary = IndexSummary.of(table, base_model, work.entries())
        state = render_state(base_model, layout, work, sorted(summary.sketch_ids))
        try:
            figure = rows_figure(read_rows(table, base_model, where), base_model)
        except InputError:  # matplotlib is not installed: the card goes without its figure
            figure = None
        operations = [CommitOperationAdd(STATE_PATH, state)]
        if figure is not None:
            png = io.BytesIO()
            figure.savefig(png, format="png", dpi=120)
            operations.append(CommitOperationAdd(FIGURE_PATH, png.getvalue()))
        card = render_card(summary, layout, existing, repo.repo_id, figure is not None)
        info = api.create_commit(
            repo.repo_id,
            repo_type="dataset",
            commit_message=f"signature index of {base_model}: {table.num_rows} rows",
            operations=[CommitOperationAdd("README.md", card.encode()), *operations],
        )
    return info.oid


@dataclasses.dataclass(frozen=True)
class LoadedIndex:
    """An index read at one commit: its state file, the Arrow table of its rows, the commit; ``rows()`` its checked
    rows (read once: ranking several targets from one loaded index reads them once)."""

    ref: SignatureRef
    commit: str
    state: dict[str, Any]
    table: Any
    _rows: dict[str | None, IndexRows] = dataclasses.field(default_factory=dict, init=False, compare=False, repr=False)

    @property
    def base_model(self) -> str:
        return self.state["base_model"]

    def rows(self, base_model: str | None = None) -> IndexRows:
        """The checked rows for ``base_model`` (default: the index's own), ``read_rows`` of the table, read once."""
        base_model = base_model or self.base_model
        if base_model not in self._rows:
            self._rows[base_model] = read_rows(self.table, base_model, f"datasets/{self.ref.repo_id}", self.commit)
        return self._rows[base_model]

    @property
    def layout(self) -> Layout:
        layout = self.state.get("layout") or {}
        return Layout(layout.get("dtype", DEFAULT_DTYPE), tuple(layout.get("sketches", DEFAULT_SKETCHES)))


def load_index(name: str | SignatureRef, token: str | None = None, columns: list[str] | None = None) -> LoadedIndex:
    """The index ``name`` (``datasets/org/name[@rev]``) pinned to the commit its revision is now: one
    ``repo_info``, then the state file and the shards at that commit through the cache (a warm cache makes
    no more requests). ``InputError`` for a repo that is not an index of this format, or a truncated shard."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from huggingface_hub import HfApi, hf_hub_download

    ref = name if isinstance(name, SignatureRef) else index_ref(name)
    where = f"datasets/{ref.repo_id}"
    with hub_errors(where):
        info = HfApi(token=token).repo_info(
            ref.repo_id, repo_type="dataset", revision=ref.revision, files_metadata=True
        )
    files = sorted(s.rfilename for s in info.siblings or [])
    sizes = {s.rfilename: s.size for s in info.siblings or []}
    if STATE_PATH not in files:
        raise InputError(
            f"{where}: not a fisherhub signature index (no {STATE_PATH}); build one with `fisherhub index build`"
        )
    shards = [f for f in files if f.startswith(f"{DATA_DIR}/") and f.endswith(".parquet")]
    check_size(sizes[STATE_PATH], f"{where}: {STATE_PATH}", max_bytes=MAX_STATE_BYTES)  # before any download

    def fetch(path: str) -> str:
        with hub_errors(where, path):
            return hf_hub_download(ref.repo_id, path, repo_type="dataset", revision=info.sha, token=token)

    outcomes = bounded_map(fetch, [STATE_PATH, *shards], catch=())
    state = parse_state(read_file(outcomes[0].value, f"{where}: {STATE_PATH}", max_bytes=MAX_STATE_BYTES), where)
    tables = []
    for outcome in outcomes[1:]:
        try:
            tables.append(pq.read_table(outcome.value, columns=columns))
        except (pa.ArrowException, OSError) as exc:
            raise InputError(
                f"{where}@{info.sha[:12]}: the shard {outcome.item} is not readable Parquet ({exc}); "
                "the index is damaged: rebuild it with `fisherhub index build`"
            ) from exc
    table = pa.concat_tables(tables) if tables else row_schema().empty_table()
    return LoadedIndex(ref, info.sha, state, table)


# ----- build and update -----------------------------------------------------------------------------------
def default_work(repo: SignatureRef) -> Path:
    """Where the rows read for the index ``repo`` are kept (``FISHERHUB_INDEX_WORK``, else the user's cache)."""
    return Path(
        os.environ.get("FISHERHUB_INDEX_WORK", Path.home() / ".cache" / "fisherhub" / "index")
    ) / repo.repo_id.replace("/", "--")


def listed_adapters(base_model: str, token: str | None = None) -> list[RepoSnapshot]:
    """Every adapter of ``base_model`` the Hub lists, as the listing describes it (commit, files, card): one
    listing call (paginated by the client). Unsigned ones are kept, so the state file records them and
    ``update`` does not read them again while their commit stays."""
    from huggingface_hub import HfApi

    from fisherhub.hub.discovery import LISTING_FIELDS, adapter_tag

    with hub_errors(f"the adapters of {base_model}"):
        infos = HfApi(token=token).list_models(filter=adapter_tag(base_model), expand=list(LISTING_FIELDS))
        return [RepoSnapshot.from_info(info, "model", listed=True) for info in infos]


#: what a new dataset repo may hold before an index is pushed into it (the Hub writes ``.gitattributes``)
NEW_REPO_FILES = frozenset({".gitattributes", "README.md"})


def check_push_target(repo: SignatureRef, token: str | None = None, force: bool = False) -> None:
    """``InputError`` unless ``repo`` may receive an index: it does not exist yet (the push creates it), holds
    nothing but ``NEW_REPO_FILES``, or is an index (it has ``STATE_PATH``); with ``force``, any repo. Anything
    else is someone's data, whose ``load_dataset`` the index's shards under ``DATA_DIR/`` would change."""
    from huggingface_hub import HfApi

    from fisherhub.hub.errors import RepoNotFoundError

    where = f"datasets/{repo.repo_id}"
    try:
        with hub_errors(where):
            info = HfApi(token=token).repo_info(repo.repo_id, repo_type="dataset")
    except RepoNotFoundError:
        return
    files = sorted(sibling.rfilename for sibling in info.siblings or [])
    others = [name for name in files if name not in NEW_REPO_FILES]
    if force or not others or STATE_PATH in files:
        return
    shown = ", ".join(printable(name) for name in others[:5]) + (
        f" and {len(others) - 5} more" if len(others) > 5 else ""
    )
    raise InputError(
        f"{where} is not a signature index (no {STATE_PATH}) and holds {shown}: pushing the index would add "
        f"Parquet shards under {DATA_DIR}/ and change what load_dataset({repo.repo_id!r}) returns. Nothing was "
        "pushed. Push to a new or empty dataset repo, or pass --force (force=True) to push into this one anyway"
    )


def build_index(
    base_model: str,
    push: str,
    *,
    work: str | os.PathLike | None = None,
    layout: Layout | None = None,
    token: str | None = None,
    workers: int = DEFAULT_WORKERS,
    private: bool = False,
    progress: bool = False,
    stop_after: int | None = None,
    force: bool = False,
) -> tuple[str, IndexSummary]:
    """Gather every published signature of ``base_model``'s adapters (``find_adapters``) into the index
    ``push`` (a dataset repo) and push it; returns (the index commit, its summary). Repos are read
    ``workers`` at once; what was read is kept in ``work`` (default ``~/.cache/fisherhub/index/<org--name>``),
    so a build that was killed resumes where it stopped (repos whose commit moved since are read again).
    ``push`` is checked first (``check_push_target``): a repo that holds other data than an index is refused
    unless ``force``."""
    base_model, layout = canonical_model_id(base_model), layout or Layout()
    repo = index_ref(push)
    check_push_target(repo, token, force)
    folder = WorkFolder(work or default_work(repo), base_model, layout)
    snapshots = listed_adapters(base_model, token)
    if not snapshots:
        raise InputError(
            f"the Hub lists no adapters of {base_model!r} (tag base_model:adapter:{base_model}): nothing to index"
        )
    read_repos(
        snapshots, base_model, layout, folder, token=token, workers=workers, progress=progress, stop_after=stop_after
    )
    if stop_after is not None:
        raise InterruptedBuild(f"stopped after {stop_after} repos; run again to resume")
    listed = {(s.ref.repo_type, s.ref.repo_id) for s in snapshots}
    folder.done = {key: entry for key, entry in folder.done.items() if key in listed}  # repos gone since are dropped
    table = folder.table()
    commit = push_index(table, repo, base_model, layout, folder, token=token, private=private)
    return commit, IndexSummary.of(table, base_model, folder.entries())


class InterruptedBuild(FisherHubError):
    """A build stopped before pushing (``stop_after``); running it again resumes."""


def changed_repos(loaded: LoadedIndex, token: str | None = None) -> tuple[dict[str, str], set[str]]:
    """(adapters listed now whose commit differs from the one the index read, or new: id -> commit; adapters
    the index read that the Hub no longer lists), from one listing with ``expand=sha``."""
    from huggingface_hub import HfApi

    from fisherhub.hub.discovery import adapter_tag

    with hub_errors(f"the adapters of {loaded.base_model}"):
        listed = {
            info.id: info.sha
            for info in HfApi(token=token).list_models(filter=adapter_tag(loaded.base_model), expand=["sha"])
        }
    seen = {entry["repo_id"]: entry["commit"] for entry in loaded.state["repos"] if entry["repo_type"] == "model"}
    changed = {repo_id: sha for repo_id, sha in listed.items() if seen.get(repo_id) != sha}
    return changed, set(seen) - set(listed)


def replace_repos(loaded: LoadedIndex, folder: WorkFolder, replaced: set[tuple[str, str]]):
    """The rows of ``loaded`` but those of the ``replaced`` (repo type, repo id), plus the rows ``folder``
    journaled; ``folder`` takes the state entries of the repos kept, so its state file describes the result."""
    import pyarrow as pa

    for entry in loaded.state["repos"]:
        key = (entry["repo_type"], entry["repo_id"])
        if key not in replaced and key not in folder.done:
            folder.done[key] = {**entry, "chunk": None}
    keys = zip(loaded.table.column("repo_type").to_pylist(), loaded.table.column("repo_id").to_pylist())
    keep = pa.array([key not in replaced for key in keys], type=pa.bool_())
    return pa.concat_tables([conform(loaded.table.filter(keep)), folder.table()])


def update_index(
    name: str,
    *,
    work: str | os.PathLike | None = None,
    token: str | None = None,
    workers: int = DEFAULT_WORKERS,
    progress: bool = False,
) -> tuple[str | None, IndexSummary, int]:
    """Bring the index ``name`` up to date: one listing (``expand=sha``) says which adapters changed commit,
    appeared or went; only those are read again (a ``repo_info`` each, then their signature files). Pushes
    when anything changed; returns (the new commit, None when nothing changed; the summary; repos read)."""
    loaded = load_index(name, token)
    layout, base_model = loaded.layout, loaded.base_model
    changed, gone = changed_repos(loaded, token)
    folder = WorkFolder(work or default_work(loaded.ref) / f"update-{loaded.commit[:12]}", base_model, layout)
    if not changed and not gone:
        return None, IndexSummary.of(loaded.table, base_model, loaded.state["repos"]), 0
    from fisherhub.hub.snapshot import repo_snapshot

    todo = [repo_id for repo_id, sha in changed.items() if folder.done.get(("model", repo_id), {}).get("commit") != sha]
    outcomes = bounded_map(
        lambda repo_id: repo_snapshot(SignatureRef(repo_id, "model", changed[repo_id]), token),
        todo,
        workers,
        catch=(HubError,),
    )
    snapshots = [outcome.value for outcome in outcomes if outcome.error is None]
    read = read_repos(snapshots, base_model, layout, folder, token=token, workers=workers, progress=progress)
    table = replace_repos(loaded, folder, {("model", repo_id) for repo_id in (*changed, *gone)})
    commit = push_index(table, loaded.ref, base_model, layout, folder, token=token)
    return commit, IndexSummary.of(table, base_model, folder.entries()), read
