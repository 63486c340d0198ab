"""The geometries of an alignment, each spelled once: name, where its value and standard error live, null
value, label, and the significance rules (SPEC §2, "Geometries and significance"). No torch: every table,
plot, legend, ranking, verdict and benchmark reads these.

Head geometries are fields of ``AlignmentResult`` / ``AlignmentMatrix`` (A, S_a, S_e, ρ); ``head_input`` and
``network`` are the Fisher alignment A of another signature kind (``signature``); the shrunk ones are A with ρ
shrunk (``fisherhub.analysis.shrinkage``), with A's standard error.

Significance, one rule per question:

- *Is this one value different from its null?* (a cell of a table or heatmap, ρ defined, ρ ≠ 1): more than
  ``SIGNIFICANCE_Z`` standard errors from ``null`` on the side the geometry can depart to (above 0 for the
  cosines, whose true values are ≥ 0; either side of 1 for ρ). Tables and heatmaps also show exact values
  (standard error 0) as significant.
- *Among n candidates, is any aligned with the target, do they differ, does ρ differ from 1 anywhere?*
  (separation, regime, the candidates ``Selection.weights`` mixes): family level ``ALPHA``, Bonferroni over
  the n candidates (``bonferroni_z``).
- *Is #1 clearly better than #2?* (the verdict): a gap of at least ``CLEAR_GAP_Z`` standard errors.
"""

from __future__ import annotations

import dataclasses
from statistics import NormalDist
from typing import Any

#: one value is significant when more than this many standard errors from its null
SIGNIFICANCE_Z = 2.0
#: family-level significance of every test over a set of candidates (Bonferroni-corrected over them)
ALPHA = 0.05
#: #1 is "clearly better" when it leads #2 by at least this many standard errors of the difference
CLEAR_GAP_Z = 2.0


def bonferroni_z(alpha: float, comparisons: int, two_sided: bool = False) -> float:
    """The z beyond which one of ``comparisons`` normal tests is significant at family level ``alpha``."""
    tail = alpha / max(comparisons, 1) / (2 if two_sided else 1)
    return NormalDist().inv_cdf(1.0 - tail)


@dataclasses.dataclass(frozen=True)
class Geometry:
    """One geometry: its ``name`` (the ``score=`` key), short ``symbol`` (column headers) and its ASCII ``key``
    (keys of JSON results and calibration files), ``label`` (titles, legends, benchmark tables), the ``AlignmentResult`` fields of its value and standard error (``field`` None:
    computed, see the module docstring), the ``signature`` kind whose alignment it reads, the signature
    ``sketch`` it is the cosine of (None: a ratio or computed), its ``null`` value and whether departures from it
    count on both sides."""

    name: str
    symbol: str
    key: str
    label: str
    field: str | None
    stderr_field: str
    signature: str = "head"
    sketch: str | None = None
    null: float = 0.0
    two_sided: bool = False

    def value(self, result: Any) -> Any:
        """The value of this geometry in ``result`` (an ``AlignmentResult`` or ``AlignmentMatrix`` of its kind)."""
        if self.field is None:
            raise ValueError(f"{self.name} is computed from the candidates' alignments (fisherhub.analysis.shrinkage)")
        return getattr(result, self.field)

    def stderr(self, result: Any) -> Any:
        return getattr(result, self.stderr_field)

    def significant(self, value: Any, stderr: Any) -> Any:
        """More than ``SIGNIFICANCE_Z`` standard errors from ``null`` (on either side when ``two_sided``, above it
        otherwise); an exact value (stderr 0) when it is not the null; False for NaN. Floats or tensors
        (element-wise)."""
        departure = abs(value - self.null) if self.two_sided else value - self.null
        return departure > SIGNIFICANCE_Z * stderr


GEOMETRIES: dict[str, Geometry] = {
    g.name: g
    for g in (
        Geometry("fisher", "A", "A", "Fisher alignment A", "fisher", "stderr", sketch="joint"),
        Geometry(
            "activation", "S_a", "S_a", "activation-only S_a", "activation", "activation_stderr", sketch="activation"
        ),
        Geometry("error", "S_e", "S_e", "error-only S_e", "error", "error_stderr", sketch="error"),
        Geometry(
            "coupling",
            "ρ",
            "rho",
            "coupling ρ = A / (S_a S_e)",
            "coupling",
            "coupling_stderr",
            null=1.0,
            two_sided=True,
        ),
        Geometry(
            "head_input",
            "A_δ",
            "A_head_input",
            "head-input A (a, δ = Wᵀe)",
            "fisher",
            "stderr",
            signature="head-input",
            sketch="joint",
        ),
        Geometry(
            "network", "A_net", "A_network", "network-level A", "fisher", "stderr", signature="network", sketch="joint"
        ),
        Geometry("fisher_shrunk", "A_ρ̃", "A_shrunk", "A, ρ shrunk to the cohort mean", None, "stderr"),
        Geometry(
            "fisher_shrunk_separable", "A_ρ̃1", "A_shrunk_separable", "A, ρ shrunk toward 1 (separable)", None, "stderr"
        ),
    )
}
#: A, S_a, S_e: the cosines of a head signature's three sketches (the geometries a selection's rows rank by)
HEAD_SCORES = ("fisher", "activation", "error")
#: what selection ranks candidates by: one of ``HEAD_SCORES``, or auto: the geometry that carries the signal
#: among the candidates (``analysis.auto``: the regime readout)
SCORES = (*HEAD_SCORES, "auto")
#: what ``select_adapter`` and ``fisherhub select`` rank by unless told: auto was never significantly worse than A
#: on the four selection suites and better on the verbalizer one (benchmarks/RESULTS.md)
DEFAULT_SCORE = "auto"
#: the head decomposition A = ρ · S_a · S_e, as tables and heatmaps show it
DECOMPOSITION = (*HEAD_SCORES, "coupling")
#: the geometries computed from the candidates' alignments (ρ shrunk), not read from one alignment
SHRUNK = ("fisher_shrunk", "fisher_shrunk_separable")


def label(name: str) -> str:
    """The label of geometry ``name`` (the name itself for a name not in ``GEOMETRIES``)."""
    geometry = GEOMETRIES.get(name)
    return name if geometry is None else geometry.label


def network_label(module_set: str) -> str:
    """The label of the network-level A over ``module_set``."""
    return f"{GEOMETRIES['network'].label}, {module_set}"
