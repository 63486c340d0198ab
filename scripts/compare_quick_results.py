"""Compare every number of two ``python -m benchmarks.run --all --quick --out DIR`` runs.

    python scripts/compare_quick_results.py BEFORE AFTER [--again BEFORE2]

Walks every JSON file under BEFORE and the file of the same path under AFTER, and compares them value by
value (numbers exactly, strings and the shape of lists and dicts too). Timings and paths differ between any
two runs, so they are left out: keys that name a measurement (``seconds``, ``rounds``, ``peak_extra_bytes``, ...),
the content addresses of uploads, and strings holding a temporary path. With ``--again`` (a second run of the same code as BEFORE), the values that differ between
BEFORE and BEFORE2 are left out as well and listed: what the benchmarks do not reproduce themselves (request
counts of a threaded pool, for example). Exits 1 when any compared value differs.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

#: keys whose values are measurements of the run (timings, memory peaks, the machine), or content addresses of
#: uploads (which hold timestamps), never compared
TIMING_KEYS = re.compile(
    r"(^|_)(seconds|second|rounds|time|times|elapsed|wall|cpu_time|latency_s|machine|created|speedup|per_second)($|_)"
    r"|(_s|_ms)$|^s$|^peak_extra_bytes$|^load_average$|^PUT /lfs-upload/"
)
TEMPORARY_PATH = re.compile(r"(/tmp/|/private/var/|fisherhub-quick-)")


def flatten(value, path: str = "") -> dict[str, object]:
    """``path -> leaf`` of a JSON document (list items by index; a list's and a dict's size as a leaf)."""
    out: dict[str, object] = {}
    if isinstance(value, dict):
        out[f"{path}{{keys}}"] = sorted(value)
        for key, item in value.items():
            if TIMING_KEYS.search(str(key)):
                continue
            out.update(flatten(item, f"{path}/{key}"))
    elif isinstance(value, list):
        out[f"{path}[len]"] = len(value)
        for index, item in enumerate(value):
            out.update(flatten(item, f"{path}[{index}]"))
    elif isinstance(value, str) and TEMPORARY_PATH.search(value):
        pass
    else:
        out[path] = value
    return out


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b)


def leaves(folder: Path) -> dict[str, object]:
    found = {}
    for file in sorted(folder.rglob("*.json")):
        name = file.relative_to(folder).as_posix()
        found.update({f"{name}:{path}": leaf for path, leaf in flatten(json.loads(file.read_text())).items()})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--again", type=Path, help="a second run of BEFORE's code: what differs there is left out")
    args = parser.parse_args(argv)
    before, after = leaves(args.before), leaves(args.after)
    unstable = set()
    if args.again is not None:
        again = leaves(args.again)
        unstable = {key for key in before.keys() | again.keys() if not same(before.get(key), again.get(key))}
    compared = [key for key in before if key not in unstable]
    numbers = sum(isinstance(before[key], (int, float)) and not isinstance(before[key], bool) for key in compared)
    differing = [key for key in compared if not same(before[key], after.get(key))]
    extra = sorted(key for key in after.keys() - before.keys() if key not in unstable)
    files = len(list(args.before.rglob("*.json")))
    print(
        f"{files} JSON files, {len(compared)} values compared ({numbers} numbers), {len(unstable)} left out as unstable"
    )
    for key in sorted(unstable):
        print(f"  unstable between two runs of the same code: {key}")
    for key in differing:
        print(f"  DIFFERS {key}: {before[key]!r} -> {after.get(key, '<missing>')!r}")
    for key in extra:
        print(f"  NEW {key}: {after[key]!r}")
    print("identical" if not differing and not extra else f"{len(differing)} differ, {len(extra)} new")
    return 1 if differing or extra else 0


if __name__ == "__main__":
    sys.exit(main())
