"""Seed a suite's held-out loss ledger from its committed results, so a rerun with another sketch reuses the ground
truth it was fixed with (the same documents, adapters' settings and seeds) instead of recomputing it.

The committed JSON of an LM-domain suite holds every per-document loss sum (``held_out``: base [target][unit],
adapted [seed][source][target][unit], counts); each is written under the ledger key the suite would compute it
under, after checking that the suite's documents today have the same scored-token counts. The verbalizer suite's
(``held_out_nll``: base [task][prompt], adapted [seed][source][task][prompt]) goes under its keys after checking
that its held-out prompts and label words are those of the committed run (the same count, tasks and seeds).

    python -m benchmarks.paper.seed_ground_truth exp3_verbalizer exp4_domains exp5_smiles
"""

from __future__ import annotations

import json
import sys

from benchmarks.paper import common


def suite_texts(group: str) -> dict[str, list[str]]:
    from benchmarks import domains

    if group == "exp4_domains":
        built, names = domains.natural_domains(), common.NATURAL_DOMAINS
    elif group == "exp5_smiles":
        from benchmarks.paper.exp5_smiles import SMILES_SUBDOMAINS

        built, names = domains.smiles_domains(), SMILES_SUBDOMAINS
    else:
        raise SystemExit(f"no committed LM-domain ground truth for {group}")
    return {name: built[name]["text"] for name in names}


def seed_verbalizer(tokenizer) -> int:
    """The verbalizer suite's held-out label losses, from ``paper_exp3_verbalizer.json``."""
    from benchmarks.paper import exp3_verbalizer

    result = json.loads((common.RESULTS_DIR / "paper_exp3_verbalizer.json").read_text())
    settings = common.LoraSettings(**result["lora"])
    _, held_out, _, _ = exp3_verbalizer.task_examples(tokenizer)
    held = result["held_out_nll"]
    names = list(exp3_verbalizer.verbalizers())
    if result["tasks"] != names or result["verbalizers"] != {
        k: list(v) for k, v in exp3_verbalizer.VERBALIZERS.items()
    }:
        raise SystemExit("exp3_verbalizer: the tasks or label words differ from the committed ones")
    if result["prompts"]["held_out"] != len(held_out) or any(len(row) != len(held_out) for row in held["base"]):
        raise SystemExit("exp3_verbalizer: the held-out prompts differ from the committed ones")
    ledger = common.Ledger(
        common.SETUP.cache_dir / f"exp3_prompt_nll_{common.config_key(settings)}_{common.examples_key(held_out)}.json"
    )
    entries = {"base": held["base"]}
    for r, lora_seed in enumerate(result["seeds"]):
        for s, task in enumerate(names):
            entries[f"{task}|{lora_seed}"] = held["adapted"][r][s]
    added = 0
    for key, value in entries.items():
        if key in ledger.entries and ledger.entries[key] != value:
            raise SystemExit(f"exp3_verbalizer: the cached {key!r} losses differ from the committed ones")
        if key not in ledger.entries:
            ledger.get(key, lambda value=value: value)
            added += 1
    return added


def seed(group: str, tokenizer) -> int:
    if group == "exp3_verbalizer":
        return seed_verbalizer(tokenizer)
    result = json.loads((common.RESULTS_DIR / f"paper_{group}.json").read_text())
    settings, split = common.LoraSettings(**result["lora"]), common.DomainSplit(**result["split"])
    texts = suite_texts(group)
    names = result["domains"]
    assert names == list(texts), (names, list(texts))
    held = result["held_out"]
    ledger = common.Ledger(common.SETUP.cache_dir / f"{group}_document_nll_{common.config_key(settings, split)}.json")
    added = 0
    examples = {name: split.split(tokenizer, texts[name]) for name in names}
    keys = {n: f"{n}:{common.examples_key(examples[n][0])}" for n in names}
    eval_keys = {n: f"{n}:{common.examples_key(examples[n][1])}" for n in names}
    for t, target in enumerate(names):
        counts = [c for c in held["counts"][t] if c > 0]
        if counts != [e.num_scored for e in examples[target][1]]:
            raise SystemExit(f"{group}/{target}: the held-out documents differ from the committed ones")
        units = len(counts)
        entries = {f"base|{eval_keys[target]}": held["base"][t][:units]}
        for r, lora_seed in enumerate(result["seeds"]):
            for s, source in enumerate(names):
                entries[f"{keys[source]}|seed{lora_seed}|{eval_keys[target]}"] = held["adapted"][r][s][t][:units]
        for key, value in entries.items():
            if key not in ledger.entries:
                ledger.get(key, lambda value=value: value)
                added += 1
    return added


def main() -> None:
    _, tokenizer = common.load_base_model()
    for group in sys.argv[1:]:
        print(f"{group}: {seed(group, tokenizer)} held-out loss entries seeded from paper_{group}.json")


if __name__ == "__main__":
    main()
