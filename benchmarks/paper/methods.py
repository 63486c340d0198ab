"""The selection methods added by issue 19, each on the tasks' own tokens, beside ``baselines``.

- head-input A: the head sketch of (a, δ = Wᵀe), δ the loss gradient at the head's input (d numbers per
  token instead of K), from the cached head inputs (no model pass).
- network-level A over a module set (SPEC §2b, ``network``): the LoRA target modules of the ground truth's
  adapters (q_proj, v_proj of the top layers) or every linear module but the head ("all-linear").
- ``score="auto"``, A with the shrunk coupling, and the verdict of every selection (``fisherhub.analysis``),
  from the alignment matrices of the head signatures and, where computed, the other kinds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from benchmarks.paper import common, network, official
from fisherhub.core.batch import HeadBatch
from fisherhub import Signature, SketchState
from fisherhub.lm.head import output_head
from fisherhub.core.alignment import AlignmentMatrix, alignment_matrix
from fisherhub.analysis.shrinkage import shrunk_fisher
from fisherhub.analysis.verdict import score_selection


def head_input_signature(
    spec, model, inputs: common.HeadInputs, name: str, cache: Path, chunk_size: int = 512
) -> Signature:
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
            state.update(
                HeadBatch(
                    activations=part.activations,
                    doc_index=part.doc_index,
                    errors=common.head_errors(model, part.activations, part.targets) @ weight,
                )
            )
    state.flush()
    signature = state.finalize(common.provenance(name))
    path.parent.mkdir(parents=True, exist_ok=True)
    signature.save(path)
    return signature


def regime_scores(
    head: AlignmentMatrix, others: Mapping[str, AlignmentMatrix] | None = None
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
        selections.append(
            {"target": names[target], "candidates": [names[s] for s in candidates], **selection.as_dict()}
        )
    return {"auto": auto, "fisher_shrunk": shrunk, "fisher_shrunk_separable": separable}, selections


def extra_matrices(signatures: Mapping[str, Sequence[Signature]], names: Sequence[str]) -> dict[str, AlignmentMatrix]:
    """Alignment matrices of the other signature kinds (kind → one signature per task)."""
    return {kind: alignment_matrix(list(sigs), list(names)) for kind, sigs in signatures.items()}


def added_methods(
    model,
    tokenizer,
    spec,
    suite: str,
    names: Sequence[str],
    inputs: Sequence[common.HeadInputs],
    examples: Mapping[str, Sequence[common.Example]],
    head: AlignmentMatrix,
    error_path_of,
    network_sets: Sequence[str] | None = None,
    official_package: bool = True,
) -> tuple[dict[str, torch.Tensor], dict[str, list[dict]], dict | None]:
    """The score matrices of issue 19's methods on a suite, the scored selections of the two autos, and the
    official package's raw recommendations.

    head-input A; network-level A for each of ``network_sets`` (default: the suite's, ``network.SUITE_NETWORK_SETS``); ``auto_head`` (auto over the head and
    head-input geometries), ``auto`` (also over the first network set), A with the shrunk ρ; the official
    package's ``recommend(method="auto")`` unless not ``official_package`` (it costs about 0.2 s per token on one
    CPU thread). ``error_path_of(k)``: the .npy file of task k's e (written if missing).
    """
    cache = common.SETUP.cache_dir / "tasks"
    kinds = {
        "head_input": [
            head_input_signature(spec, model, task, f"{suite}-{name.replace('/', '-')}", cache)
            for task, name in zip(inputs, names)
        ]
    }
    if network_sets is None:
        network_sets = network.SUITE_NETWORK_SETS.get(suite, ("lora",))
    for module_set in network_sets:
        kinds[f"network_{module_set}"] = network.suite_network_signatures(suite, module_set, tokenizer, dict(examples))
    matrices = extra_matrices(kinds, names)
    scores = {key: matrix.fisher for key, matrix in matrices.items()}
    auto_head, selections_head = regime_scores(head, {"head_input": matrices["head_input"]})
    scores |= {
        "auto_head": auto_head["auto"],
        "fisher_shrunk": auto_head["fisher_shrunk"],
        "fisher_shrunk_separable": auto_head["fisher_shrunk_separable"],
    }
    selections = {"auto_head": selections_head}
    if network_sets:
        others = {"head_input": matrices["head_input"], "network": matrices[f"network_{network_sets[0]}"]}
        auto, selections["auto"] = regime_scores(head, others)
        scores["auto"] = auto["auto"]
    if not official_package:
        return scores, selections, None
    folder = common.SETUP.cache_dir / "official" / suite
    activation_paths = []
    for task, name in zip(inputs, names):
        path = folder / f"{name.replace('/', '-')}.a.npy"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, task.activations.float().numpy())
        activation_paths.append(path)
    recommendations = official.recommend(
        names,
        activation_paths,
        [error_path_of(k) for k in range(len(names))],
        folder / f"recommend-{common.examples_key([e for n in names for e in examples[n]])}.json",
    )
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
                (float(truth[chosen] >= truth.max()), float(truth.max() - truth[chosen]), verdict["probability_best"])
            )
    return {
        key: {
            "selections": len(rows),
            "top1": sum(r[0] for r in rows) / len(rows) if rows else None,
            "mean_regret": sum(r[1] for r in rows) / len(rows) if rows else None,
            "mean_probability_best": sum(r[2] for r in rows) / len(rows) if rows else None,
        }
        for key, rows in groups.items()
    }
