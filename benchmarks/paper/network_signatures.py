"""Network-level signatures of a suite's tasks, computed ahead of its experiment (they are the slow part:
one forward and one backward pass of the full model per batch, on CPU), cached where the experiment reads them.

    python -m benchmarks.paper.network_signatures exp3 lora
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.paper import common, methods

#: granularity of the network sketches per suite, fixed before any result: a verbalizer task has one scored
#: token per prompt, so its exact (sequence) gradient is the per-example one; LM domains use position granularity
GRANULARITY = {"exp3": "sequence", "exp4": "token", "exp5": "token"}


def suite_tasks(suite: str, tokenizer) -> dict[str, list[common.Example]]:
    """The task examples of a suite (those its head signatures are sketched from)."""
    if suite == "exp3":
        from benchmarks.paper.exp3_verbalizer import task_examples

        return task_examples(tokenizer)[0]
    if suite == "exp4":
        from benchmarks.domains import natural_domains

        domains, names = natural_domains(), common.NATURAL_DOMAINS
    else:
        from benchmarks.domains import smiles_domains
        from benchmarks.paper.exp5_smiles import SMILES_SUBDOMAINS

        domains, names = smiles_domains(), SMILES_SUBDOMAINS
    split = common.DomainSplit()
    return {name: split.split(tokenizer, domains[name]["text"])[0] for name in names}


def suite_network_signatures(suite: str, module_set: str, model, tokenizer, tasks=None) -> list:
    """One network signature per task of ``suite`` over ``module_set`` (``methods.NETWORK_SETS``)."""
    tasks = suite_tasks(suite, tokenizer) if tasks is None else tasks
    spec = methods.network_spec(model, tokenizer, module_set, common.LoraSettings(), GRANULARITY[suite])
    cache = common.CACHE_DIR / "network"
    return [methods.network_signature(spec, model, examples, f"{suite}-{name.replace('/', '-')}", cache)
            for name, examples in tasks.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", choices=sorted(GRANULARITY))
    parser.add_argument("module_set", choices=methods.NETWORK_SETS)
    args = parser.parse_args()
    started = time.time()
    model, tokenizer = common.load_base_model()
    signatures = suite_network_signatures(args.suite, args.module_set, model, tokenizer)
    print(f"{len(signatures)} network signatures ({args.module_set}, sketch id {signatures[0].sketch_id}) in "
          f"{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
