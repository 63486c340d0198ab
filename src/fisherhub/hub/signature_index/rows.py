"""An index's rows read back (``read_rows``): every row checked as a signature file is, the sketches of all rows
decoded at once, and alignments among rows (``row_alignments``, ``nearest_neighbours``)."""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fisherhub.core.bounded import read_json
from fisherhub.core.errors import FisherHubError, InputError, SignatureFileError
from fisherhub.core.registry import SKETCHES
from fisherhub.core.plausibility import outside_range, range_doubt, self_dominance_findings
from fisherhub.core.signature import CLAMPED_NORMS_KEY
from fisherhub.core.spec import SketchSpec
from fisherhub.hub.refs import SignatureRef, is_signature_file
from fisherhub.hub.signature_index.layout import INDEX_DTYPES
from fisherhub.options import canonical_model_id
from fisherhub.hub.signature_index.schema import CARD_COLUMNS, INDEX_FORMAT, conform, row_schema

if TYPE_CHECKING:
    pass


#: a row's metadata JSON: a signature's metadata (~200 bytes; a signature file holds at most 64 MiB in all)
MAX_METADATA_BYTES = 2**16
#: a stored unit vector is refused when its length is this far from 1 (float16 rounding stays < 1e-3)
UNIT_TOLERANCE = 1e-2
_COMMIT = re.compile(r"[0-9a-f]{40}")


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
    ((n, 3) float64, in ``SKETCHES`` order); ``skipped`` the rows left out with their reason; ``positions`` where
    each usable row is in the table read, and ``skipped_positions`` where each left-out one is."""

    rows: list[dict[str, Any]]
    specs: list[SketchSpec]
    units: dict[str, np.ndarray]
    lengths: np.ndarray
    split_norms: np.ndarray
    skipped: list[SkippedRow]
    commit: str | None = None
    positions: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    skipped_positions: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))

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

    def __init__(self) -> None:
        self.parsed: dict[tuple[str, bytes | None], SketchSpec] = {}
        self.sketch_ids: dict[int, str] = {}
        self.models: dict[str, str | None] = {}

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
    units: dict[str, list[np.ndarray]] = {name: [] for name in stored}
    rows, parsed, lengths, norms, skipped, kept, left_out = [], [], [], [], [], [], []
    for i in range(table.num_rows):
        row = {name: values[i] for name, values in columns.items()}
        try:
            spec, row_lengths, row_norms = _check_row(row, specs, base_model)
            row_units = {name: sketches[name].vector(i, row["dtype"], spec.m, name) for name in stored}
        except SignatureFileError as exc:
            skipped.append(SkippedRow(str(row.get("repo_id")), row.get("path"), f"index row: {exc}"))
            left_out.append(i)
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
        rows,
        parsed,
        stack,
        np.array(lengths).reshape(-1, 3),
        np.array(norms).reshape(-1, 3),
        skipped,
        commit,
        np.array(kept, dtype=np.int64),
        np.array(left_out, dtype=np.int64),
    )


#: the columns that name a row (``row_key``)
KEY_COLUMNS = ("repo_type", "repo_id", "commit", "path")
RowKey = tuple[str, str, str, str]


def row_key(repo_type: Any, repo_id: Any, commit: Any, path: Any) -> RowKey:
    """What names a row: its repo, the commit it was read at and its file's path (each as text)."""
    return (str(repo_type), str(repo_id), str(commit), str(path))


def table_keys(table) -> list[RowKey]:
    """``row_key`` of every row of an Arrow ``table`` of index rows, in order."""
    return list(map(row_key, *(table.column(k).to_pylist() for k in KEY_COLUMNS)))


def summary_rows(
    table,
    base_model: str | None,
    where: str,
    limit: int,
    checked: np.ndarray | None = None,
    left_out: Mapping[RowKey, str] | None = None,
) -> IndexRows:
    """What an index's card needs of its rows, as ``read_rows`` gives it but reading only some: the ``limit``
    rows ``largest_rows`` picks (the same as from every row), with every row left out (``skipped``, in table
    order). Rows ``checked`` (a mask) were checked before, at a push of the same rows (``pushed``): left out
    when their ``row_key`` is in ``left_out`` (key -> reason), else usable; they are not checked again."""
    left_out = left_out or {}
    checked = np.zeros(table.num_rows, dtype=bool) if checked is None else np.asarray(checked, dtype=bool)
    unchecked = np.flatnonzero(~checked)
    fresh = read_rows(table if checked.sum() == 0 else table.take(unchecked), base_model, where)
    usable = checked.copy()
    usable[unchecked[fresh.positions]] = True
    keys = table_keys(table)
    skipped = {int(unchecked[p]): row for p, row in zip(fresh.skipped_positions, fresh.skipped)}
    for i in np.flatnonzero(checked):
        if keys[i] in left_out:
            usable[i] = False
            skipped[int(i)] = SkippedRow(keys[i][1], keys[i][3], left_out[keys[i]])
    candidates = np.flatnonzero(usable)
    top: list[int] = []
    if len(candidates):
        ids = np.array(table.column("sketch_id").to_pylist(), dtype=object)[candidates]
        common = collections.Counter(ids.tolist()).most_common(1)[0][0]
        same = candidates[ids == common]
        tokens = table.column("num_tokens").to_pylist()
        top = sorted(sorted(same.tolist(), key=lambda i: -tokens[i])[:limit])
    chosen = read_rows(table.take(top), base_model, where)
    order = sorted(skipped)
    return dataclasses.replace(
        chosen,
        positions=np.array(top, dtype=np.int64)[chosen.positions],
        skipped=[skipped[i] for i in order],
        skipped_positions=np.array(order, dtype=np.int64),
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
    from fisherhub.core.alignment import cosine_stderr, stderr_constants
    from fisherhub.core.plausibility import shared_allowance
    from fisherhub.core.registry import MIN_DOCUMENTS

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
