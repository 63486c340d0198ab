"""Random features of the product kernel k((a,e),(a',e')) = (a·a')² (e·e')² (SPEC §2).

Token granularity, feature r:
    φ_r = (u_r·a)(v_r·a)(s_r·e)(t_r·e)/√m,  ψ^a_r = (u_r·a)(v_r·a)/√m,  ψ^e_r = (s_r·e)(t_r·e)/√m
Sequence granularity (a document G = Σ_t e_t a_tᵀ): φ_r = (Σ_t (s_r·e_t)(u_r·a_t)) (Σ_t (t_r·e_t)(v_r·a_t))/√m.
Error space "head-input": e is replaced by δ = Wᵀe ∈ R^d, projected by the estimator's activation-side
projector with its own seed (``HEAD_INPUT_LABEL``), without a reflection.
"""

from __future__ import annotations

import functools
import math

import torch

from fisherhub.core.errors import InputError
from fisherhub.core.hashing import derived_seed
from fisherhub.core.projectors import (
    ACTIVATION_PROJECTORS,
    VOCABULARY_PROJECTORS,
    Projector,
)
from fisherhub.core.registry import ESTIMATORS, SKETCHES
from fisherhub.core.spec import SketchSpec

#: the label of the δ = Wᵀe projections' seed, ``derived_seed(spec.seed, HEAD_INPUT_LABEL)``.
HEAD_INPUT_LABEL = "head-input/error"
#: the two projector sides of an estimator (``core.registry.ESTIMATORS``: (activation kind, vocabulary kind)).
SIDES = ("activation", "vocabulary")


def estimator_projector(
    estimator: str, side: str, in_features: int, m: int, seed: int, reflection: torch.Tensor | None = None
) -> Projector:
    """The projector ``estimator`` uses on ``side``: "activation" (d-wide inputs; block SRHT or dense signs,
    optionally after a Householder reflection) or "vocabulary" (wide inputs; a fold or an SRHT). The one place a
    projector class is chosen, for head and network sketches alike."""
    activation_kind, vocabulary_kind = ESTIMATORS[estimator]
    if side == "activation":
        return ACTIVATION_PROJECTORS[activation_kind](in_features, m, seed, reflection)
    if side == "vocabulary" and reflection is None:
        return VOCABULARY_PROJECTORS[vocabulary_kind](in_features, m, seed)
    raise InputError(f"projector side must be one of {SIDES} (a reflection only on the activation side), got {side!r}")


class FeatureMap:
    """The four projections of a spec: (u, v) on activations, (s, t) on errors."""

    def __init__(self, spec: SketchSpec):
        if spec.modules is not None:
            raise InputError("a network spec (modules=...) is sketched by core.network.NetworkFeatureMap")
        self.spec = spec
        self.scale = 1.0 / math.sqrt(spec.m)
        self.activation_projector = estimator_projector(
            spec.estimator, "activation", spec.d, spec.m, spec.seed, spec.reflection_tensor
        )
        if spec.error_space == "head-input":
            seed = derived_seed(spec.seed, HEAD_INPUT_LABEL)
            self.error_projector = estimator_projector(spec.estimator, "activation", spec.d, spec.m, seed)
        else:
            self.error_projector = estimator_projector(spec.estimator, "vocabulary", spec.vocab_size, spec.m, spec.seed)

    def projections(self, activations: torch.Tensor, errors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(u·a, v·a, s·e, t·e), each (N, m) float32."""
        ua, va = self.activation_projector.project(activations.float())
        se, te = self.error_projector.project(errors)
        return ua, va, se, te

    def token_features(self, activations: torch.Tensor, errors: torch.Tensor) -> dict[str, torch.Tensor]:
        """φ (joint), ψ^a (activation) and ψ^e (error) features, each (N, m)."""
        stacked = self.features_from_projections(*self.projections(activations, errors))
        return dict(zip(SKETCHES, stacked))

    def features_from_projections(
        self, ua: torch.Tensor, va: torch.Tensor, se: torch.Tensor, te: torch.Tensor
    ) -> torch.Tensor:
        """(3, N, m) in ``SKETCHES`` order: φ = (u·a)(v·a)(s·e)(t·e)/√m, ψ^a = (u·a)(v·a)/√m, ψ^e = (s·e)(t·e)/√m."""
        stacked = ua.new_empty(len(SKETCHES), *ua.shape)
        joint, activation, error = stacked
        torch.mul(ua, va, out=activation)
        torch.mul(se, te, out=error)
        torch.mul(activation, error, out=joint)
        return stacked.mul_(self.scale)


@functools.lru_cache(maxsize=8)
def feature_map(spec: SketchSpec) -> FeatureMap:
    """Feature maps are deterministic functions of the spec; build each once per process."""
    return FeatureMap(spec)
