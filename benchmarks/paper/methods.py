"""The selection methods added by issue 19, each on the tasks' own tokens, beside ``baselines``.

- head-input A: the head sketch of (a, δ = Wᵀe), δ the loss gradient at the head's input (d numbers per
  token instead of K), from the cached head inputs (no model pass).
- network-level A over a module set (SPEC §2b): the LoRA target modules of the ground truth's adapters
  (q_proj, v_proj of the top layers) or every linear module but the head ("all-linear"), one forward and
  one backward pass of the full model per batch (``fisherhub.lm.network``).
- ``score="auto"``, A with the shrunk coupling, and the verdict of every selection (``fisherhub.analysis``),
  from the alignment matrices of the head signatures and, where computed, the other kinds.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from benchmarks.paper import common
from fisherhub.core.batch import HeadBatch
from fisherhub import Signature, SketchState
from fisherhub.lm.head import output_head
from fisherhub.core.alignment import AlignmentMatrix, alignment_matrix
from fisherhub.core.state import NetworkSketchState
from fisherhub.lm.network import sketch_network_batch
from fisherhub.lm.specs import network_spec_for_model
from fisherhub.analysis.shrinkage import shrunk_fisher
from fisherhub.analysis.verdict import score_selection
from fisherhub.core.geometry import GEOMETRIES, SHRUNK, label, network_label

#: module sets of the network-level signatures, fixed before any result: the adapters' targets, and all linear
NETWORK_SETS = ("lora", "all_linear")
#: m of the network sketches: a quarter of the head's, because their projections (four per module and
#: position) make them the slowest part of every suite on 2 shared CPU cores (measured: 32 s per batch of 8
#: prompts for the 20 LoRA modules at m = 4096)
NETWORK_M = 1024


def head_input_signature(spec, model, inputs: common.HeadInputs, name: str, cache: Path,
                         chunk_size: int = 512) -> Signature:
    """The head-input signature (a, δ = Wᵀe) of a task's cached head inputs (cached under ``cache``)."""
    spec = dataclasses.replace(spec, error_space="head-input")
    path = cache / spec.sketch_id / f"{name}.sig"
    if path.exists():
        return Signature.load(path)
    weight = output_head(model).weight.detach().float()
    state = SketchState(spec)
    with torch.no_grad():
        for start in range(0, len(inputs), chunk_size):
            part = inputs.select(slice(start, start + chunk_size))
            state.update(HeadBatch(activations=part.activations, doc_index=part.doc_index, errors=common.head_errors(model, part.activations, part.targets) @ weight))
    state.flush()
    signature = state.finalize({"base_model": "HuggingFaceTB/SmolLM2-135M-Instruct", "dataset": name})
    path.parent.mkdir(parents=True, exist_ok=True)
    signature.save(path)
    return signature


class _PrefixEmbedding(torch.nn.Module):
    """Stands in for the input embeddings of the model cut to its top layers: row r of a batch gets its example's
    cached lower-layer states (left-padded as ``common.collate``; its last position feeds no scored prediction
    and gets zeros). ``weight`` is the real embedding matrix (the capture reads its device)."""

    def __init__(self, embeddings: torch.nn.Embedding):
        super().__init__()
        self.weight = embeddings.weight
        self.rows: list[torch.Tensor] = []

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = torch.zeros(*input_ids.shape, self.weight.shape[1])
        width = input_ids.shape[1]
        for row, states in enumerate(self.rows):
            hidden[row, width - len(states) - 1 : width - 1] = states
        return hidden


class _ScoredHead(torch.nn.Module):
    """Stands in for the LM head: logits at the scored positions (``mask``, set before each batch), zeros
    elsewhere. The loss reads only those, so its gradients are the real head's, at a fraction of the cost
    when few positions are scored (one per prompt in exp. 3)."""

    def __init__(self, head: torch.nn.Module):
        super().__init__()
        self.head = head
        self.weight = head.weight
        self.mask: torch.Tensor | None = None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.head(hidden[self.mask])
        return torch.zeros(*hidden.shape[:2], logits.shape[-1], dtype=logits.dtype).index_put((self.mask,), logits)


