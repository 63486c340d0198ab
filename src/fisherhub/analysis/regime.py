"""Which head geometry carries the signal: coupled, separable, activation-dark, error-flat or no-signal, from
the separation of S_a and S_e and whether ρ = A/(S_a S_e) differs from 1."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from fisherhub.analysis.scores import Scores
from fisherhub.analysis.separation import Separation, separation
from fisherhub.core.alignment import AlignmentResult
from fisherhub.core.errors import InputError
from fisherhub.core.geometry import ALPHA, GEOMETRIES, bonferroni_z, regime_geometry

#: the head regimes; the geometry each scores by is the one registered with it (``Geometry.regimes``)
REGIMES = ("coupled", "separable", "activation-dark", "error-flat", "no-signal")


@dataclasses.dataclass(frozen=True)
class Regime:
    """Which head geometry carries the signal, with the evidence.

    ``coupling_z``: the largest |ρ_i − 1|/se(ρ_i) over the candidates where ρ is defined (None: nowhere),
    against ``coupling_threshold``, the two-sided Bonferroni z over those candidates.
    """

    name: str
    activation: Separation
    error: Separation
    coupling_z: float | None
    coupling_threshold: float | None
    reason: str

    @property
    def geometry(self) -> str | None:
        """The head geometry to score by in this regime (None for no-signal)."""
        return regime_geometry(self.name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "geometry": self.geometry,
            "activation": self.activation.as_dict(),
            "error": self.error.as_dict(),
            "coupling_z": self.coupling_z,
            "coupling_threshold": self.coupling_threshold,
            "reason": self.reason,
        }


def defined_coupling(results: Sequence[AlignmentResult]) -> list[int]:
    """The candidates whose ρ is defined (with a positive standard error)."""
    return [i for i, r in enumerate(results) if r.coupling is not None and r.coupling_stderr]


def regime(results: Sequence[AlignmentResult]) -> Regime:
    """The head regime of the candidates' alignments with one target (module docstring)."""
    if not results:
        raise InputError("no candidates to read a regime from")
    activation, error = (separation(Scores.of(name, results)) for name in ("activation", "error"))
    coupling = GEOMETRIES["coupling"]
    defined = [results[i] for i in defined_coupling(results)]
    coupling_z = max((abs(coupling.value(r) - coupling.null) / coupling.stderr(r) for r in defined), default=None)
    threshold = bonferroni_z(ALPHA, len(defined), two_sided=coupling.two_sided) if defined else None

    def evidence(s: Separation) -> str:
        return (
            f"{GEOMETRIES[s.geometry].symbol} {'separates' if s.separates else 'does not separate'} the candidates "
            f"(heterogeneity p = {s.p_value:.2g}, best {s.best_z:.1f} se vs {s.detection_z:.1f})"
        )

    if activation.separates and error.separates:
        coupled = coupling_z is not None and threshold is not None and coupling_z > threshold
        name = "coupled" if coupled else "separable"
        detail = (
            f"ρ differs from 1 by {coupling_z:.1f} se (threshold {threshold:.1f})"
            if coupled
            else "ρ is consistent with 1: A tracks S_a·S_e"
            if coupling_z is not None
            else "ρ is defined nowhere"
        )
    elif error.separates:
        name, detail = "activation-dark", "the activations do not tell the candidates apart; the errors do"
    elif activation.separates:
        name, detail = "error-flat", "the errors do not tell the candidates apart; the activations do"
    else:
        name, detail = "no-signal", "neither factor tells the candidates apart"
    return Regime(
        name, activation, error, coupling_z, threshold, f"{detail}; {evidence(activation)}; {evidence(error)}"
    )
