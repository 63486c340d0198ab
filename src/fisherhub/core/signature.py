"""``Signature``: a finished task sketch as a safetensors artifact (SPEC §3).

Tensors: ``joint``, ``activation``, ``error`` (float32 [m], the means μ̂), ``split_norms`` (float64 [3],
⟨μ̂^A, μ̂^B⟩ of each), and ``reflection`` (float32 [d]) when the spec has one. ``__metadata__`` holds
the spec, the sketch id, counts, provenance and a checksum over all of it, so a truncated or damaged
file is refused on load. The checksum is no protection against forgery (it can be recomputed): the loader
checks dtypes, shapes, finite values and counts itself (``Signature.from_bytes``).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load

from fisherhub.core.atomic import atomic_path
from fisherhub.core.bounded import read_json
from fisherhub.core.spec import FORMAT_VERSION, SketchSpec
from fisherhub.core.version import library_version
from fisherhub.core.errors import FisherHubError, SignatureFileError
from fisherhub.core.registry import SKETCHES

#: metadata key: the sketches (comma-separated names) whose split-sample norm was clamped at finalize
#: (``SketchState.finalize``); their alignments are shrunk toward 0 with wide error bars.
CLAMPED_NORMS_KEY = "clamped_split_norms"
#: provenance keys a signature's metadata may carry (SPEC §3); free-form extra keys are kept too.
PROVENANCE_KEYS = (
    "base_model",
    "base_model_revision",
    "dataset",
    "dataset_config",
    "dataset_split",
    "dataset_revision",
    "text_column",
)
_RESERVED_KEYS = (
    "format_version",
    "kind",
    "sketch_id",
    "spec",
    "m",
    "seed",
    "estimator",
    "granularity",
    "fisher",
    "d",
    "vocab_size",
    "head_checksum",
    "tokenizer_checksum",
    "num_documents",
    "num_tokens",
    "library_version",
    "created",
    "checksum",
)


_DTYPE_NAMES = {torch.float32: "F32", torch.float64: "F64"}
#: the largest signature file read (m = 2^20 features of float32, three sketches, is 12 MiB)
MAX_SIGNATURE_BYTES = 64 * 2**20


def oversized(size: int | None) -> str | None:
    """Why a file of ``size`` bytes is not read as a signature (None: it may be one, or its size is unknown)."""
    if size is None or size <= MAX_SIGNATURE_BYTES:
        return None
    return f"{size:,} bytes, more than a signature has ({MAX_SIGNATURE_BYTES:,})"


def max_self_dominance(m: int) -> float:
    """The largest self-dominance R̂ = ‖μ̂‖²/D a sketch of m features can show with a resolved split norm:
    1 + √m/2. A resolved D is at least ``SPLIT_NORM_Z`` = 2 feature-level standard errors σ, and for random
    features (m exchangeable products μ̂^A_r μ̂^B_r) σ ≈ ‖μ̂^A‖‖μ̂^B‖/√m ≳ ‖μ̂‖²/√m, so R̂ ≲ √m/2; the 1 is
    slack for small m (tests/test_trust.py: resolved sketches stay under it). Larger means the split
    norm is too small for the mean: the sketch has not resolved its task, or the file was forged (shrinking
    D inflates every alignment of the signature by 1/√D)."""
    return 1.0 + m**0.5 / 2


def _serialize(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> bytes:
    """The safetensors encoding with sorted keys, so equal signatures give equal bytes
    (``safetensors.torch.save`` orders metadata by a hash map, which varies between processes)."""
    header: dict[str, object] = {"__metadata__": dict(sorted(metadata.items()))}
    offset, buffers = 0, []
    for name in sorted(tensors):
        data = tensors[name].detach().cpu().contiguous().numpy().tobytes()
        header[name] = {
            "dtype": _DTYPE_NAMES[tensors[name].dtype],
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        buffers.append(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    return len(encoded).to_bytes(8, "little") + encoded + b"".join(buffers)


def _check_stored_tensors(tensors: dict[str, torch.Tensor], spec: SketchSpec) -> None:
    """The file holds exactly the tensors a signature of ``spec`` stores, each of its dtype and shape."""
    expected = {name: (torch.float32, (spec.m,)) for name in SKETCHES}
    expected["split_norms"] = (torch.float64, (3,))
    if spec.reflection is not None:
        expected["reflection"] = (torch.float32, (spec.d,))
    unexpected, missing = sorted(set(tensors) - set(expected)), sorted(set(expected) - set(tensors))
    if unexpected or missing:
        raise SignatureFileError(f"unexpected tensor(s) {unexpected} / missing tensor(s) {missing}")
    for name, (dtype, shape) in expected.items():
        tensor = tensors[name]
        if tensor.dtype != dtype or tuple(tensor.shape) != shape:
            raise SignatureFileError(
                f"tensor {name!r} is {str(tensor.dtype).removeprefix('torch.')} of shape {tuple(tensor.shape)}; a "
                f"signature stores it as {str(dtype).removeprefix('torch.')} of shape {shape}"
            )


def _count(header: dict[str, str], key: str) -> int:
    value = header[key]
    if not (isinstance(value, str) and value.lstrip("-").isdecimal() and value.isascii()):
        raise SignatureFileError(f"{key} {value!r} is not an integer")
    return int(value)


def self_dominance_bounds(spec: SketchSpec, num_tokens: int, num_documents: int) -> list[tuple[float, float]]:
    """(lowest, highest) R̂ each sketch (joint, activation, error) of a signature with this spec and these counts
    can show. Highest: ``max_self_dominance``. Lowest: with half means a, b and token weights w, 1 − w,
    ‖μ̂‖² = ‖wa − (1 − w)b‖² + 4w(1 − w)⟨a, b⟩, so R̂ ≥ 4w(1 − w) ≥ 4(n − 1)/n² over the sketch's n examples
    (tokens; documents for the joint sketch of sequence granularity). Network sketches count other positions,
    so they get no lower bound."""
    high = max_self_dominance(spec.m)
    if spec.modules is not None:
        return [(0.0, high)] * 3
    joint = num_tokens if spec.granularity == "token" else num_documents
    return [(4 * (n - 1) / n**2, high) for n in (joint, num_tokens, num_tokens)]


def implausibility(
    spec: SketchSpec, num_tokens: int, num_documents: int, metadata: dict[str, str], dominances: torch.Tensor
) -> str | None:
    """Why a signature's numbers (its spec, counts, metadata and the R̂ of its three sketches, ``dominances``)
    cannot be taken at face value (None: they can): a sketch whose self-dominance lies outside
    ``self_dominance_bounds``. Its split norm does not fit its mean, so its alignments are noise (a sketch the
    writer flagged unresolved, ``CLAMPED_NORMS_KEY``) or inflated / deflated (a resolved one: the file was
    forged). An index row is checked with the same bounds (``hub/signature_index``)."""
    unresolved = set(metadata.get(CLAMPED_NORMS_KEY, "").split(","))
    bounds = self_dominance_bounds(spec, num_tokens, num_documents)
    values = dominances.tolist()
    out = [
        (name, value, low, high)
        for name, value, (low, high) in zip(SKETCHES, values, bounds)
        if not low <= value <= high
    ]
    if not out:
        return None
    described = ", ".join(f"{name} R̂ = {value:.3g} outside [{low:.3g}, {high:.3g}]" for name, value, low, high in out)
    if all(name in unresolved for name, *_ in out):
        return f"unresolved split norms: {described}: its alignments are noise; sketch more documents"
    return (
        f"implausible split norms: {described} (the most a resolved split norm allows) although marked "
        "resolved: forged, or damaged"
    )


@dataclasses.dataclass
class Signature:
    """A task's FisherSketch signature: μ̂ of the joint, activation and error features, and the split-sample
    norms that correct their cosines (``SketchState.finalize`` makes one; ``save`` / ``load`` read and write
    the safetensors file, SPEC §3).

    Args:
        spec (`SketchSpec`):
            The sketch it was made with (its id decides what it compares with).
        joint (`torch.Tensor`):
            μ̂ of the joint features, float32 (m,).
        activation (`torch.Tensor`):
            μ̂ of the activation features, float32 (m,).
        error (`torch.Tensor`):
            μ̂ of the error features, float32 (m,).
        split_norms (`torch.Tensor`):
            ⟨μ̂^A, μ̂^B⟩ of the two halves of the data, per sketch: float64 (3,), positive.
        num_tokens (`int`):
            Scored tokens sketched.
        num_documents (`int`):
            Documents sketched.
        metadata (`dict[str, str]`, *optional*):
            Provenance (``PROVENANCE_KEYS``: base model, dataset, revisions, ...) and free-form keys;
            ``library_version`` and ``created`` are added when missing.

    Raises:
        `SignatureFileError`: a sketch of another shape than (m,), NaN or inf, or split norms that are not 3
            positive finite numbers.
    """

    spec: SketchSpec
    joint: torch.Tensor
    activation: torch.Tensor
    error: torch.Tensor
    split_norms: torch.Tensor
    num_tokens: int
    num_documents: int
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in SKETCHES:
            tensor = getattr(self, name)
            if tuple(tensor.shape) != (self.spec.m,):
                raise SignatureFileError(f"{name} has shape {tuple(tensor.shape)}, expected ({self.spec.m},)")
            if not torch.isfinite(tensor).all():
                raise SignatureFileError(f"tensor {name!r} contains NaN or inf")
        norms = self.split_norms
        if tuple(norms.shape) != (3,) or not (torch.isfinite(norms).all() and (norms > 0).all()):
            raise SignatureFileError(f"split_norms must be 3 positive finite numbers, got {norms.tolist()}")
        self.metadata = {str(k): str(v) for k, v in self.metadata.items()}
        self.metadata.setdefault("library_version", library_version())
        self.metadata.setdefault("created", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))

    @property
    def sketch_id(self) -> str:
        return self.spec.sketch_id

    @property
    def self_dominance(self) -> float:
        """R̂ = ‖μ̂‖² / ⟨μ̂^A, μ̂^B⟩ of the joint sketch (→ 1 as the task grows; drives the stderr)."""
        return float(self.joint.double().dot(self.joint.double()) / self.split_norms[0])

    def sketches(self) -> list[torch.Tensor]:
        """The means μ̂ of the three sketches, in ``SKETCHES`` order."""
        return [getattr(self, name) for name in SKETCHES]

    def self_dominances(self) -> torch.Tensor:
        """R̂ of the joint, activation and error sketches."""
        squares = torch.stack([t.double().dot(t.double()) for t in self.sketches()])
        return squares / self.split_norms.double()

    def self_dominance_bounds(self) -> list[tuple[float, float]]:
        """(lowest, highest) R̂ each sketch (joint, activation, error) can show (``self_dominance_bounds``)."""
        return self_dominance_bounds(self.spec, self.num_tokens, self.num_documents)

    def implausibility(self) -> str | None:
        """Why this signature's numbers cannot be taken at face value (None: they can): ``implausibility``."""
        return implausibility(self.spec, self.num_tokens, self.num_documents, self.metadata, self.self_dominances())

    def describe(self) -> dict[str, Any]:
        """A small dict for cards and tables."""
        return {
            "sketch_id": self.sketch_id,
            "base_model": self.metadata.get("base_model"),
            "dataset": self.metadata.get("dataset"),
            "num_tokens": self.num_tokens,
            "num_documents": self.num_documents,
            "m": self.spec.m,
            "estimator": self.spec.estimator,
        }

    # -- serialisation ----------------------------------------------------------------------------
    def _header(self) -> dict[str, str]:
        spec = self.spec
        fingerprint = spec.model_fingerprint
        header = {k: v for k, v in self.metadata.items() if k not in _RESERVED_KEYS}
        header.update(
            {
                "format_version": str(FORMAT_VERSION),
                "kind": "fishersketch-signature",
                "sketch_id": spec.sketch_id,
                "spec": json.dumps(spec.to_dict(), sort_keys=True),
                "m": str(spec.m),
                "seed": str(spec.seed),
                "estimator": spec.estimator,
                "granularity": spec.granularity,
                "fisher": spec.fisher,
                "d": str(spec.d),
                "vocab_size": str(spec.vocab_size),
                "head_checksum": fingerprint.head_checksum if fingerprint else "",
                "num_documents": str(self.num_documents),
                "num_tokens": str(self.num_tokens),
                "library_version": self.metadata["library_version"],
                "created": self.metadata["created"],
            }
        )
        if fingerprint and fingerprint.tokenizer_checksum:
            header["tokenizer_checksum"] = fingerprint.tokenizer_checksum
        return dict(sorted(header.items()))

    def _tensors(self) -> dict[str, torch.Tensor]:
        tensors = {
            "joint": self.joint.float().contiguous(),
            "activation": self.activation.float().contiguous(),
            "error": self.error.float().contiguous(),
            "split_norms": self.split_norms.double().contiguous(),
        }
        if (reflection := self.spec.reflection_tensor) is not None:
            tensors["reflection"] = reflection
        return tensors

    @staticmethod
    def _checksum(tensors: dict[str, torch.Tensor], header: dict[str, str]) -> str:
        digest = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
        for name in sorted(tensors):
            digest.update(name.encode())
            digest.update(tensors[name].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())  # any dtype
        return digest.hexdigest()[:32]

    def to_bytes(self) -> bytes:
        tensors, header = self._tensors(), self._header()
        header["checksum"] = self._checksum(tensors, header)
        return _serialize(tensors, header)

    def save(self, path: str | os.PathLike) -> None:
        """Write the safetensors file atomically (``core.atomic``: a failure is an ``InputError``, the old file kept)."""
        data = self.to_bytes()
        with atomic_path(path) as temporary, open(temporary, "wb") as handle:
            handle.write(data)

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> Signature:
        """The signature in ``data``; ``SignatureFileError`` (message starting with ``source``) for anything else.

        The checksum detects damage, not forgery (anyone can recompute it), so the loader also checks what
        ``alignment`` relies on: the tensors' names, dtypes and shapes, finite values, positive split norms,
        and counts of at least 2 documents with at least one scored token each."""
        try:
            tensors = load(data)
            header_length = int.from_bytes(data[:8], "little")
            header = (
                read_json(
                    data[8 : 8 + header_length],
                    f"{source}: its header",
                    max_bytes=MAX_SIGNATURE_BYTES,
                    error=SignatureFileError,
                ).get("__metadata__")
                or {}
            )
        except (SafetensorError, ValueError, OSError, AttributeError) as exc:
            raise SignatureFileError(f"{source}: not a readable safetensors signature ({exc})") from exc
        if header.get("kind") != "fishersketch-signature":
            raise SignatureFileError(f"{source}: not a fisherhub signature (metadata kind={header.get('kind')!r})")
        if header.get("format_version") != str(FORMAT_VERSION):
            raise SignatureFileError(
                f"{source}: signature format version {header.get('format_version')!r} is not supported by this "
                f"fisherhub (reads version {FORMAT_VERSION}); upgrade the library"
            )
        stored = header.pop("checksum", None)
        if stored != cls._checksum(tensors, header):
            raise SignatureFileError(f"{source}: checksum mismatch: the file was edited or corrupted")
        try:
            spec = SketchSpec.from_json(header["spec"], tensors.get("reflection"), "its spec")
            _check_stored_tensors(tensors, spec)
            num_tokens, num_documents = _count(header, "num_tokens"), _count(header, "num_documents")
            if not 2 <= num_documents <= num_tokens < 2**63:
                raise SignatureFileError(
                    f"num_tokens = {num_tokens} and num_documents = {num_documents}: a signature has at least 2 "
                    "documents, each with at least one scored token"
                )
            signature = cls(
                spec=spec,
                joint=tensors["joint"],
                activation=tensors["activation"],
                error=tensors["error"],
                split_norms=tensors["split_norms"],
                num_tokens=num_tokens,
                num_documents=num_documents,
                metadata={
                    k: v for k, v in header.items() if k not in _RESERVED_KEYS or k in ("library_version", "created")
                },
            )
        except FisherHubError as exc:
            raise SignatureFileError(f"{source}: {exc}") from exc
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SignatureFileError(f"{source}: malformed signature ({exc!r})") from exc
        if spec.sketch_id != header.get("sketch_id"):
            raise SignatureFileError(
                f"{source}: stored sketch id {header.get('sketch_id')} does not match its spec ({spec.sketch_id})"
            )
        return signature

    @classmethod
    def load(cls, path: str | os.PathLike) -> Signature:
        """The signature in the file at ``path``; anything but a regular file of at most ``MAX_SIGNATURE_BYTES``
        is refused unread (a FIFO would block, a huge file fill memory)."""
        try:
            if os.path.exists(path) and not os.path.isfile(path):
                raise SignatureFileError(f"cannot read signature file {path}: not a regular file")
            if (problem := oversized(os.path.getsize(path))) is not None:
                raise SignatureFileError(f"{path}: {problem}")
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise SignatureFileError(f"cannot read signature file {path}: {exc.strerror}") from exc
        return cls.from_bytes(data, source=os.fspath(path))
