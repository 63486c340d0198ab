"""Markdown tables of the issue 19 comparison from the suites' JSON results (for benchmarks/RESULTS.md).

python -m benchmarks.paper.summary paper_exp3_verbalizer paper_exp4_domains
"""

from __future__ import annotations

import json
import sys

from benchmarks.paper import selection_methods  # noqa: F401  (registers the methods)
from benchmarks.paper.common import RESULTS_DIR
from benchmarks.registry import labels

#: the methods every other is compared with: head A, the text embedding and the paper author's package
REFERENCES = {"fishersketch": "head A", "embedding": "text embedding", "official_auto": "official auto"}


def _cell(entry, digits: int = 3) -> str:
    low, high = entry["ci95"]
    return f"{entry['value']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def table(name: str) -> str:
    result = json.loads((RESULTS_DIR / f"{name}.json").read_text())
    names = labels(name.split("_")[1])
    boot = result["bootstrap"]
    references = [r for r in REFERENCES if r in boot["methods"]]
    lines = [
        "| method | top-1 [95% CI] | mean regret | max regret | "
        + " | ".join(f"Δtop-1 vs {REFERENCES[r]} | Δmean regret vs {REFERENCES[r]}" for r in references)
        + " |",
        "|---|---|---|---|" + "---|---|" * len(references),
    ]
    for key in [k for k in names if k in boot["methods"]]:
        metrics = boot["methods"][key]
        cells = [names[key], _cell(metrics["top1"]), _cell(metrics["mean_regret"]), _cell(metrics["max_regret"])]
        for reference in references:
            difference = boot["differences"].get(f"{key} - {reference}")
            cells += ["–", "–"] if difference is None else [_cell(difference["top1"]), _cell(difference["mean_regret"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    for name in sys.argv[1:]:
        print(f"### {name}\n\n{table(name)}\n")
        result = json.loads((RESULTS_DIR / f"{name}.json").read_text())
        print("regimes:", json.dumps(result.get("regimes")), "\ntrust:", json.dumps(result.get("trust")), "\n")


if __name__ == "__main__":
    main()
