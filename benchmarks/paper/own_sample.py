"""Each target's own sample under every candidate adapter: what a real second stage measures (issue 33).

A user gives ``select_adapter`` the target's own documents; in experiments 4–6 those are its task data (the first
2,000 scored tokens, 32 documents of at most 64 tokens: ``common.DomainSplit``). The suites measured them only
under the default first stage's top 3; here every target's task documents are measured under every other domain's
adapter (each LoRA seed of ``common.LORA_SEEDS``) and the base model, per document, on the cached lower-layer states
(the adapters start at layer 20), in a resumable ledger ``<group>_sample_nll_<settings>.json`` beside the suite's
``<group>_document_nll_*.json`` (same keys; entries that ledger already holds are read, not measured again).
The per-document sums go to ``results/paper_own_sample.json`` (one entry per suite, domains in the suite's order;
the PNG: each suite's transfer on the own samples, mean over the seeds), which ``benchmarks.paper.halving`` reads for its "own sample" setting: the second stage measures these documents
and is scored against the suite's ground truth (held-out transfer).

    python -m benchmarks.paper.own_sample [--suites exp6 exp4 exp5] [--seeds 0 1] [--ledgers-only] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from tqdm import tqdm

from benchmarks.domains import HELDOUT_DOMAINS, heldout_domains, natural_domains, smiles_domains
from benchmarks.paper import common
from benchmarks.paper.exp5_smiles import SMILES_SUBDOMAINS
from benchmarks.paper.report import write_json

#: suite → (its domains, their builder, the cache group of its ledgers)
SUITES: dict[str, tuple[Sequence[str], Callable, str]] = {
    "exp6": (HELDOUT_DOMAINS, heldout_domains, "exp6_heldout"),
    "exp4": (common.NATURAL_DOMAINS, natural_domains, "exp4_domains"),
    "exp5": (SMILES_SUBDOMAINS, smiles_domains, "exp5_smiles"),
}
RESULT = "paper_own_sample"


class SampleLedger:
    """Per-document NLL sums of examples under the base model or an adapter, read from the suite's own ledger
    where it has them, else measured into ``<group>_sample_nll_<settings>.json`` (resumable)."""

    def __init__(self, bench: common.LoraBench, group: str, split: common.DomainSplit):
        key = common.config_key(bench.settings, split)
        self.bench = bench
        self.ledger = common.Ledger(common.SETUP.cache_dir / f"{group}_sample_nll_{key}.json")
        suite_path = common.SETUP.cache_dir / f"{group}_document_nll_{key}.json"
        self.known = json.loads(suite_path.read_text()) if suite_path.exists() else {}

    def has(self, key: str) -> bool:
        return key in self.ledger.entries or key in self.known

    def nll(self, key: str, weights, examples: Sequence[common.Example]) -> list[float]:
        """The sums of ``examples`` under ``weights`` (None: the base model), kept under ``key``."""

        def measure() -> list[float]:
            if key in self.known:
                return self.known[key]
            with self.bench.using(weights) as adapted:
                return adapted.document_nll(examples)

        return self.ledger.get(key, measure)


def measure_targets(
    ledger: SampleLedger,
    sources: Mapping[str, list[common.Example]],
    targets: Mapping[str, list[common.Example]],
    seeds: Sequence[int],
    measure: bool = True,
) -> dict:
    """Every target's examples under the base model and under each source's adapter of each seed (a source is
    not measured on a target of its own name): ``base`` [t][u], ``adapted`` [r][s][t][u] (0 on the diagonal),
    ``counts`` [t][u] (scored tokens; documents padded with 0). The adapters that are needed are trained (or
    loaded) first, then the targets are measured one at a time, so an interrupted run has whole targets done;
    without ``measure`` only the ledgers are read (NaN where they lack a pair)."""
    bench = ledger.bench
    width = max(len(examples) for examples in targets.values())
    target_keys = {name: f"{name}:{common.examples_key(examples)}" for name, examples in targets.items()}
    prefixes = {(seed, s): f"{s}:{common.examples_key(sources[s])}|seed{seed}" for seed in seeds for s in sources}
    counts, base = np.zeros((len(targets), width)), np.zeros((len(targets), width))
    adapted = np.zeros((len(seeds), len(sources), len(targets), width))
    for t, (name, examples) in enumerate(targets.items()):
        counts[t, : len(examples)] = [e.num_scored for e in examples]
        base[t, : len(examples)] = ledger.nll(f"base|{target_keys[name]}", None, examples)
    pairs = [
        (r, s, t)
        for r, t, s in itertools.product(range(len(seeds)), range(len(targets)), range(len(sources)))
        if list(sources)[s] != list(targets)[t]
    ]

    def key(r: int, s: int, t: int) -> str:
        return f"{prefixes[(seeds[r], list(sources)[s])]}|{target_keys[list(targets)[t]]}"

    needed = sorted({(seeds[r], list(sources)[s]) for r, s, t in pairs if measure and not ledger.has(key(r, s, t))})
    weights = {(seed, s): bench.adapter(s, sources[s], seed) for seed, s in tqdm(needed, desc="adapters")}
    for r, s, t in tqdm(pairs, desc="own samples"):
        examples = targets[list(targets)[t]]
        if measure or ledger.has(key(r, s, t)):
            row = ledger.nll(key(r, s, t), weights.get((seeds[r], list(sources)[s])), examples)
            adapted[r, s, t, : len(row)] = row
        else:
            adapted[r, s, t] = np.nan
    return {"base": base, "adapted": adapted, "counts": counts}


def measure_suite(suite: str, seeds: Sequence[int], measure: bool = True) -> dict:
    """The own samples of ``suite``'s targets under every candidate of ``seeds`` (module docstring; without
    ``measure`` what the ledgers hold)."""
    names, load, group = SUITES[suite]
    texts = common.domain_texts(names, load)
    model, tokenizer = common.load_base_model()
    split = common.domain_split()
    task = {name: split.split(tokenizer, texts[name])[0] for name in texts}
    bench = common.LoraBench(model, common.lora_settings(), common.SETUP.cache_dir)
    for name in tqdm(task, desc="prefix states"):
        bench.prefix_states(task[name], group=name)
    losses = measure_targets(SampleLedger(bench, group, split), task, task, seeds, measure)
    return {
        "domains": list(task),
        "seeds": list(seeds),
        "relative_perplexity": True,
        **{key: value.tolist() for key, value in losses.items()},
    }


def own_transfer(losses: Mapping) -> np.ndarray:
    """[seed, source, target]: 1 − ppl_s/ppl_base of each target's own sample (0 where not measured)."""
    counts = np.asarray(losses["counts"]).sum(axis=1)
    base = np.asarray(losses["base"]).sum(axis=1) / counts
    adapted = np.asarray(losses["adapted"]).sum(axis=3) / counts
    return np.where(adapted > 0, -np.expm1(adapted - base), 0.0)