def scored_mask(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """(B, T): positions whose next token is scored (HF ``labels`` convention)."""
    mask = torch.zeros_like(batch["labels"], dtype=torch.bool)
    mask[:, :-1] = batch["labels"][:, 1:] != common.IGNORE_INDEX
    return mask


class _PassThrough(torch.nn.Module):
    """A decoder layer that returns its input (the layers below the cached states)."""

    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


@contextlib.contextmanager
def top_layers(model, first_layer: int):
    """``model`` running its layers ≥ ``first_layer`` only, on cached lower-layer states, and its head at the
    scored positions only (yields the two stand-ins; ``network_signature`` sets them per batch); the layers
    below pass their input through. Module names stay the
    full model's, and so do the gradients of modules in the top layers (the layers below do not depend on
    them), so network specs and signatures are those of the full model."""
    decoder = model.get_decoder()
    embeddings, layers, head = decoder.embed_tokens, decoder.layers, model.lm_head
    stand_in = _PrefixEmbedding(embeddings)
    decoder.embed_tokens, model.lm_head = stand_in, _ScoredHead(head)
    decoder.layers = torch.nn.ModuleList([_PassThrough() for _ in range(first_layer)] + list(layers)[first_layer:])
    try:
        yield stand_in, model.lm_head
    finally:
        decoder.embed_tokens, decoder.layers, model.lm_head = embeddings, layers, head


def network_spec(model, tokenizer, module_set: str, lora: common.LoraSettings, granularity: str):
    """The network spec of a module set (``NETWORK_SETS``: for "lora" the adapters' targets in the top layers);
    m = ``NETWORK_M``, the head's seed."""
    if module_set == "lora":
        modules = [f"model.layers.{layer}.self_attn.{target}" for layer in range(lora.first_layer, len(model.get_decoder().layers))
                   for target in lora.target_modules]
    else:
        modules = "all-linear"
    return network_spec_for_model(model, tokenizer, modules=modules, m=NETWORK_M, seed=common.SKETCH_SEED,
                                  granularity=granularity)


def network_signature(spec, model, examples: Sequence[common.Example], name: str, cache: Path,
                      batch_size: int = 8, prefix: Mapping[str, torch.Tensor] | None = None, stand_in=None) -> Signature:
    """The network signature of a task's examples (one forward + backward per batch; cached under ``cache``).
    With ``prefix`` (``common.prefix_states``) the model runs inside ``top_layers`` and ``stand_in`` is what
    that yields (the embedding and head stand-ins)."""
    path = cache / spec.sketch_id / f"{name}.sig"
    if path.exists():
        return Signature.load(path)
    state = NetworkSketchState(spec)
    for start in tqdm(range(0, len(examples), batch_size), desc=f"network {name}", leave=False):
        chunk = examples[start : start + batch_size]
        batch = common.collate(chunk)
        if stand_in is not None:
            embeddings, head = stand_in
            embeddings.rows = [prefix[common.prefix_key(e)] for e in chunk]
            head.mask = scored_mask(batch)
        sketch_network_batch([state], model, batch)
    signature = state.finalize({"base_model": "HuggingFaceTB/SmolLM2-135M-Instruct", "dataset": name})
    path.parent.mkdir(parents=True, exist_ok=True)
    signature.save(path)
    return signature


def regime_scores(head: AlignmentMatrix, others: Mapping[str, AlignmentMatrix] | None = None
                  ) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """Score matrices [source, target] of ``score="auto"`` and of A with the shrunk coupling, and the scored
    selection of every target (its regime, auto's choice and the verdict), candidates = the other tasks."""
    names, n = head.names, len(head.names)
    others = dict(others or {})
    auto, shrunk, separable = (torch.zeros(n, n, dtype=torch.float64) for _ in range(3))
    selections = []
    for target in range(n):
        candidates = [s for s in range(n) if s != target]
        results = [head.pair(s, target) for s in candidates]
        extra = {key: [matrix.pair(s, target) for s in candidates] for key, matrix in others.items()}
        selection = score_selection(results, "auto", [names[s] for s in candidates], **extra)
        auto[candidates, target] = torch.tensor(selection.scores.values, dtype=torch.float64)
        shrunk[candidates, target] = torch.tensor(shrunk_fisher(results).values, dtype=torch.float64)
        separable[candidates, target] = torch.tensor(shrunk_fisher(results, 1.0).values, dtype=torch.float64)
        selections.append({"target": names[target], "candidates": [names[s] for s in candidates], **selection.as_dict()})
    return {"auto": auto, "fisher_shrunk": shrunk, "fisher_shrunk_separable": separable}, selections


def extra_matrices(signatures: Mapping[str, Sequence[Signature]], names: Sequence[str]) -> dict[str, AlignmentMatrix]:
    """Alignment matrices of the other signature kinds (kind → one signature per task)."""
    return {kind: alignment_matrix(list(sigs), list(names)) for kind, sigs in signatures.items()}


def added_methods(model, tokenizer, spec, suite: str, names: Sequence[str], inputs: Sequence[common.HeadInputs],
                  examples: Mapping[str, Sequence[common.Example]], head: AlignmentMatrix, error_path_of,
                  network_sets: Sequence[str] = ("lora",), official_package: bool = True
                  ) -> tuple[dict[str, torch.Tensor], dict[str, list[dict]], dict | None]:
    """The score matrices of issue 19's methods on a suite, the scored selections of the two autos, and the
    official package's raw recommendations.

    head-input A; network-level A for each of ``network_sets``; ``auto_head`` (auto over the head and
    head-input geometries), ``auto`` (also over the first network set), A with the shrunk ρ; the official
    package's ``recommend(method="auto")`` unless not ``official_package`` (it costs about 0.2 s per token on one
    CPU thread). ``error_path_of(k)``: the .npy file of task k's e (written if missing).
    """
    from benchmarks.paper import official
    from benchmarks.paper.network_signatures import suite_network_signatures

    cache = common.CACHE_DIR / "tasks"
    kinds = {"head_input": [head_input_signature(spec, model, task, f"{suite}-{name.replace('/', '-')}", cache)
                            for task, name in zip(inputs, names)]}
    for module_set in network_sets:
        kinds[f"network_{module_set}"] = suite_network_signatures(suite, module_set, tokenizer, dict(examples))
    matrices = extra_matrices(kinds, names)
    scores = {key: matrix.fisher for key, matrix in matrices.items()}
    auto_head, selections_head = regime_scores(head, {"head_input": matrices["head_input"]})
    scores |= {"auto_head": auto_head["auto"], "fisher_shrunk": auto_head["fisher_shrunk"],
               "fisher_shrunk_separable": auto_head["fisher_shrunk_separable"]}
    selections = {"auto_head": selections_head}
    if network_sets:
        others = {"head_input": matrices["head_input"], "network": matrices[f"network_{network_sets[0]}"]}
        auto, selections["auto"] = regime_scores(head, others)
        scores["auto"] = auto["auto"]
    if not official_package:
        return scores, selections, None
    folder = common.CACHE_DIR / "official" / suite
    activation_paths = []
    for task, name in zip(inputs, names):
        path = folder / f"{name.replace('/', '-')}.a.npy"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, task.activations.float().numpy())
        activation_paths.append(path)
    recommendations = official.recommend(names, activation_paths, [error_path_of(k) for k in range(len(names))],
                                         folder / f"recommend-{common.examples_key([e for n in names for e in examples[n]])}.json")
    scores["official_auto"] = official.score_matrix(names, recommendations)
    return scores, selections, recommendations


