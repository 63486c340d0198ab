"""The geometries of an alignment, each spelled once: name, kernel, flags, null value, label, and the
significance rules (SPEC §2, "Geometries and significance"). No torch at import: every table, plot, legend,
ranking, verdict, metric output and benchmark reads these.

A geometry is the one extension point of what an alignment reports. A head geometry has a ``kernel``: its value
and standard error from the three sketches' cosines (``core.alignment`` computes every registered kernel, and
results are keyed by geometry name). ``head_input`` and ``network`` are the Fisher alignment A of another
signature kind (``signature``, ``of``); the shrunk ones are A with ρ shrunk across the candidates
(``fisherhub.analysis.shrinkage``), with A's standard error. Its flags say where it shows: ``rankable``
(candidates can be ranked by it: ``HEAD_SCORES``), ``shown`` (tables, heatmaps, ``compare``: ``DECOMPOSITION``),
``metric_key`` (the ``fisher_alignment`` metric's output), ``regimes`` (the head regimes in which
``score="auto"`` ranks by it), ``auto`` (where a signature kind's A comes in auto's order) and ``fallback``
(its place among what auto ranks by when nothing separates the candidates). A new geometry is one
``register(Geometry(...))`` call.

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
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, overload

from fisherhub.core.registry import SKETCHES

if TYPE_CHECKING:
    import torch

#: one value is significant when more than this many standard errors from its null
SIGNIFICANCE_Z = 2.0
#: family-level significance of every test over a set of candidates (Bonferroni-corrected over them)
ALPHA = 0.05
#: #1 is "clearly better" when it leads #2 by at least this many standard errors of the difference
CLEAR_GAP_Z = 2.0

#: a head geometry's kernel: (cosine, standard error) of each sketch, by ``SKETCHES`` name, each (n, n) float64,
#: and ``same`` ((n, n) bool: pairs of sketches of the same data) -> its (value, standard error), (n, n) each
Kernel = Callable[[Mapping[str, "torch.Tensor"], Mapping[str, "torch.Tensor"], "torch.Tensor"], tuple[Any, Any]]


def student_t_cdf(t: float, df: int) -> float:
    """P(T ≤ t) for Student's t with an integer ``df`` ≥ 1, in closed form (Abramowitz & Stegun 26.7.3–4):
    with θ = atan(t/√df), P(|T| ≤ t) = (2/π)(θ + sin θ Σ_k c_k cos^{2k−1} θ) for odd df and
    sin θ Σ_k c_k cos^{2k} θ for even df, c_k the products of (j − 1)/j over the odd or even j below df."""
    theta = math.atan(abs(t) / math.sqrt(df))
    cos2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    for j in range(3 if df % 2 else 2, df - 1, 2):
        term *= (j - 1) / j * cos2
        total += term
    if df % 2:
        inside = 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0))
    else:
        inside = math.sin(theta) * total
    return 0.5 + math.copysign(inside / 2, t)


def clear_gap_threshold(documents: int) -> float:
    """How many standard errors make a gap clear when its standard error is estimated from ``documents`` paired
    differences: the Student-t quantile with documents − 1 degrees of freedom at the one-sided level of
    ``CLEAR_GAP_Z`` (Φ(2) = 0.977): 13.97 at 2 documents, 4.53 at 3, 2.09 at 31, → ``CLEAR_GAP_Z``; infinite
    below 2 (no spread to judge by)."""
    if documents < 2:
        return math.inf
    level, low, high = NormalDist().cdf(CLEAR_GAP_Z), CLEAR_GAP_Z, 1e4
    while high - low > 1e-9 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if student_t_cdf(middle, documents - 1) < level else (low, middle)
    return high


def bonferroni_z(alpha: float, comparisons: int, two_sided: bool = False) -> float:
    """The z beyond which one of ``comparisons`` normal tests is significant at family level ``alpha``."""
    tail = alpha / max(comparisons, 1) / (2 if two_sided else 1)
    return NormalDist().inv_cdf(1.0 - tail)


@dataclasses.dataclass(frozen=True)
class Geometry:
    """One geometry (see the module docstring).

    ``name`` is the ``score=`` key and the key of results; ``symbol`` the column header; ``key`` the ASCII key of
    JSON results and calibration files; ``label`` titles, legends and benchmark tables; ``stderr_field`` the
    key of its standard error in flat records (``AlignmentResult.as_dict``, ``compare --json``; default
    ``<name>_stderr``). ``kernel`` computes it from one alignment's sketches; without one it is ``of`` (a
    geometry) of an alignment of the ``signature`` kind, or (``of`` None) computed from the candidates'
    alignments, with the standard error of ``"fisher"``. ``sketch``: the signature sketch it is the cosine of
    (None: a ratio or computed); ``null`` and ``two_sided``: its significance rule."""

    name: str
    symbol: str
    key: str
    label: str
    kernel: Kernel | None = dataclasses.field(default=None, repr=False, compare=False)
    of: str | None = None
    stderr_field: str = ""
    signature: str = "head"
    sketch: str | None = None
    null: float = 0.0
    two_sided: bool = False
    rankable: bool = False
    shown: bool = False
    metric_key: str | None = None
    regimes: tuple[str, ...] = ()
    auto: str | None = None
    fallback: int | None = None

    def __post_init__(self) -> None:
        if not self.stderr_field:
            object.__setattr__(self, "stderr_field", f"{self.name}_stderr")
        if self.sketch is not None and self.sketch not in SKETCHES:
            raise ValueError(f"geometry {self.name}: sketch {self.sketch!r} is none of {SKETCHES}")
        if self.auto not in (None, *AUTO_STEPS):
            raise ValueError(f"geometry {self.name}: auto must be one of {AUTO_STEPS}, got {self.auto!r}")

    @property
    def reads(self) -> str | None:
        """The key of its value in a result (``AlignmentResult.values``); None: computed from the candidates."""
        return self.name if self.kernel is not None else self.of

    def value(self, result: Any) -> Any:
        """The value of this geometry in ``result`` (an ``AlignmentResult`` or ``AlignmentMatrix`` of its kind)."""
        if self.reads is None:
            raise ValueError(f"{self.name} is computed from the candidates' alignments (fisherhub.analysis.shrinkage)")
        return result.values[self.reads]

    def stderr(self, result: Any) -> Any:
        """Its standard error in ``result``."""
        return result.stderrs[self.reads or "fisher"]

    def significant(self, value: Any, stderr: Any) -> Any:
        """More than ``SIGNIFICANCE_Z`` standard errors from ``null`` (on either side when ``two_sided``, above it
        otherwise); an exact value (stderr 0) when it is not the null; False for NaN. Floats or tensors
        (element-wise)."""
        departure = abs(value - self.null) if self.two_sided else value - self.null
        return departure > SIGNIFICANCE_Z * stderr


def cosine_of(sketch: str) -> Kernel:
    """The kernel of a sketch's own cosine (and its standard error)."""

    def kernel(cosine, stderr, same):
        return cosine[sketch], stderr[sketch]

    return kernel


