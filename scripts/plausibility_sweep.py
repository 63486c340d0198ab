"""Run a module (a benchmark, a script) with every signature it makes checked by the bounded-claims checks
(``fisherhub.testing.plausibility``), then print how many it made, how many were plausible, noise or doubted.

    python scripts/plausibility_sweep.py benchmarks.run --all --quick     # every benchmark's quick run
    python scripts/plausibility_sweep.py benchmarks.run exp2              # one full suite

Run from the repository root (``benchmarks`` is imported from there). Exits 1 when a signature or a pair is doubted
(a false alarm: the benchmarks sketch honest data), else with the module's own exit code.
"""

from __future__ import annotations

import runpy
import sys

from fisherhub.testing.plausibility import PlausibilityTally


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    module, *arguments = argv
    sys.path.insert(0, "")
    sys.argv = [module, *arguments]
    tally, code = PlausibilityTally(), 0
    with tally.watch():
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    print("\n".join(tally.lines()))
    return 1 if tally.doubted or tally.doubted_pairs else code


if __name__ == "__main__":
    sys.exit(main())
