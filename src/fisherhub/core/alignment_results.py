"""What an alignment gives, keyed by geometry name (``core.geometry``): ``AlignmentResult`` for a pair of
signatures, ``AlignmentMatrix`` for all pairs of several, each with the reasons its numbers are not to be trusted
(``core.plausibility``). ``core.alignment`` computes them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch

from fisherhub.core.errors import InputError
from fisherhub.core.geometry import GEOMETRIES


@dataclasses.dataclass(frozen=True)
class AlignmentResult:
    """The alignment of two signatures, keyed by geometry name (``core.geometry``: A, S_a, S_e, the coupling
    ρ = A / (S_a S_e), and any geometry registered with a kernel), with standard errors (``alignment`` makes
    one; ``AlignmentMatrix.pair`` reads one out of a matrix). ``.fisher``, ``.activation``, ``.error``,
    ``.coupling`` and their ``…stderr`` read the built-in geometries.

    Args:
        values (`dict[str, float | None]`):
            Geometry name -> its value; None where it is undefined (ρ where S_a or S_e is within
            ``SIGNIFICANCE_Z`` standard errors of 0).
        stderrs (`dict[str, float | None]`):
            Geometry name -> its standard error (None with the value).
        sketch_id (`str`):
            The sketch id both signatures share.
        norm_clamped (`bool`, *optional*):
            A split-sample norm of either signature was not resolved: the values are shrunk toward 0, trust
            the standard errors.
        source_doubt (`str`, *optional*):
            Why the source's own numbers are not what the math allows (``Signature.findings``).
        target_doubt (`str`, *optional*):
            The same of the target.
        pair_doubt (`str`, *optional*):
            Why the pair's estimates are not what the math allows (``plausibility.pair_findings``).
        source_noise (`str`, *optional*):
            A short source's unresolved split norms beyond the self-dominance bound: its alignments are noise.
        target_noise (`str`, *optional*):
            The same of the target.
        pair_noise (`str`, *optional*):
            The pair's estimates outside what the math allows where a signature has too few documents to tell.
    """

    values: dict[str, float | None]
    stderrs: dict[str, float | None]
    sketch_id: str
    norm_clamped: bool = False
    #: why the source's / the target's own numbers are not what the math allows (``Signature.findings``), and why
    #: the pair's are not (``plausibility.pair_findings``); None where they are
    source_doubt: str | None = None
    target_doubt: str | None = None
    pair_doubt: str | None = None
    #: a short signature's unresolved split norms beyond the self-dominance bound (``Signature.findings``): its
    #: alignments are noise (warned, ranked after the plausible ones, not refused)
    source_noise: str | None = None
    target_noise: str | None = None
    #: the pair's estimates outside what the math allows where a signature has too few documents to tell
    #: (``plausibility.short_noise``)
    pair_noise: str | None = None

    @property
    def doubt(self) -> str | None:
        """Why these numbers cannot be taken at face value (None: they can), each reason naming its check."""
        return _joined(("source", self.source_doubt), ("target", self.target_doubt), ("", self.pair_doubt))

    @property
    def noise(self) -> str | None:
        """Why these numbers are noise (None: they are not): a side's split norms not resolved beyond the
        self-dominance bound, or the pair's estimates out of range with too few documents to tell."""
        return _joined(("source", self.source_noise), ("target", self.target_noise), ("", self.pair_noise))

    @property
    def plausible(self) -> bool:
        return self.doubt is None

    def _number(self, mapping: dict[str, float | None], name: str) -> float:
        value = mapping[name]
        return math.nan if value is None else value

    @property
    def fisher(self) -> float:
        """A, the cosine of the two joint sketches (split-sample corrected): the Fisher alignment."""
        return self._number(self.values, "fisher")

    @property
    def activation(self) -> float:
        """S_a, the cosine of the activation sketches (what the inputs share)."""
        return self._number(self.values, "activation")

    @property
    def error(self) -> float:
        """S_e, the cosine of the error sketches (what the predicted words share)."""
        return self._number(self.values, "error")

    @property
    def coupling(self) -> float | None:
        """ρ = A / (S_a S_e), None where undefined."""
        return self.values["coupling"]

    @property
    def stderr(self) -> float:
        return self._number(self.stderrs, "fisher")

    @property
    def activation_stderr(self) -> float:
        return self._number(self.stderrs, "activation")

    @property
    def error_stderr(self) -> float:
        return self._number(self.stderrs, "error")

    @property
    def coupling_stderr(self) -> float | None:
        return self.stderrs["coupling"]

    @property
    def coupling_significant(self) -> bool:
        """Whether ρ is defined and departs from 1 by more than ``SIGNIFICANCE_Z`` standard errors."""
        coupling, stderr = self.coupling, self.coupling_stderr
        return coupling is not None and bool(GEOMETRIES["coupling"].significant(coupling, stderr))

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AlignmentResult:
        """The result of a flat record (``as_dict``'s; the geometries it holds, ``coupling_significant``
        recomputed)."""
        held = [g for g in GEOMETRIES.values() if g.kernel is not None and g.name in record]
        return cls(
            {g.name: record[g.name] for g in held},
            {g.name: record[g.stderr_field] for g in held},
            record["sketch_id"],
            bool(record.get("norm_clamped", False)),
            **{name: record.get(name) for name in _FINDINGS},
        )

    def replace(self, **fields: Any) -> AlignmentResult:
        """This result with some values or standard errors replaced, named by their keys in ``as_dict``."""
        record = self.as_dict()
        unknown = sorted(set(fields) - set(record))
        if unknown:
            raise InputError(f"no field {', '.join(unknown)} in an alignment; its fields are {', '.join(record)}")
        return AlignmentResult.from_record({**record, **fields})

    def as_dict(self) -> dict[str, float | bool | str | None]:
        """A flat record: every computed geometry's value, then its standard error (by ``stderr_field``), then
        ``coupling_significant``, ``sketch_id``, ``norm_clamped``, the doubts and noise of each side and of the
        pair, and ``doubt`` and ``noise``."""
        return {
            **self.values,
            **{GEOMETRIES[name].stderr_field: se for name, se in self.stderrs.items()},
            "coupling_significant": self.coupling_significant,
            "sketch_id": self.sketch_id,
            "norm_clamped": self.norm_clamped,
            **{name: getattr(self, name) for name in _FINDINGS},
            "doubt": self.doubt,
            "noise": self.noise,
        }