def trust_table(selections: Sequence[dict], transfers: Sequence[torch.Tensor]) -> dict:
    """Top-1 and regret of the selections whose verdict is clear and of the others (per LoRA seed, pooled)."""
    groups = {"clear": [], "not clear": []}
    for t, selection in enumerate(selections):
        verdict = selection["verdict"]
        for transfer in transfers:
            truth = transfer[[s for s in range(len(transfer)) if s != t], t]
            chosen = verdict["best"]
            groups["clear" if verdict["clear"] else "not clear"].append(
                (float(truth[chosen] >= truth.max()), float(truth.max() - truth[chosen]), verdict["probability_best"]))
    return {key: {"selections": len(rows), "top1": sum(r[0] for r in rows) / len(rows) if rows else None,
                  "mean_regret": sum(r[1] for r in rows) / len(rows) if rows else None,
                  "mean_probability_best": sum(r[2] for r in rows) / len(rows) if rows else None}
            for key, rows in groups.items()}


#: table names of the methods above
LABELS = {
    **{name: label(name) for name in ("head_input", *SHRUNK)},
    "network_lora": network_label("LoRA modules"), "network_all_linear": network_label("all-linear"),
    "auto_head": "auto (head + head-input)", "auto": "auto (+ network-level)",
    "official_auto": "official fishersketch recommend(auto)", "random": "random",
    **{f"exact_{name}": f"exact {GEOMETRIES[name].symbol}, Gram form (diagnostic)" for name in ("fisher", "error")},
}
