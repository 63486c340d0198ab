"""Exact Fisher alignments, for validating the sketch (SPEC §1, §5) and as baselines.

Gram form: ⟨F_i, F_j⟩_F = mean_{t∈i, s∈j} (a_t·a_s)² (e_t·e_s)², computed in float64 chunks
(O(n_i n_j (d + K)), any K). Materialized form: F = mean_t vec(g_t) vec(g_t)ᵀ with g_t = e_t a_tᵀ
(tiny d, K only). Also the factor inner products ⟨M_i, M_j⟩ = mean (a·a')², ⟨Γ_i, Γ_j⟩ = mean (e·e')²,
sequence granularity (⟨G, G'⟩_F² over documents) and linear CKA.
"""

from __future__ import annotations

import dataclasses

import torch

from fisherhub.core.errors import InputError


@dataclasses.dataclass(frozen=True)
class ExactAlignment:
    """Exact A, S_a, S_e and ρ = A / (S_a S_e)."""

    fisher: float
    activation: float
    error: float

    @property
    def coupling(self) -> float:
        return self.fisher / (self.activation * self.error)


def _check_pair(activations: torch.Tensor, errors: torch.Tensor) -> None:
    if activations.ndim != 2 or errors.ndim != 2 or activations.shape[0] != errors.shape[0]:
        raise InputError(
            f"need activations (n, d) and errors (n, K) with the same n, got {tuple(activations.shape)} "
            f"and {tuple(errors.shape)}"
        )
    if activations.shape[0] == 0:
        raise InputError("need at least one token")


def gram_inner_products(
    a_i: torch.Tensor,
    e_i: torch.Tensor,
    a_j: torch.Tensor,
    e_j: torch.Tensor,
    *,
    chunk_size: int = 1024,
    exclude_self_pairs: bool = False,
) -> torch.Tensor:
    """[⟨F_i,F_j⟩, ⟨M_i,M_j⟩, ⟨Γ_i,Γ_j⟩] as means over token pairs, float64.

    ``exclude_self_pairs`` (for i = j) drops the n diagonal pairs t = s: the U-statistic, an
    unbiased estimate of the population quantity like the sketch's split-sample norm.
    """
    _check_pair(a_i, e_i)
    _check_pair(a_j, e_j)
    a_j64, e_j64 = a_j.double(), e_j.double()
    totals = torch.zeros(3, dtype=torch.float64)
    for start in range(0, a_i.shape[0], chunk_size):
        activation_kernel = (a_i[start : start + chunk_size].double() @ a_j64.T) ** 2
        error_kernel = (e_i[start : start + chunk_size].double() @ e_j64.T) ** 2
        if exclude_self_pairs:
            rows = torch.arange(activation_kernel.shape[0])
            activation_kernel[rows, rows + start] = 0.0
            error_kernel[rows, rows + start] = 0.0
        totals += torch.stack([(activation_kernel * error_kernel).sum(), activation_kernel.sum(), error_kernel.sum()])
    pairs = a_i.shape[0] * a_j.shape[0] - (a_i.shape[0] if exclude_self_pairs else 0)
    return totals / pairs


def exact_alignment(
    a_i: torch.Tensor,
    e_i: torch.Tensor,
    a_j: torch.Tensor,
    e_j: torch.Tensor,
    *,
    chunk_size: int = 1024,
    exclude_self_pairs: bool = False,
) -> ExactAlignment:
    """Exact A, S_a, S_e between two tasks by the chunked Gram form (any K).

    With ``exclude_self_pairs`` the norms ‖F_i‖², ‖F_j‖² are U-statistics (no t = s pairs),
    matching what the split-sample sketch estimates when every token is its own document.
    """
    cross = gram_inner_products(a_i, e_i, a_j, e_j, chunk_size=chunk_size)
    norm_i = gram_inner_products(a_i, e_i, a_i, e_i, chunk_size=chunk_size, exclude_self_pairs=exclude_self_pairs)
    norm_j = gram_inner_products(a_j, e_j, a_j, e_j, chunk_size=chunk_size, exclude_self_pairs=exclude_self_pairs)
    cosine = cross / torch.sqrt(norm_i * norm_j)
    return ExactAlignment(*(float(v) for v in cosine))


def materialized_fisher(activations: torch.Tensor, errors: torch.Tensor) -> torch.Tensor:
    """F = mean_t vec(g_t) vec(g_t)ᵀ, g_t = e_t a_tᵀ: a (Kd, Kd) float64 matrix (tiny sizes only)."""
    _check_pair(activations, errors)
    size = activations.shape[1] * errors.shape[1]
    if size > 4096:
        raise InputError(f"materialized F would be {size}×{size}; use exact_alignment (Gram form) instead")
    gradients = torch.einsum("tk,td->tkd", errors.double(), activations.double()).reshape(len(errors), -1)
    return gradients.T @ gradients / len(errors)


def _cosine_frobenius(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x * y).sum() / (x.norm() * y.norm()))


def exact_alignment_materialized(
    a_i: torch.Tensor, e_i: torch.Tensor, a_j: torch.Tensor, e_j: torch.Tensor
) -> ExactAlignment:
    """A from materialized F, S_a from M = mean a aᵀ, S_e from Γ = mean e eᵀ."""

    def second_moment(x: torch.Tensor) -> torch.Tensor:
        return x.double().T @ x.double() / len(x)

    return ExactAlignment(
        fisher=_cosine_frobenius(materialized_fisher(a_i, e_i), materialized_fisher(a_j, e_j)),
        activation=_cosine_frobenius(second_moment(a_i), second_moment(a_j)),
        error=_cosine_frobenius(second_moment(e_i), second_moment(e_j)),
    )


def sequence_gradients(activations: torch.Tensor, errors: torch.Tensor, doc_index: torch.Tensor) -> torch.Tensor:
    """G_doc = Σ_{t∈doc} e_t a_tᵀ for every document, (num_docs, K, d) float64 (tiny sizes only)."""
    _check_pair(activations, errors)
    docs, inverse = doc_index.unique(return_inverse=True)
    per_token = torch.einsum("tk,td->tkd", errors.double(), activations.double())
    gradients = torch.zeros(len(docs), *per_token.shape[1:], dtype=torch.float64)
    return gradients.index_add_(0, inverse, per_token)


def exact_sequence_alignment(gradients_i: torch.Tensor, gradients_j: torch.Tensor) -> float:
    """A at sequence granularity: kernel ⟨G, G'⟩_F² averaged over document pairs."""

    def mean_kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((x.flatten(1) @ y.flatten(1).T) ** 2).mean()

    return float(
        mean_kernel(gradients_i, gradients_j)
        / torch.sqrt(mean_kernel(gradients_i, gradients_i) * mean_kernel(gradients_j, gradients_j))
    )


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear CKA of paired examples: ‖X̃ᵀỸ‖²_F / (‖X̃ᵀX̃‖_F ‖ỸᵀỸ‖_F), X̃, Ỹ column-centred."""
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0] or x.shape[0] < 2:
        raise InputError(f"linear_cka needs paired (n, ·) matrices with n ≥ 2, got {tuple(x.shape)}, {tuple(y.shape)}")
    x = x.double() - x.double().mean(0)
    y = y.double() - y.double().mean(0)
    return float((x.T @ y).norm() ** 2 / ((x.T @ x).norm() * (y.T @ y).norm()))
