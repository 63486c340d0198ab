"""Markdown tables of the issue 19 comparison from the suites' JSON results (for benchmarks/RESULTS.md).

    python -m benchmarks.paper.summary paper_exp3_verbalizer paper_exp4_domains
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.paper.common import RESULTS_DIR
from benchmarks.paper.methods import LABELS
from benchmarks.paper.transfer import METHODS

ORDER = ("fishersketch", "head_input", "network_lora", "network_all_linear", "auto", "auto_head", "fisher_shrunk", "fisher_shrunk_separable",
         "activation", "error", "linear_cka", "embedding", "diagonal_fisher", "official_auto", "random",
         "exact_fisher", "exact_error")
LABELS = METHODS | LABELS


def _cell(entry, digits: int = 3) -> str:
    low, high = entry["ci95"]
    return f"{entry['value']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def table(name: str) -> str:
    result = json.loads((RESULTS_DIR / f"{name}.json").read_text())
    labels = LABELS | ({"linear_cka": "linear CKA (paired)"} if "exp3" in name else {})
    boot = result["bootstrap"]
    lines = ["| method | top-1 [95% CI] | mean regret | max regret | Δtop-1 vs head A | Δmean regret vs head A | "
             "Δtop-1 vs text embedding | Δmean regret vs text embedding |", "|---|---|---|---|---|---|---|---|"]
    for key in [k for k in ORDER if k in boot["methods"]]:
        metrics = boot["methods"][key]
        cells = [labels.get(key, key), _cell(metrics["top1"]), _cell(metrics["mean_regret"]), _cell(metrics["max_regret"])]
        for reference in ("fishersketch", "embedding"):
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