def coupling_kernel(cosine, stderr, same):
    """ρ = A / (S_a S_e), NaN unless S_a and S_e are both significant (or the pair is of the same data); its
    standard error by the delta method, |ρ| √((se_A/A)² + (se_a/S_a)² + (se_e/S_e)²)."""
    import torch

    fisher, activation, error = (cosine[name] for name in SKETCHES)
    defined = same | (
        GEOMETRIES["activation"].significant(activation, stderr["activation"])
        & GEOMETRIES["error"].significant(error, stderr["error"])
    )
    nan = torch.full_like(fisher, math.nan)
    coupling = torch.where(defined, fisher / (activation * error), nan)
    relative = torch.sqrt(
        (stderr["joint"] / fisher.abs().clamp_min(1e-300)) ** 2
        + (stderr["activation"] / activation.abs().clamp_min(1e-300)) ** 2
        + (stderr["error"] / error.abs().clamp_min(1e-300)) ** 2
    )
    return coupling, torch.where(defined, coupling.abs() * relative, nan)


#: where a signature kind's A comes in ``score="auto"``'s order: before the head regime, or after it
AUTO_STEPS = ("before-head", "after-head")
#: every geometry, by name, in the order of tables and records (``register`` adds one)
GEOMETRIES: dict[str, Geometry] = {}


def register(geometry: Geometry) -> Geometry:
    """Add ``geometry`` to ``GEOMETRIES`` (a name taken already is an error); returns it."""
    if geometry.name in GEOMETRIES:
        raise ValueError(f"a geometry named {geometry.name!r} is registered already")
    GEOMETRIES[geometry.name] = geometry
    return geometry


class GeometryNames(Sequence[str]):
    """The names of the registered geometries that ``keep``, in registration order, then ``extra``: a live view
    (a geometry registered later is in it)."""

    def __init__(self, keep: Callable[[Geometry], bool], extra: tuple[str, ...] = ()):
        self.keep, self.extra = keep, extra

    def names(self) -> tuple[str, ...]:
        return (*(g.name for g in GEOMETRIES.values() if self.keep(g)), *self.extra)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return self.names()[index]

    def __len__(self) -> int:
        return len(self.names())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __eq__(self, other: object) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, (tuple, list, GeometryNames)) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.names())

    def __repr__(self) -> str:
        return repr(self.names())


