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
GRANULARITY = {"exp3": "sequence", "exp4": "token", "exp5": "token", "exp6": "token"}
#: the ground truth's cache group of the lower-layer states (exp. 3: one for all tasks; else the domain's name)
PREFIX_GROUP = {"exp3": "verbalizer"}


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
    else:
        from benchmarks.domains import smiles_domains
        from benchmarks.paper.exp5_smiles import SMILES_SUBDOMAINS

        domains, names = smiles_domains(), SMILES_SUBDOMAINS
    split = common.DomainSplit()
    return {name: split.split(tokenizer, domains[name]["text"])[0] for name in names}


def suite_network_signatures(suite: str, module_set: str, tokenizer, tasks=None) -> list:
    """One network signature per task of ``suite`` over ``module_set`` (``methods.NETWORK_SETS``), from a fresh
    base model (no adapters). The model runs from the lowest sketched layer up (for "lora" the top layers, on
    the lower-layer states cached by the ground truth, computed here when missing) and its head at the scored
    positions only (``methods.top_layers``)."""
    tasks = suite_tasks(suite, tokenizer) if tasks is None else tasks
    cache = common.CACHE_DIR / "network"
    model, _ = common.load_base_model()
    lora = common.LoraSettings()
    first_layer = lora.first_layer if module_set == "lora" else 0
    spec = methods.network_spec(model, tokenizer, module_set, lora, GRANULARITY[suite])
    signatures = []
    for name, examples in tasks.items():
        group = PREFIX_GROUP.get(suite, name)
        prefix = common.prefix_states(model.get_decoder(), first_layer, examples,
                                      common.CACHE_DIR / f"prefix-L{first_layer}" / f"{group}.safetensors")
        with methods.top_layers(model, first_layer) as stand_in:
            signatures.append(methods.network_signature(spec, model, examples, f"{suite}-{name.replace('/', '-')}",
                                                        cache, prefix=prefix, stand_in=stand_in))
    return signatures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", choices=sorted(GRANULARITY))
    parser.add_argument("module_set", choices=methods.NETWORK_SETS)
    args = parser.parse_args()
    started = time.time()
    _, tokenizer = common.load_base_model()
    signatures = suite_network_signatures(args.suite, args.module_set, tokenizer)
    print(f"{len(signatures)} network signatures ({args.module_set}, sketch id {signatures[0].sketch_id}) in "
          f"{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
