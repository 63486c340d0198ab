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

from fisherhub.core import plausibility
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
#: the fields of the spec a header also holds as plain strings (other tools read them: cards, listings, the peer
#: package)
_PLAIN_FIELDS = (
    "m",
    "seed",
    "estimator",
    "granularity",
    "fisher",
    "d",
    "vocab_size",
    "head_checksum",
    "tokenizer_checksum",
)
_RESERVED_KEYS = (
    "format_version",
    "kind",
    "sketch_id",
    "spec",
    *_PLAIN_FIELDS,
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


def _plain_fields(spec: SketchSpec) -> dict[str, str]:
    """The ``_PLAIN_FIELDS`` of ``spec`` as a header writes them (the tokenizer checksum only where there is one)."""
    fingerprint = spec.model_fingerprint
    fields = {name: str(getattr(spec, name)) for name in _PLAIN_FIELDS[:7]}
    fields["head_checksum"] = fingerprint.head_checksum if fingerprint else ""
    if fingerprint and fingerprint.tokenizer_checksum:
        fields["tokenizer_checksum"] = fingerprint.tokenizer_checksum
    return fields


#: the checks whose refusals the loader raises (SPEC §3, "Bounded claims")
HEADER_CHECK = "header vs body"
VALUES_CHECK = "values and counts"


def _check_header(header: dict[str, str], spec: SketchSpec) -> None:
    """The header's sketch id is its spec's, its plain fields (``_PLAIN_FIELDS``) say what its spec says, and
    ``clamped_split_norms`` names sketches only; else ``SignatureFileError`` naming the field."""
    if spec.sketch_id != header.get("sketch_id"):
        raise SignatureFileError(
            f"stored sketch id {header.get('sketch_id')!r:.60} does not match its spec ({spec.sketch_id}) (check: "
            f"{HEADER_CHECK})"
        )
    expected = _plain_fields(spec)
    for key in _PLAIN_FIELDS:
        if key in header and header[key] != expected.get(key):
            raise SignatureFileError(
                f"header field {key} = {header[key]!r:.60} but its spec says {expected.get(key)!r}: the header and "
                f"the body disagree (check: {HEADER_CHECK})"
            )
    unresolved = [name for name in header.get(CLAMPED_NORMS_KEY, "").split(",") if name]
    if not set(unresolved) <= {"joint", "activation", "error"}:
        raise SignatureFileError(
            f"{CLAMPED_NORMS_KEY} = {header[CLAMPED_NORMS_KEY]!r:.60} names no sketch of a signature (joint, "
            f"activation, error) (check: {HEADER_CHECK})"
        )


def _count(header: dict[str, str], key: str) -> int:
    value = header[key]
    if not (isinstance(value, str) and value.lstrip("-").isdecimal() and value.isascii()):
        raise SignatureFileError(f"{key} {value!r} is not an integer")
    return int(value)


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
                raise SignatureFileError(f"tensor {name!r} contains NaN or inf (check: {VALUES_CHECK})")
        norms = self.split_norms
        if tuple(norms.shape) != (3,) or not (torch.isfinite(norms).all() and (norms > 0).all()):
            raise SignatureFileError(
                f"split_norms must be 3 positive finite numbers, got {norms.tolist()} (check: {VALUES_CHECK})"
            )
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
        """(lowest, highest) R̂ each sketch (joint, activation, error) can show (``plausibility.dominance_bounds``)."""
        return plausibility.dominance_bounds(self.spec, self.num_tokens, self.num_documents)

    def findings(self) -> tuple[str | None, str | None]:
        """(doubt, noise) of this signature's own numbers (``plausibility.self_dominance_findings``): the doubt says
        why they are not what the math allows (a sketch marked resolved whose R̂ = ‖μ̂‖²/D lies outside
        ``self_dominance_bounds``: its split norm does not fit its mean, so the file was forged or damaged), the
        noise that a sketch its writer flagged unresolved (``clamped_split_norms``) lies outside: its alignments are
        noise. None where there is nothing to say."""
        unresolved = self.metadata.get(CLAMPED_NORMS_KEY, "")
        dominances = self.self_dominances().tolist()
        return plausibility.self_dominance_findings(
            self.spec, self.num_tokens, self.num_documents, unresolved, dominances
        )

    def implausibility(self) -> str | None:
        """Why this signature's numbers cannot be taken at face value (None: they can): the doubt or the noise
        of ``findings``."""
        doubt, noise = self.findings()
        return doubt or noise

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
        header = {k: v for k, v in self.metadata.items() if k not in _RESERVED_KEYS}
        header.update(
            {
                "format_version": str(FORMAT_VERSION),
                "kind": "fishersketch-signature",
                "sketch_id": spec.sketch_id,
                "spec": json.dumps(spec.to_dict(), sort_keys=True),
                **_plain_fields(spec),
                "num_documents": str(self.num_documents),
                "num_tokens": str(self.num_tokens),
                "library_version": self.metadata["library_version"],
                "created": self.metadata["created"],
            }
        )
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
            _check_header(header, spec)
            _check_stored_tensors(tensors, spec)
            num_tokens, num_documents = _count(header, "num_tokens"), _count(header, "num_documents")
            if not 2 <= num_documents <= num_tokens < 2**63:
                raise SignatureFileError(
                    f"num_tokens = {num_tokens} and num_documents = {num_documents}: a signature has at least 2 "
                    f"documents, each with at least one scored token (check: {VALUES_CHECK})"
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