#: the fields of an ``AlignmentResult`` that say why its numbers are not to be trusted, or are noise
_FINDINGS = ("source_doubt", "target_doubt", "pair_doubt", "source_noise", "target_noise", "pair_noise")


def _joined(*reasons: tuple[str, str | None]) -> str | None:
    """The reasons given, each after its subject ("subject: reason"; none for an empty subject), or None."""
    given = [f"{subject}: {reason}" if subject else reason for subject, reason in reasons if reason]
    return "; ".join(given) or None


@dataclasses.dataclass(frozen=True)
class AlignmentMatrix:
    """All-pairs alignments of n signatures (``alignment_matrix`` makes one), keyed by geometry name like
    ``AlignmentResult``: each value and standard error an (n, n) float64 tensor, symmetric (NaN where a
    geometry is undefined); ``pair(i, j)`` reads one pair.

    Args:
        names (`list[str]`):
            The signatures' names, in the order of the rows.
        values (`dict[str, torch.Tensor]`):
            Geometry name -> its value for every pair (A is 1 on the diagonal).
        stderrs (`dict[str, torch.Tensor]`):
            Geometry name -> its standard errors.
        sketch_id (`str`):
            The sketch id all the signatures share.
        norm_clamped (`torch.Tensor`):
            (n, n) bool: either signature of the pair has a clamped split-sample norm.
        signature_doubts (`tuple[str | None, ...]`, *optional*):
            Per signature: why its own numbers are not what the math allows, or None.
        signature_noise (`tuple[str | None, ...]`, *optional*):
            Per signature: its unresolved split norms beyond the self-dominance bound, or None.
        pair_doubts (`tuple[tuple[str | None, ...], ...]`, *optional*):
            (n, n): why a pair's estimates are not what the math allows, or None.
        pair_noise (`tuple[tuple[str | None, ...], ...]`, *optional*):
            (n, n): the pair's noise, or None.
    """

    names: list[str]
    values: dict[str, torch.Tensor]
    stderrs: dict[str, torch.Tensor]
    sketch_id: str
    norm_clamped: torch.Tensor
    #: per signature: why its own numbers are not what the math allows (``Signature.findings``), or None
    signature_doubts: tuple[str | None, ...] = ()
    #: per signature: its unresolved split norms beyond the self-dominance bound (``Signature.findings``), or None
    signature_noise: tuple[str | None, ...] = ()
    #: (n, n): why a pair's estimates are not what the math allows, and their noise (``plausibility.pair_findings``)
    pair_doubts: tuple[tuple[str | None, ...], ...] = ()
    pair_noise: tuple[tuple[str | None, ...], ...] = ()

    def doubt(self, i: int, j: int) -> str | None:
        """Why the alignment of tasks i and j cannot be taken at face value (None: it can), naming the tasks."""
        sides = (i,) if i == j else (i, j)
        return _joined(*((self.names[k], self.signature_doubts[k]) for k in sides), ("", self.pair_doubts[i][j]))

    def noise(self, i: int, j: int) -> str | None:
        """Why the alignment of tasks i and j is noise (``AlignmentResult.noise``), naming the tasks."""
        sides = (i,) if i == j else (i, j)
        return _joined(*((self.names[k], self.signature_noise[k]) for k in sides), ("", self.pair_noise[i][j]))

    def doubted(self) -> torch.Tensor:
        """(n, n) bool: the pairs with a ``doubt``."""
        n = len(self.names)
        return torch.tensor([[self.doubt(i, j) is not None for j in range(n)] for i in range(n)], dtype=torch.bool)

    @property
    def fisher(self) -> torch.Tensor:
        return self.values["fisher"]

    @property
    def activation(self) -> torch.Tensor:
        return self.values["activation"]

    @property
    def error(self) -> torch.Tensor:
        return self.values["error"]

    @property
    def coupling(self) -> torch.Tensor:
        return self.values["coupling"]

    @property
    def stderr(self) -> torch.Tensor:
        return self.stderrs["fisher"]

    @property
    def activation_stderr(self) -> torch.Tensor:
        return self.stderrs["activation"]

    @property
    def error_stderr(self) -> torch.Tensor:
        return self.stderrs["error"]

    @property
    def coupling_stderr(self) -> torch.Tensor:
        return self.stderrs["coupling"]

    def pair(self, i: int, j: int) -> AlignmentResult:
        """The alignment of signatures ``i`` and ``j`` (a NaN value, and its standard error, as None), with the
        doubts and noise of each and of the pair."""
        values: dict[str, float | None] = {}
        stderrs: dict[str, float | None] = {}
        for name, matrix in self.values.items():
            value = float(matrix[i, j])
            defined = not math.isnan(value)
            values[name] = value if defined else None
            stderrs[name] = float(self.stderrs[name][i, j]) if defined else None
        return AlignmentResult(
            values,
            stderrs,
            self.sketch_id,
            bool(self.norm_clamped[i, j]),
            source_doubt=self.signature_doubts[i],
            target_doubt=self.signature_doubts[j],
            pair_doubt=self.pair_doubts[i][j],
            source_noise=self.signature_noise[i],
            target_noise=self.signature_noise[j],
            pair_noise=self.pair_noise[i][j],
        )
