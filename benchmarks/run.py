"""Run one benchmark suite: ``python -m benchmarks.run SUITE [--quick] [--out DIR] [-- SUITE OPTIONS]``.

    python -m benchmarks.run --list                 # the suites and what each writes
    python -m benchmarks.run exp4 --quick           # seconds, tiny random model, results in a temp folder
    python -m benchmarks.run exp4                   # the full run (= python -m benchmarks.paper.exp4_domains)
    python -m benchmarks.run --all --quick --out DIR   # every suite's quick run, one folder each (CI)

A quick run never writes to benchmarks/results/ (the committed full-run results).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.registry import SUITES, Suite

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def quick_output_dir(suite: Suite) -> Path:
    """Where a quick run of ``suite`` writes by default: a fresh temp folder."""
    return Path(tempfile.mkdtemp(prefix=f"fisherhub-quick-{suite.name}-"))


def run(suite: Suite, quick: bool, out: Path | None, extra: list[str]) -> Path | None:
    """Run ``suite`` in this process (its module's ``main(argv)``); return where it wrote (None: its default)."""
    if quick:
        out = out or quick_output_dir(suite)
        if out.resolve() == RESULTS_DIR:
            raise SystemExit(f"a quick run does not write to {RESULTS_DIR} (the committed full-run results)")
    argv = [*(suite.quick if quick else ()), *(["--output-dir", str(out)] if out else []), *extra]
    main = importlib.import_module(suite.module).main
    started = time.perf_counter()
    main(argv)
    print(f"{suite.name}: {time.perf_counter() - started:.1f} s" + (f", wrote {out}" if out else ""))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", nargs="?", choices=sorted(SUITES), metavar="SUITE", help="see --list")
    parser.add_argument("--list", action="store_true", help="list the suites and what each writes")
    parser.add_argument(
        "--all", action="store_true", help="every suite, in this process (with --quick: one folder each under --out)"
    )
    parser.add_argument("--quick", action="store_true", help="seconds, tiny random models, results in a temp folder")
    parser.add_argument(
        "--out", type=Path, help="where the JSON and PNG go (default: the suite's own, or a temp folder)"
    )
    parser.epilog = "options after -- go to the suite's own command line"
    argv = sys.argv[1:] if argv is None else list(argv)
    own, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = parser.parse_args(own)
    if args.all:
        if not args.quick:
            raise SystemExit(
                "--all runs every suite's quick run: add --quick (full runs take hours; run them one by one)"
            )
        out = args.out or Path(tempfile.mkdtemp(prefix="fisherhub-quick-"))
        seconds = {}
        for suite in SUITES.values():
            started = time.perf_counter()
            run(suite, True, out / suite.name, extra)
            seconds[suite.name] = time.perf_counter() - started
        print(
            "\n".join(f"{name:<30} {s:6.1f} s" for name, s in seconds.items())
            + f"\n{'all':<30} {sum(seconds.values()):6.1f} s"
        )
        return
    if args.list or args.suite is None:
        width = max(map(len, SUITES))
        for suite in SUITES.values():
            print(
                f"{suite.name:<{width}}  python -m {suite.module:<34} {suite.description}; writes {', '.join(suite.outputs)}"
            )
        return
    run(SUITES[args.suite], args.quick, args.out, extra)


if __name__ == "__main__":
    main()
