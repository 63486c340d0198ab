"""Domain-to-domain transfer with LoRA, and every similarity method on the same data (experiments 4, 5).

For each domain: its task data (the documents of ``DomainSplit``: the signature's tokens and the
LoRA training set) and held-out documents. One adapter per source domain (``LoraSettings``); the
transfer from source s to target t is the relative drop of the target's held-out perplexity,
1 − ppl_s(t)/ppl_base(t) = 1 − exp(NLL_s(t) − NLL_base(t)). Similarities: FisherSketch A, its
factors S_a and S_e, feature-level linear CKA, mean sentence-embedding cosine (LoraRetriever-style)
and diagonal head Fisher cosine (TaskEmb-style), all from the task data (``baselines``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from tqdm import tqdm

from benchmarks.paper import common, recall
from benchmarks.paper.selection_methods import SelectionInputs, available_needs, score_matrices
from benchmarks.paper.methods import trust_table
from benchmarks.paper.report import heatmaps, matrix_rows, print_bootstrap, print_table, regime_counts, write_json
from benchmarks.paper.scoring import (
    HeldOutLosses,
    SelectionScore,
    combine,
    paired_bootstrap,
    pooled_spearman,
    random_selection,
    selection_score,
)
from benchmarks.registry import check_references, labels, methods_of
from fisherhub import alignment_matrix


@dataclasses.dataclass
class TransferStudy:
    """Names, the held-out losses (base and per seed and source), method scores and the settings."""

    names: list[str]
    ground_truth: HeldOutLosses
    scores: dict[str, torch.Tensor]
    sketch_id: str
    settings: common.LoraSettings
    split: common.DomainSplit
    tokens: list[int]
    selections: dict[str, list[dict]]
    official: dict
    sample_losses: HeldOutLosses | None = None  # adapters' losses on each target's own sample (task data)
    sample_measured: np.ndarray | None = None  # [source, target]: where sample_losses were measured

    @property
    def transfer(self) -> torch.Tensor:
        """Transfer [source, target], mean over seeds."""
        return torch.from_numpy(self.ground_truth.transfer().mean(axis=0))

    def selection(self) -> dict[str, SelectionScore]:
        per_seed = self.ground_truth.transfer()
        results = {key: combine([selection_score(score, t) for t in per_seed]) for key, score in self.scores.items()}
        return results | {"random": combine([random_selection(t) for t in per_seed])}

    def pooled(self, symmetric: bool = False) -> dict[str, tuple[float, float]]:
        return {key: pooled_spearman(score, self.transfer, symmetric) for key, score in self.scores.items()}

    def as_dict(self) -> dict:
        return {
            "domains": self.names,
            "sketch_id": self.sketch_id,
            "lora": dataclasses.asdict(self.settings),
            "seeds": list(common.LORA_SEEDS),
            "split": dataclasses.asdict(self.split),
            "task_tokens": self.tokens,
            "held_out": self.ground_truth.as_dict(),
            "transfer": matrix_rows(self.transfer),
            "transfer_per_seed": [matrix_rows(torch.from_numpy(t)) for t in self.ground_truth.transfer()],
            **(
                {}
                if self.sample_losses is None
                else {
                    "sample_losses": self.sample_losses.as_dict(),
                    "sample_measured": self.sample_measured.tolist(),
                    "sample_transfer_per_seed": [
                        matrix_rows(torch.from_numpy(t)) for t in self.sample_losses.transfer()
                    ],
                }
            ),
            "scores": {key: matrix_rows(score) for key, score in self.scores.items()},
            "selection": {key: s.as_dict() for key, s in self.selection().items()},
            "pooled_spearman": {key: {"rho": r, "p": p} for key, (r, p) in self.pooled().items()},
            "pooled_spearman_unordered": {key: {"rho": r, "p": p} for key, (r, p) in self.pooled(True).items()},
            "bootstrap": self.bootstrap(),
            "selections": self.selections,
            "trust": self.trust(),
            "regimes": {key: regime_counts(value) for key, value in self.selections.items()},
            "official": self.official,
        }

    def bootstrap(self) -> dict:
        """``paired_bootstrap`` of every method (computed once)."""
        if "_bootstrap" not in self.__dict__:
            self.__dict__["_bootstrap"] = paired_bootstrap(self.scores, self.ground_truth)
        return self.__dict__["_bootstrap"]

    def trust(self) -> dict:
        transfers = [torch.from_numpy(t) for t in self.ground_truth.transfer()]
        return {key: trust_table(value, transfers) for key, value in self.selections.items()}


def transfer_study(
    texts: Mapping[str, Sequence[str]],
    group: str,
    settings: common.LoraSettings | None = None,
    split: common.DomainSplit | None = None,
    seeds: Sequence[int] = common.LORA_SEEDS,
    official_package: bool = True,
    every_sample: bool = False,
) -> TransferStudy:
    """Signatures, every registered selection method's scores, adapters and held-out NLLs of ``texts``
    (domain → documents), all cached. The methods run before the adapters are trained, so a broken one fails
    first. Each target's own sample is measured under the default first stage's candidates, or with
    ``every_sample`` under every other domain's adapter."""
    settings, split = settings or common.lora_settings(), split or common.domain_split()
    suite = group.split("_")[0]
    chosen = methods_of(suite, available_needs(official_package))
    model, tokenizer = common.load_base_model()
    spec = common.paper_spec(model, tokenizer)
    captured = common.capture_domains(model, tokenizer, spec, texts, split)
    names, tasks, signatures = captured.names, captured.inputs, captured.signatures
    task_examples, eval_examples = captured.task_examples, captured.eval_examples
    sketch = alignment_matrix(signatures, names)

    def error_path(k: int):
        path = common.SETUP.cache_dir / "errors" / f"{names[k]}.npy"
        if not path.exists():
            common.cached_errors(model, tasks[k], path)
        return path

    inputs = SelectionInputs(
        suite,
        names,
        model,
        tokenizer,
        spec,
        tasks,
        task_examples,
        [[tokenizer.decode(e.input_ids) for e in task_examples[name]] for name in names],
        sketch,
        error_path,
        official_package,
    )
    baseline_ledger = common.Ledger(common.SETUP.cache_dir / f"{group}_baselines_{common.config_key(split)}.json")
    scores = score_matrices(inputs, chosen, baseline_ledger)

    bench = common.LoraBench(model, settings, common.SETUP.cache_dir)
    for name in tqdm(names, desc="prefix states"):
        bench.prefix_states(task_examples[name] + eval_examples[name], group=name)
    nll_ledger = common.Ledger(
        common.SETUP.cache_dir / f"{group}_document_nll_{common.config_key(settings, split)}.json"
    )

    keys = {name: f"{name}:{common.examples_key(task_examples[name])}" for name in names}
    eval_keys = {name: f"{name}:{common.examples_key(eval_examples[name])}" for name in names}

    def nll_of(source: str | None, seed: int, weights, target: str, examples, examples_keys) -> list[float]:
        with bench.using(weights) as adapted:
            return nll_ledger.get(
                f"{f'{keys[source]}|seed{seed}' if source else 'base'}|{examples_keys[target]}",
                lambda: adapted.document_nll(examples[target]),
            )

    def losses(examples, examples_keys, measured: np.ndarray | None = None) -> HeldOutLosses:
        """Per-document NLL sums of every target's ``examples`` under the base model and each adapter (with
        ``measured`` [source, target], only where it is true: elsewhere the base model's)."""
        measured = np.ones((len(names), len(names)), dtype=bool) if measured is None else measured
        units = max(len(examples[t]) for t in names)
        counts = np.zeros((len(names), units))
        for t, target in enumerate(names):
            counts[t, : len(examples[target])] = [e.num_scored for e in examples[target]]
        base = _padded([nll_of(None, 0, None, t, examples, examples_keys) for t in names], units)
        adapted = np.zeros((len(seeds), len(names), len(names), units))
        for r, seed in enumerate(seeds):
            for s, source in enumerate(tqdm(names, desc=f"adapters, seed {seed}")):
                adapted[r, s] = base
                targets = [t for u, t in enumerate(names) if measured[s, u]]
                done = [f"{keys[source]}|seed{seed}|{examples_keys[t]}" for t in targets]
                if all(key in nll_ledger.entries for key in done):
                    rows = [nll_ledger.entries[key] for key in done]
                else:
                    weights = bench.adapter(source, task_examples[source], seed)
                    rows = [nll_of(source, seed, weights, t, examples, examples_keys) for t in targets]
                if rows:
                    adapted[r, s, measured[s]] = _padded(rows, units)
        return HeldOutLosses(base, adapted, counts, relative_perplexity=True)

    ground_truth = losses(eval_examples, eval_keys)
    # the second stage of a two-stage selection: the loss of the target's own sample (its task data) under the
    # default first stage's candidates
    sample_measured = (
        ~np.eye(len(names), dtype=bool)
        if every_sample
        else recall.measured_pairs({"activation": sketch.activation, "error": sketch.error})
    )
    sample_losses = losses(task_examples, keys, sample_measured)
    scores |= recall.two_stage_scores(scores, sample_losses.transfer().mean(axis=0))
    _, selections, official_recommendations = inputs.added
    return TransferStudy(
        names,
        ground_truth,
        scores,
        spec.sketch_id,
        settings,
        split,
        [len(t) for t in tasks],
        selections,
        official_recommendations,
        sample_losses,
        sample_measured,
    )