def figure(suites: Mapping[str, Mapping], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(suites), figsize=(5.5 * len(suites), 5), squeeze=False)
    for axis, (suite, losses) in zip(axes[0], suites.items()):
        image = axis.imshow(own_transfer(losses).mean(axis=0), cmap="viridis")
        axis.set_xticks(range(len(losses["domains"])), losses["domains"], rotation=90, fontsize=6)
        axis.set_yticks(range(len(losses["domains"])), losses["domains"], fontsize=6)
        axis.set(title=f"{suite}: transfer on the own samples", xlabel="target", ylabel="source")
        fig.colorbar(image, ax=axis, shrink=0.7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--suites", nargs="+", choices=list(SUITES), default=list(SUITES))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(common.LORA_SEEDS), help="LoRA seeds measured")
    parser.add_argument(
        "--ledgers-only", action="store_true", help="measure nothing: what the ledgers hold (NaN for the rest)"
    )
    chosen, rest = parser.parse_known_args(argv)
    options = common.paper_arguments(__doc__.splitlines()[0], argv=rest)
    started = time.time()
    path = common.SETUP.results_dir / f"{RESULT}.json"
    suites = json.loads(path.read_text())["suites"] if path.exists() and not options.quick else {}
    for suite in chosen.suites[:1] if options.quick else chosen.suites:
        suites[suite] = measure_suite(suite, chosen.seeds, not chosen.ledgers_only)
        adapted = np.asarray(suites[suite]["adapted"])
        print(f"{suite}: {adapted.shape[2]} targets × {adapted.shape[1] - 1} candidates × {adapted.shape[0]} seeds")
    figure(suites, common.SETUP.results_dir / f"{RESULT}.png")
    path = write_json(
        RESULT, {"description": __doc__.splitlines()[0], "quick": options.quick, "suites": suites}, started
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
