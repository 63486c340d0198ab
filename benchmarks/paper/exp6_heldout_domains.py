"""Experiment 6: a held-out natural-domain suite, fixed before any of its numbers were seen (issue 27).

Design (committed before the first transfer number):

- **Domains** (``benchmarks.domains.heldout_domains``, 256 documents of 300–600 characters each, seed 0):
  twelve natural domains that no other suite uses. Seven plain: the Debian ``fortunes`` categories
  computers, definitions, people, politics, law and startrek, and the NYT editorial snippets of
  ``vaderSentiment``. Five that differ from those mainly in surface form (``domains.SURFACE_FORMS``):
  cookie fortunes in upper case, men-women in lower case, art as HTML (``<p>``, ``<br>``, entities), humorists as
  Markdown block quotes, wisdom with tab-indented lines and doubled spaces.
- **Sizes**: as experiment 4 (``common.DomainSplit``): documents cut to 64 tokens; task data = the first
  2,000 scored tokens (the signatures, the LoRA training set and the target's sample of a two-stage selection);
  held-out = the next documents up to 1,024 scored tokens.
- **Ground truth**: as experiment 4: one LoRA adapter per source (``common.LoraSettings``: rank 8, q/v of the
  top 10 layers, 16 steps), seeds 0 and 1; transfer(s → t) = 1 − ppl_s(t)/ppl_base(t) on t's held-out
  documents, mean over the seeds; the best source of t is the other domain with the largest transfer.
- **Methods**: every method of experiment 4 (head A, S_a, S_e, CKA, text embedding, diagonal Fisher, head-input A,
  network-level A on the LoRA modules, auto, shrunk ρ) and the two-stage selection with the first stage and k
  fixed in ``recall.DEFAULT_FIRST_STAGE`` / ``recall.DEFAULT_K`` from the other suites; paired bootstrap over
  targets and held-out documents (``scoring.paired_bootstrap``).

    python -m benchmarks.paper.exp6_heldout_domains [--no-official]
    python -m benchmarks.paper.exp6_heldout_domains --quick   # seconds: tiny random model and domains, temp folder
"""

from __future__ import annotations

import time

from benchmarks.domains import HELDOUT_DOMAINS, heldout_domains
from benchmarks.paper import common
from benchmarks.paper.transfer import run


def main(argv: list[str] | None = None) -> None:
    options = common.paper_arguments(__doc__.splitlines()[0], official=True, argv=argv)
    started = time.time()
    run(
        common.domain_texts(HELDOUT_DOMAINS, heldout_domains),
        "exp6_heldout",
        f"Experiment 6: LoRA source selection over {len(HELDOUT_DOMAINS)} held-out natural domains (five differing "
        "mainly in surface form), SmolLM2-135M",
        {},
        started,
        options.official_package,
    )


if __name__ == "__main__":
    main()
