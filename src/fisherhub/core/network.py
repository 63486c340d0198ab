"""Network-level FisherSketch (SPEC §2b): the Fisher of a set L of linear modules, sketched from each
module's input x_l and the loss gradient δ_l at its output (module l's weight gradient is δ_l x_lᵀ).

With independent projections per module (u_l, v_l on x_l; s_l, t_l on δ_l), feature r of kernel
``"full"`` is φ_r = j_r j'_r/√m with

    j_r = Σ_l (u_{r,l}·x_l)(s_{r,l}·δ_l),   j'_r = Σ_l (v_{r,l}·x_l)(t_{r,l}·δ_l),

so E[φ·φ'] = (g·g')² for the concatenated gradient g = [vec(δ_l x_lᵀ)]_l (the square is taken after the
sum over modules: cross-module terms are kept). Its marginals are those of the concatenated input
X = [x_l] and error D = [δ_l]: ψ^a_r = (Σ_l u_{r,l}·x_l)(Σ_l v_{r,l}·x_l)/√m → (X·X')², ψ^e likewise on D.
Kernel ``"block"`` keeps the per-module terms of the same projections: φ_r = Σ_l (u·x)(s·δ)(v·x)(t·δ)_{r,l}/√m
→ Σ_l (g_l·g'_l)², ψ^a → Σ_l (x_l·x'_l)², ψ^e → Σ_l (δ_l·δ'_l)² (cross-module products have mean 0).

Granularity ``"sequence"`` (exact): a document's gradient is Σ_t δ_{l,t} x_{l,t}ᵀ, so j and j' (per module
for "block") are summed over the document's positions before the product. Granularity ``"token"`` is
*position* granularity: every position is a pseudo-example with gradient [δ_{l,t} x_{l,t}ᵀ]_l, the K-FAC
approximation (exact only for position-wise layers such as the head). In both, ψ^a and ψ^e stay per
position, as in the head sketch.

Rows of a ``NetworkBatch`` are positions: the joint and error sums run over all of them (a position whose
gradient is zero adds nothing), the activation sums and the token count over the *scored* ones (positions
whose next token is in the loss), and the documents counted are those with a scored position. So the
head-only case L = {head}, δ = e, with the head sketch's own projectors, gives the head sketch's features
(SPEC §2) up to float32 rounding.

Projections: each side of module l gets its own seed ``derived_seed(seed, f"{name}/input")`` (or
``/output``); a side wider than m uses the estimator's vocabulary-side projector (a fold, O(n + m log m)),
a narrower one its activation-side projector (block SRHT or dense signs). All signs and indices come from
the counter-based hash, so the projections are bit-identical on every device.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

from fisherhub.core.errors import InputError
from fisherhub.core.features import estimator_projector
from fisherhub.core.hashing import derived_seed
from fisherhub.core.projectors import Projector
from fisherhub.core.registry import KERNELS
from fisherhub.core.spec import SketchSpec


def side_projector(estimator: str, dimension: int, m: int, seed: int) -> Projector:
    """The projector of one side (input or output) of a module: the vocabulary side's (a fold) when
    ``dimension`` > m, else the activation side's."""
    return estimator_projector(estimator, "vocabulary" if dimension > m else "activation", dimension, m, seed)


