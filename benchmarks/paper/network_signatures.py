"""Network-level signatures of a suite's tasks, computed ahead of its experiment (they are the slow part:
one forward and one backward pass of the full model per batch, on CPU), cached where the experiment reads them.

    python -m benchmarks.paper.network_signatures exp3 lora
"""

from __future__ import annotations

import argparse
import time

from benchmarks.paper import common, network


def suite_tasks(suite: str, tokenizer) -> dict[str, list[common.Example]]:
    """The task examples of a suite (those its head signatures are sketched from)."""
    if suite == "exp3":
        from benchmarks.paper.exp3_verbalizer import task_examples

        return task_examples(tokenizer)[0]
    if suite == "exp4":
        from benchmarks.domains import natural_domains

        domains, names = natural_domains(), common.NATURAL_DOMAINS
    elif suite == "exp6":
        from benchmarks.domains import HELDOUT_DOMAINS, heldout_domains

        domains, names = heldout_domains(), HELDOUT_DOMAINS
    elif suite == "exp7":
        from benchmarks.domains import PREREGISTERED_DOMAINS, preregistered_domains

        domains, names = preregistered_domains(), PREREGISTERED_DOMAINS
    else:
        from benchmarks.domains import smiles_domains
        from benchmarks.paper.exp5_smiles import SMILES_SUBDOMAINS

        domains, names = smiles_domains(), SMILES_SUBDOMAINS
    split = common.domain_split()
    return {name: split.split(tokenizer, domains[name]["text"])[0] for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", choices=sorted(network.GRANULARITY))
    parser.add_argument("module_set", choices=network.NETWORK_SETS)
    args = parser.parse_args()
    started = time.time()
    _, tokenizer = common.load_base_model()
    signatures = network.suite_network_signatures(
        args.suite, args.module_set, tokenizer, suite_tasks(args.suite, tokenizer)
    )
    print(
        f"{len(signatures)} network signatures ({args.module_set}, sketch id {signatures[0].sketch_id}) in "
        f"{time.time() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
