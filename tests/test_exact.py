"""Exact forms: Gram = materialized F, sequence granularity, CKA; the sketch converges to them."""

from __future__ import annotations

import math

import pytest
import torch
from fisherhub.testing.oracles import synthetic_task

from fisherhub.core.batch import HeadBatch
from fisherhub import SketchSpec, SketchState, alignment
from fisherhub.core.errors import InputError
from fisherhub.core.exact import (
    exact_alignment,
    exact_alignment_materialized,
    exact_sequence_alignment,
    gram_inner_products,
    linear_cka,
    materialized_fisher,
    sequence_gradients,
)


def test_gram_form_equals_materialized_fisher():
    a1, e1 = synthetic_task(30, 4, 7, seed=0)
    a2, e2 = synthetic_task(25, 4, 7, seed=1, label_block=(2, 7))
    gram = exact_alignment(a1.double(), e1.double(), a2.double(), e2.double(), chunk_size=8)
    materialized = exact_alignment_materialized(a1, e1, a2, e2)
    for name in ("fisher", "activation", "error"):
        assert abs(getattr(gram, name) - getattr(materialized, name)) < 1e-10, name
    inner = gram_inner_products(a1, e1, a2, e2)
    direct = (materialized_fisher(a1, e1) * materialized_fisher(a2, e2)).sum()
    assert abs(float(inner[0] - direct)) < 1e-10 * float(direct)


def test_exclude_self_pairs_is_the_u_statistic():
    a, e = synthetic_task(12, 3, 5, seed=2)
    kernel = ((a.double() @ a.double().T) ** 2) * ((e.double() @ e.double().T) ** 2)
    off_diagonal = (kernel.sum() - kernel.diagonal().sum()) / (12 * 11)
    inner = gram_inner_products(a, e, a, e, chunk_size=5, exclude_self_pairs=True)
    assert math.isclose(float(inner[0]), float(off_diagonal), rel_tol=1e-12)


def test_sequence_granularity_sketch_matches_exact():
    d, vocab = 6, 40
    spec = SketchSpec(d=d, vocab_size=vocab, m=8192, granularity="sequence")
    tasks = []
    for seed, block in ((0, (0, 30)), (1, (0, 30)), (2, (10, 40))):
        a, e = synthetic_task(1200, d, vocab, seed=seed, label_block=block)
        docs = torch.arange(1200) // 4
        tasks.append(
            (a, e, docs, SketchState(spec).update(HeadBatch(activations=a, doc_index=docs, errors=e)).finalize())
        )
    for (a_i, e_i, d_i, s_i), (a_j, e_j, d_j, s_j) in ((tasks[0], tasks[1]), (tasks[0], tasks[2])):
        exact = exact_sequence_alignment(sequence_gradients(a_i, e_i, d_i), sequence_gradients(a_j, e_j, d_j))
        result = alignment(s_i, s_j)
        assert abs(result.fisher - exact) < 3 * result.stderr + 0.03, (result.fisher, exact, result.stderr)


def test_linear_cka():
    x = torch.randn(50, 4, generator=torch.Generator().manual_seed(0))
    rotation = torch.linalg.qr(torch.randn(4, 4, generator=torch.Generator().manual_seed(1)))[0]
    assert math.isclose(linear_cka(x, 3.0 * x @ rotation + 2.0), 1.0, rel_tol=1e-10)
    assert linear_cka(x, torch.randn(50, 4, generator=torch.Generator().manual_seed(2))) < 0.5
    with pytest.raises(InputError, match="paired"):
        linear_cka(x, x[:10])


def test_exact_bad_input():
    with pytest.raises(InputError, match="same n"):
        exact_alignment(torch.zeros(3, 2), torch.zeros(2, 4), torch.zeros(3, 2), torch.zeros(3, 4))
    with pytest.raises(InputError, match="Gram form"):
        materialized_fisher(torch.zeros(2, 100), torch.zeros(2, 100))