class NetworkFeatureMap:
    """The per-module projections of a network spec: ((u_l, v_l) on x_l, (s_l, t_l) on δ_l) for each module l."""

    def __init__(
        self, modules: Sequence[tuple[str, int, int]], m: int, projectors: Sequence[tuple[Projector, Projector]]
    ):
        if len(projectors) != len(modules):
            raise InputError(f"{len(projectors)} projector pairs for {len(modules)} modules")
        for (name, in_features, out_features), (on_input, on_output) in zip(modules, projectors):
            if (on_input.in_features, on_output.in_features, on_input.m, on_output.m) != (
                in_features,
                out_features,
                m,
                m,
            ):
                raise InputError(
                    f"the projectors of module {name} do not fit its shape ({in_features} → {out_features}), m={m}"
                )
        self.modules = tuple(modules)
        self.m = m
        self.scale = 1.0 / math.sqrt(m)
        self.projectors = tuple(projectors)

    @classmethod
    def for_spec(cls, spec: SketchSpec) -> NetworkFeatureMap:
        return _network_feature_map(spec.modules, spec.m, spec.seed, spec.estimator)

    def project(
        self, module: int, inputs: torch.Tensor, output_gradients: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(u·x, v·x, s·δ, t·δ) of module ``module``'s N rows, each (N, m) float32."""
        name, in_features, out_features = self.modules[module]
        rows = inputs.shape[0]
        if inputs.shape != (rows, in_features) or output_gradients.shape != (rows, out_features):
            raise InputError(
                f"module {name}: need inputs (N, {in_features}) and output gradients (N, {out_features}), got "
                f"{tuple(inputs.shape)} and {tuple(output_gradients.shape)}"
            )
        on_input, on_output = self.projectors[module]
        ux, vx = on_input.project(inputs.float())
        sd, td = on_output.project(output_gradients.float())
        return ux, vx, sd, td


@functools.lru_cache(maxsize=8)
def _network_feature_map(
    modules: tuple[tuple[str, int, int], ...], m: int, seed: int, estimator: str
) -> NetworkFeatureMap:
    """Feature maps depend on the modules, m, seed and estimator only (not the kernel); built once per process."""
    projectors = [
        (
            side_projector(estimator, in_features, m, derived_seed(seed, f"{name}/input")),
            side_projector(estimator, out_features, m, derived_seed(seed, f"{name}/output")),
        )
        for name, in_features, out_features in modules
    ]
    return NetworkFeatureMap(modules, m, projectors)


class NetworkBatch:
    """Running sums over modules of the features of N positions (whole documents), for some kernels.

    ``doc_index`` (N,) global document indices, ``scored`` (N,) bool: the position's next token is in the
    loss. Add every module once (``add``), then give it to the ``SketchState.update`` of each kernel's state. Memory: about
    (4 + 2·[token granularity] + 3·[block]) · N · m float32.
    """

    def __init__(
        self,
        feature_map: NetworkFeatureMap,
        doc_index: torch.Tensor,
        scored: torch.Tensor,
        *,
        granularity: str = "token",
        kernels: Sequence[str] = ("full",),
    ):
        if doc_index.ndim != 1 or scored.shape != doc_index.shape or scored.dtype != torch.bool:
            raise InputError(
                f"need doc_index (N,) and a bool scored mask (N,), got {tuple(doc_index.shape)}, {scored.dtype}"
            )
        if granularity not in ("token", "sequence"):
            raise InputError(f"unknown granularity {granularity!r}; choose 'token' (position) or 'sequence'")
        unknown = set(kernels) - set(KERNELS)
        if unknown or not kernels:
            raise InputError(f"kernels must be a non-empty subset of {KERNELS}, got {tuple(kernels)}")
        self.feature_map = feature_map
        self.granularity = granularity
        self.kernels = tuple(dict.fromkeys(kernels))
        self.doc_index = doc_index
        self.scored = scored
        self.documents, self._inverse = doc_index.unique(return_inverse=True)
        self._added = [False] * len(feature_map.modules)
        rows, m = len(doc_index), feature_map.m
        documents = len(self.documents)
        joint_rows = rows if granularity == "token" else documents
        zeros = functools.partial(torch.zeros, dtype=torch.float32, device=doc_index.device)
        self._sums: dict[str, torch.Tensor] = {}
        if "full" in self.kernels:  # j, j' (per position or document); Σ_l u·x, Σ_l v·x, Σ_l s·δ, Σ_l t·δ
            self._sums.update(first=zeros(joint_rows, m), second=zeros(joint_rows, m))
            self._sums.update({name: zeros(rows, m) for name in ("input_u", "input_v", "output_s", "output_t")})
        if "block" in self.kernels:
            self._sums.update(
                block_joint=zeros(joint_rows, m), block_activation=zeros(rows, m), block_error=zeros(rows, m)
            )

    def _per_document(self, values: torch.Tensor) -> torch.Tensor:
        return values.new_zeros(len(self.documents), values.shape[1]).index_add_(0, self._inverse, values)

    def add(self, module: int, inputs: torch.Tensor, output_gradients: torch.Tensor) -> None:
        """Add module ``module``'s inputs x (N, in) and output gradients δ (N, out) at the batch's positions."""
        if self._added[module]:
            raise InputError(f"module {self.feature_map.modules[module][0]} was added twice to the batch")
        self._added[module] = True
        ux, vx, sd, td = self.feature_map.project(
            module, inputs.to(self.doc_index.device), output_gradients.to(self.doc_index.device)
        )
        sums = self._sums
        input_output_u, input_output_v = ux * sd, vx * td
        if "full" in self.kernels:
            sums["input_u"] += ux
            sums["input_v"] += vx
            sums["output_s"] += sd
            sums["output_t"] += td
            if self.granularity == "token":
                sums["first"] += input_output_u
                sums["second"] += input_output_v
            else:
                sums["first"] += self._per_document(input_output_u)
                sums["second"] += self._per_document(input_output_v)
        if "block" in self.kernels:
            sums["block_activation"].addcmul_(ux, vx)
            sums["block_error"].addcmul_(sd, td)
            if self.granularity == "token":
                sums["block_joint"].addcmul_(input_output_u, input_output_v)
            else:
                sums["block_joint"].addcmul_(self._per_document(input_output_u), self._per_document(input_output_v))

    def features(self, kernel: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(joint, activation, error) features of ``kernel``, scaled by 1/√m: joint (N, m) per position, or
        (D, m) per document of ``documents`` (sequence); activation and error (N, m) per position."""
        if kernel not in self.kernels:
            raise InputError(f"the batch was built for kernels {self.kernels}, not {kernel!r}")
        missing = [name for (name, _, _), added in zip(self.feature_map.modules, self._added) if not added]
        if missing:
            raise InputError(f"no inputs/gradients were added for modules {missing[:5]} ({len(missing)} in all)")
        sums, scale = self._sums, self.feature_map.scale
        if kernel == "full":
            return (
                sums["first"] * sums["second"] * scale,
                sums["input_u"] * sums["input_v"] * scale,
                sums["output_s"] * sums["output_t"] * scale,
            )
        return sums["block_joint"] * scale, sums["block_activation"] * scale, sums["block_error"] * scale