for _geometry in (
    Geometry(
        "fisher",
        "A",
        "A",
        "Fisher alignment A",
        cosine_of("joint"),
        stderr_field="stderr",
        sketch="joint",
        rankable=True,
        shown=True,
        metric_key="fisher_alignment",
        regimes=("coupled", "separable"),
        fallback=1,
    ),
    Geometry(
        "activation",
        "S_a",
        "S_a",
        "activation-only S_a",
        cosine_of("activation"),
        sketch="activation",
        rankable=True,
        shown=True,
        metric_key="activation_alignment",
        regimes=("error-flat",),
    ),
    Geometry(
        "error",
        "S_e",
        "S_e",
        "error-only S_e",
        cosine_of("error"),
        sketch="error",
        rankable=True,
        shown=True,
        metric_key="error_alignment",
        regimes=("activation-dark",),
    ),
    Geometry(
        "coupling",
        "ρ",
        "rho",
        "coupling ρ = A / (S_a S_e)",
        coupling_kernel,
        null=1.0,
        two_sided=True,
        shown=True,
        metric_key="coupling",
    ),
    Geometry(
        "head_input",
        "A_δ",
        "A_head_input",
        "head-input A (a, δ = Wᵀe)",
        of="fisher",
        stderr_field="stderr",
        signature="head-input",
        sketch="joint",
        auto="after-head",
        fallback=2,
    ),
    Geometry(
        "network",
        "A_net",
        "A_network",
        "network-level A",
        of="fisher",
        stderr_field="stderr",
        signature="network",
        sketch="joint",
        auto="before-head",
        fallback=0,
    ),
    Geometry("fisher_shrunk", "A_ρ̃", "A_shrunk", "A, ρ shrunk to the cohort mean", stderr_field="stderr"),
    Geometry(
        "fisher_shrunk_separable",
        "A_ρ̃1",
        "A_shrunk_separable",
        "A, ρ shrunk toward 1 (separable)",
        stderr_field="stderr",
    ),
):
    register(_geometry)

#: the geometries an alignment of one signature pair computes (those with a kernel), in record order
COMPUTED = GeometryNames(lambda g: g.kernel is not None)
#: what a selection's rows rank by (A, S_a, S_e, and any geometry registered ``rankable``)
HEAD_SCORES = GeometryNames(lambda g: g.rankable)
#: what selection ranks candidates by: one of ``HEAD_SCORES``, or auto: the geometry that carries the signal
#: among the candidates (``analysis.auto``: the regime readout)
SCORES = GeometryNames(lambda g: g.rankable, extra=("auto",))
#: what ``select_adapter`` and ``fisherhub select`` rank by unless told: auto was never significantly worse than A
#: on the four selection suites and better on the verbalizer one (benchmarks/RESULTS.md)
DEFAULT_SCORE = "auto"
#: what tables, heatmaps and ``compare`` show: the head decomposition A = ρ · S_a · S_e (and any geometry
#: registered ``shown``)
DECOMPOSITION = GeometryNames(lambda g: g.shown)
#: the geometries computed from the candidates' alignments (ρ shrunk), not read from one alignment
SHRUNK = GeometryNames(lambda g: g.kernel is None and g.of is None)
#: the other signature kinds' A, by name (``analysis.scores.candidate_scores`` takes their alignments)
OTHER_KINDS = GeometryNames(lambda g: g.signature != "head")


def label(name: str) -> str:
    """The label of geometry ``name`` (the name itself for a name not in ``GEOMETRIES``)."""
    geometry = GEOMETRIES.get(name)
    return name if geometry is None else geometry.label


def network_label(module_set: str) -> str:
    """The label of the network-level A over ``module_set``."""
    return f"{GEOMETRIES['network'].label}, {module_set}"


def regime_geometry(regime: str) -> str | None:
    """The geometry ``score="auto"`` ranks by in head regime ``regime`` (None: none, the head has no signal)."""
    return next((g.name for g in GEOMETRIES.values() if regime in g.regimes), None)


def auto_order() -> tuple[str, ...]:
    """``score="auto"``'s order: the signature kinds' A registered ``before-head``, ``"head"`` (the head
    regime's geometry), those registered ``after-head``."""
    before = tuple(g.name for g in GEOMETRIES.values() if g.auto == "before-head")
    after = tuple(g.name for g in GEOMETRIES.values() if g.auto == "after-head")
    return (*before, "head", *after)


def fallback_geometries() -> tuple[str, ...]:
    """What auto scores by, the least flat of them (the first on a tie, in ``fallback`` order), when no geometry
    separates the candidates."""
    ranked = sorted((g.fallback, g.name) for g in GEOMETRIES.values() if g.fallback is not None)
    return tuple(name for _, name in ranked)
