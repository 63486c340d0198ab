"""``SketchSpec``: everything that must agree for two signatures to be comparable (SPEC §3)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any

import torch

from fisherhub.core.registry import (
    CHOICES,
    DEFAULT_ESTIMATOR,
    DEFAULT_M,
    DEFAULT_SEED,
    ERROR_SPACES,
    FISHER_TYPES,
    GRANULARITIES,
    KERNELS,
    check_choice,
)
from fisherhub.core.bounded import read_json
from fisherhub.core.errors import MODEL_FIELDS, IncompatibleSignaturesError, InputError, SignatureFileError

FORMAT_VERSION = 1

#: two signatures compare when their reflections' pilot directions are this close (radians): the bias
#: of comparing (R₁a·R₂a')² with (a·a')² is then ≲ 10⁻³ relative, while devices computing the same
#: pilot in float32 differ by ~10⁻⁷.
REFLECTION_TOLERANCE = 1e-4


@dataclasses.dataclass(frozen=True)
class ModelFingerprint:
    """Checksums of the base model's head weights (float32) and tokenizer, set by model capture
    (``HeadModel.fingerprint``); both enter the sketch id.

    Args:
        head_checksum (`str`):
            SHA-256 of the head's [W | b] as stored, in float32.
        tokenizer_checksum (`str`, *optional*):
            Checksum of the tokenizer's vocabulary (None: sketched without a tokenizer).
    """

    head_checksum: str
    tokenizer_checksum: str | None = None


#: the longest spec JSON read (a head spec is ~250 bytes; a network spec lists its modules, ~50 bytes each)
MAX_SPEC_BYTES = 2**20
#: rows of a matrix hashed at a time by ``tensor_checksum`` (about this many bytes in float32).
CHECKSUM_BLOCK_BYTES = 16 * 2**20


def tensor_checksum(tensor: torch.Tensor, column: torch.Tensor | None = None) -> str:
    """sha256 (first 16 hex) of the float32 little-endian bytes and shape of ``tensor``, or of
    ``[tensor | column]`` (a column appended, e.g. a head's bias). Streamed over blocks of rows, so no
    float32 copy of the whole tensor is ever made."""
    matrix = tensor.detach().reshape(tensor.shape[0], -1) if tensor.ndim > 1 else tensor.detach().reshape(-1, 1)
    shape = tuple(tensor.shape) if column is None else (tensor.shape[0], tensor.shape[1] + 1)
    digest = hashlib.sha256(repr(shape).encode())
    rows = max(1, CHECKSUM_BLOCK_BYTES // (4 * (matrix.shape[1] + (column is not None))))
    for start in range(0, matrix.shape[0], rows):
        block = matrix[start : start + rows].to("cpu", torch.float32)
        if column is not None:
            block = torch.cat([block, column.detach()[start : start + rows, None].to("cpu", torch.float32)], dim=1)
        digest.update(block.contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class SketchSpec:
    """A FisherSketch configuration.

    ``reflection`` is the optional pilot activation mean (d floats) whose direction a Householder
    reflection maps onto the first axis before the activation projections; it is stored in every
    signature and reused when sketching ``like`` one. Only whether a reflection is used enters the
    sketch id; the directions of two signatures must agree within ``REFLECTION_TOLERANCE``, so
    signatures sketched independently (another machine, another device) stay comparable.

    ``error_space`` (head sketches): "logits" sketches (a, e), "head-input" sketches (a, δ = Wᵀe).
    ``modules`` (network sketches, SPEC §2b, ``core.network``): the sketched linear modules as
    (name, in_features, out_features), with ``kernel`` "full" or "block"; d and vocab_size stay the head's.
    Fields at their defaults stay out of the sketch id, so head signatures keep their ids.

    Args:
        d (`int`):
            The width of the head's input (hidden size).
        vocab_size (`int`):
            K, the rows of the head.
        m (`int`, *optional*, defaults to `DEFAULT_M`):
            Random features per sketch.
        seed (`int`, *optional*, defaults to `DEFAULT_SEED`):
            Seed of the random projections, in [0, 2**63).
        estimator (`str`, *optional*, defaults to `DEFAULT_ESTIMATOR`):
            The random-feature estimator, one of ``ESTIMATORS``.
        granularity (`str`, *optional*, defaults to `"token"`):
            "token": every scored token is an example; "sequence": every document.
        fisher (`str`, *optional*, defaults to `"empirical"`):
            "empirical": labels from the data; "true": labels sampled from the model.
        model_fingerprint (`ModelFingerprint`, *optional*):
            Checksums of the head and tokenizer the sketch belongs to.
        reflection (`tuple[float, ...]`, *optional*):
            The pilot activation mean (d floats) of the Householder reflection.
        error_space (`str`, *optional*, defaults to `"logits"`):
            "logits" or "head-input" (see above).
        modules (`tuple[tuple[str, int, int], ...]`, *optional*):
            Network sketches: the linear modules as (name, in_features, out_features).
        kernel (`str`, *optional*, defaults to `"full"`):
            Network sketches: "full" or "block".

    Raises:
        `InputError`: a value out of range or not one of its choices, a reflection of another length than d
            or not finite, a network spec with an error space or reflection.
    """

    d: int
    vocab_size: int
    m: int = DEFAULT_M
    seed: int = DEFAULT_SEED
    estimator: str = DEFAULT_ESTIMATOR
    granularity: str = GRANULARITIES[0]
    fisher: str = FISHER_TYPES[0]
    model_fingerprint: ModelFingerprint | None = None
    reflection: tuple[float, ...] | None = dataclasses.field(default=None, repr=False)
    error_space: str = ERROR_SPACES[0]
    modules: tuple[tuple[str, int, int], ...] | None = dataclasses.field(default=None, repr=False)
    kernel: str = KERNELS[0]

    def __post_init__(self) -> None:
        for name in ("d", "vocab_size", "m"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"SketchSpec.{name} must be a positive int, got {value!r}")
        if not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise InputError(f"SketchSpec.seed must be an int in [0, 2**63), got {self.seed!r}")
        for name in CHOICES:
            check_choice(name, getattr(self, name), f"SketchSpec.{name}")
        if self.reflection is not None:
            values = tuple(float(v) for v in self.reflection)
            if len(values) != self.d:
                raise InputError(f"reflection has {len(values)} entries, expected d={self.d}")
            vector = torch.tensor(values, dtype=torch.float32)
            if not torch.isfinite(vector).all() or vector.norm() == 0:
                raise InputError("reflection (pilot activation mean) must be finite and non-zero")
            object.__setattr__(self, "reflection", tuple(vector.tolist()))
        if self.modules is not None:
            object.__setattr__(self, "modules", _checked_modules(self.modules))
            if self.error_space != "logits" or self.reflection is not None:
                raise InputError("network sketches (modules=...) take neither an error space nor a reflection")
        elif self.kernel != "full":
            raise InputError(f"kernel={self.kernel!r} is for network sketches only (give modules=...)")

    @property
    def error_dimension(self) -> int:
        """Width of a head sketch's error side: K for e, d for δ = Wᵀe."""
        return self.d if self.error_space == "head-input" else self.vocab_size

    # -- identity -------------------------------------------------------------------------------
    @property
    def reflection_tensor(self) -> torch.Tensor | None:
        return None if self.reflection is None else torch.tensor(self.reflection, dtype=torch.float32)

    def identity_fields(self) -> dict[str, Any]:
        """The fields hashed into the sketch id (of the reflection, only whether there is one)."""
        fingerprint = self.model_fingerprint or ModelFingerprint(head_checksum="", tokenizer_checksum=None)
        return {
            "format_version": FORMAT_VERSION,
            "estimator": self.estimator,
            "m": self.m,
            "seed": self.seed,
            "granularity": self.granularity,
            "fisher": self.fisher,
            "d": self.d,
            "vocab_size": self.vocab_size,
            "head_checksum": fingerprint.head_checksum,
            "tokenizer_checksum": fingerprint.tokenizer_checksum,
            "reflection": None if self.reflection is None else "householder-pilot-mean",
            **self._extension_fields(),
        }

    def _extension_fields(self) -> dict[str, Any]:
        """The fields added after format version 1 that differ from their defaults."""
        fields: dict[str, Any] = {}
        if self.error_space != "logits":
            fields["error_space"] = self.error_space
        if self.modules is not None:
            fields["modules"] = [list(module) for module in self.modules]
            fields["kernel"] = self.kernel
        return fields

    @property
    def sketch_id(self) -> str:
        """First 12 hex digits of sha256 over the canonical JSON of ``identity_fields()``."""
        canonical = json.dumps(self.identity_fields(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    def differences(self, other: SketchSpec) -> dict[str, tuple[Any, Any]]:
        """Identity fields that differ between two specs (empty when comparable), and the reflection
        when both have one of the same size d and their pilot directions are more than ``REFLECTION_TOLERANCE`` apart."""
        mine, theirs = self.identity_fields(), other.identity_fields()
        differing = {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}
        model_or_reflection = {"reflection", *MODEL_FIELDS}  # another model's pilot differs as a matter of course
        if self.reflection is not None and other.reflection is not None and not model_or_reflection & set(differing):
            angle = self.reflection_angle(other)
            if angle > REFLECTION_TOLERANCE:
                differing["reflection"] = (
                    f"pilot mean {self.reflection_checksum}",
                    f"pilot mean {other.reflection_checksum}, {angle:.2g} rad apart (> {REFLECTION_TOLERANCE:g}): "
                    "sketch one --like the other",
                )
        return differing

    def compatible_with(self, other: SketchSpec) -> bool:
        """Whether signatures of the two specs can be compared: the one decision of comparability (same sketch
        id, and pilot directions within ``REFLECTION_TOLERANCE``) used by alignment, merging, the Hub filters
        (which first narrow by sketch id from headers), selection and the metric."""
        return not self.differences(other)

    def require_compatible(
        self, other: SketchSpec, what: str = "signatures", base_models: tuple[str | None, str | None] | None = None
    ) -> None:
        """``IncompatibleSignaturesError`` naming the fields that differ (and the two ``base_models`` the
        signatures name, when given), unless ``compatible_with(other)``."""
        differences = self.differences(other)
        if differences:
            raise IncompatibleSignaturesError(differences, what=what, base_models=base_models)

    @property
    def reflection_checksum(self) -> str | None:
        tensor = self.reflection_tensor
        return None if tensor is None else tensor_checksum(tensor)

    def reflection_angle(self, other: SketchSpec) -> float:
        """Angle (radians) between the two pilot directions, in float64."""
        mine, theirs = self.reflection_tensor, other.reflection_tensor
        assert mine is not None and theirs is not None  # asked of two reflected specs
        mine, theirs = mine.double(), theirs.double()
        cosine = float(mine @ theirs / (mine.norm() * theirs.norm()))
        return math.acos(min(1.0, max(-1.0, cosine)))

    # -- derived specs ----------------------------------------------------------------------------
    def with_fingerprint(self, head_checksum: str, tokenizer_checksum: str | None = None) -> SketchSpec:
        return dataclasses.replace(self, model_fingerprint=ModelFingerprint(head_checksum, tokenizer_checksum))

    def with_reflection(self, pilot_mean: torch.Tensor | None) -> SketchSpec:
        values = None if pilot_mean is None else tuple(pilot_mean.detach().float().cpu().tolist())
        return dataclasses.replace(self, reflection=values)

    # -- (de)serialisation ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict; the reflection vector travels separately (see ``Signature``)."""
        extension = ("error_space", "modules", "kernel")
        data = {k: v for k, v in dataclasses.asdict(self).items() if k != "reflection" and k not in extension}
        data["reflection_checksum"] = self.reflection_checksum
        data.update(self._extension_fields())
        return data

    @classmethod
    def from_json(cls, text: str, reflection: torch.Tensor | None = None, where: str = "the spec") -> SketchSpec:
        """``from_dict`` of the JSON ``text`` (a file's, read by ``core.bounded.read_json``: at most
        ``MAX_SPEC_BYTES``); ``SignatureFileError`` naming ``where`` when it is not a spec's JSON object."""
        data = read_json(text, where, max_bytes=MAX_SPEC_BYTES, error=SignatureFileError)
        if not isinstance(data, dict):
            raise SignatureFileError(f"{where} is a JSON {type(data).__name__}, not a spec's object")
        return cls.from_dict(data, reflection)

    @classmethod
    def from_dict(cls, data: dict[str, Any], reflection: torch.Tensor | None = None) -> SketchSpec:
        fields = {f.name for f in dataclasses.fields(cls)} - {"reflection"}
        unknown = set(data) - fields - {"reflection_checksum"}
        if unknown:
            raise SignatureFileError(f"unknown spec fields {sorted(unknown)}; upgrade fisherhub")
        kwargs = {k: v for k, v in data.items() if k in fields}
        if kwargs.get("model_fingerprint") is not None:
            kwargs["model_fingerprint"] = ModelFingerprint(**kwargs["model_fingerprint"])
        spec = cls(**kwargs).with_reflection(reflection)
        if spec.reflection_checksum != data.get("reflection_checksum"):
            raise SignatureFileError("the stored reflection vector does not match the spec's reflection checksum")
        return spec


def _checked_modules(modules) -> tuple[tuple[str, int, int], ...]:
    """``modules`` as a tuple of (name, in_features, out_features): non-empty, unique names, positive sizes."""
    checked = []
    for module in modules:
        if (
            not isinstance(module, (tuple, list))
            or len(module) != 3
            or not isinstance(module[0], str)
            or not all(isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in module[1:])
        ):
            raise InputError(
                f"each module must be (name, in_features, out_features) with positive sizes, got {module!r}"
            )
        checked.append((module[0], int(module[1]), int(module[2])))
    names = [name for name, _, _ in checked]
    if not checked or len(set(names)) != len(names):
        raise InputError(f"modules must be a non-empty list of distinct module names, got {names}")
    return tuple(checked)
