"""``score="auto"``: the geometry to score by, in a fixed order of preference."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from fisherhub.analysis.regime import Regime, regime
from fisherhub.analysis.scores import Scores
from fisherhub.analysis.separation import Separation, separation
from fisherhub.core.alignment import AlignmentResult
from fisherhub.core.geometry import auto_order, fallback_geometries


@dataclasses.dataclass(frozen=True)
class AutoChoice:
    """What ``score="auto"`` scores by, and why."""

    geometry: str
    regime: Regime
    separations: dict[str, Separation]
    reason: str


def auto_geometry(scores: Mapping[str, Scores], head: Sequence[AlignmentResult]) -> AutoChoice:
    """The geometry carrying the signal, the first in ``core.geometry.auto_order()`` that has it: network-level A
    when given and it separates the candidates; else the head geometry of the regime (coupled / separable: A,
    activation-dark: S_e, error-flat: S_a, ``Geometry.regimes``); else head-input A when given and it
    separates; else nothing separates, and it scores by the least flat (smallest heterogeneity p) of
    ``fallback_geometries()`` (the verdict then says no candidate is clearly better)."""
    head_regime = regime(head)
    separations = {name: separation(s) for name, s in scores.items()}
    for step in auto_order():
        if step == "head" and head_regime.geometry is not None:
            return AutoChoice(
                head_regime.geometry, head_regime, separations, f"head regime {head_regime.name}: {head_regime.reason}"
            )
        if step in scores and separations[step].separates:
            return AutoChoice(
                step,
                head_regime,
                separations,
                f"{step} A separates the candidates "
                f"(heterogeneity p = {separations[step].p_value:.2g}); head regime {head_regime.name}",
            )
    fallback = min(
        (name for name in fallback_geometries() if name in scores), key=lambda name: separations[name].p_value
    )
    return AutoChoice(
        fallback,
        head_regime,
        separations,
        f"no geometry separates the candidates (head regime {head_regime.name}); scored by {fallback}, "
        f"the least flat (heterogeneity p = {separations[fallback].p_value:.2g})",
    )


def auto_scores(scores: Mapping[str, Scores], head: Sequence[AlignmentResult]) -> tuple[Scores, AutoChoice]:
    """The scores ``score="auto"`` ranks by (those of ``auto_geometry``'s choice) and the choice."""
    choice = auto_geometry(scores, head)
    return scores[choice.geometry], choice