def _padded(rows: Sequence[Sequence[float]], width: int) -> np.ndarray:
    return np.array([list(row) + [0.0] * (width - len(row)) for row in rows])


#: the methods every selection table compares the others with (paired bootstrap differences), where they ran
REFERENCES = ("fishersketch", "embedding", "official_auto")


def report(study: TransferStudy, suite: str, title: str, figure: str) -> list[list]:
    """Print the selection table and write the heatmaps; return the table rows."""
    names = labels(suite)
    selection, pooled = study.selection(), study.pooled()
    random_top1 = selection["random"].top1
    rows = [
        [
            names[key],
            s.top1,
            s.top1 / random_top1,
            s.mean_regret,
            s.max_regret,
            s.mean_spearman,
            *(pooled.get(key, (None, None))),
        ]
        for key, s in selection.items()
    ]
    print_table(
        ["method", "top-1", "x random", "mean regret", "max regret", "Spearman/target", "pooled rho", "pooled p"],
        rows,
        title=title,
    )
    heatmaps(
        {"transfer (1 - ppl_s/ppl_base)": study.transfer} | {names[k]: v for k, v in study.scores.items()},
        study.names,
        common.SETUP.results_dir / figure,
        title,
        columns=4,
    )
    bootstrap = study.bootstrap()
    print_bootstrap(
        bootstrap,
        names,
        [r for r in REFERENCES if r in study.scores],
        f"{title}: paired bootstrap ({bootstrap['draws']} draws over targets and held-out documents)",
    )
    print("regimes:", {key: regime_counts(value) for key, value in study.selections.items()})
    print("trust:", study.trust())
    return rows


def run(
    texts: Mapping[str, Sequence[str]],
    group: str,
    title: str,
    paper: dict,
    started: float,
    official_package: bool = True,
) -> TransferStudy:
    """``transfer_study`` + ``report`` + ``<results>/paper_<group>.json`` and ``.png``; the methods the tables
    name are checked first."""
    suite = group.split("_")[0]
    check_references(suite, REFERENCES)
    study = transfer_study(texts, group=group, official_package=official_package)
    report(study, suite, title, f"paper_{group}.png")
    path = write_json(
        f"paper_{group}",
        {"description": title, "paper": paper, "quick": common.SETUP.quick, **study.as_dict()},
        started,
    )
    print(f"wrote {path}")
    return study
