"""Experiment 4: natural-domain source selection with LoRA adapters on SmolLM2-135M-Instruct.

Twelve natural domains (prose, drama, poetry, science fortunes, technical prose, code, legal, SMILES,
protein, DNA, movie reviews, tweets). One LoRA adapter per source domain, trained on its 2,000-token
task data; the ground truth is the drop of each target's held-out perplexity. For each target, every
method picks a source among the other eleven by its similarity to the target's signature / data; top-1,
regret and per-target Spearman against the ground truth (``transfer`` module). Paper (Llama-3.1-8B,
100 domains): FisherSketch top-1 45.7% (10.9x random), max regret 0.119.

    python -m benchmarks.paper.exp4_domains           # full run
    python -m benchmarks.paper.exp4_domains --quick   # seconds: tiny random model and domains, temp folder
"""

from __future__ import annotations

import time

from benchmarks.domains import natural_domains
from benchmarks.paper import common
from benchmarks.paper.transfer import run


def main(argv: list[str] | None = None) -> None:
    options = common.paper_arguments(__doc__.splitlines()[0], official=True, argv=argv)
    started = time.time()
    run(
        common.domain_texts(common.NATURAL_DOMAINS, natural_domains),
        "exp4_domains",
        f"Experiment 4: LoRA source selection over {len(common.NATURAL_DOMAINS)} natural domains, SmolLM2-135M "
        "(paper, Llama-3.1-8B, 100 domains: FisherSketch 45.7% top-1 = 10.9x random, max regret 0.119)",
        {"top1": 0.457, "x_random": 10.9, "max_regret": 0.119, "domains": 100},
        started,
        options.official_package,
    )


if __name__ == "__main__":
    main()
