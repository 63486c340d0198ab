"""``fisherhub install-metric [DIR]``: copy the ``fisher_alignment`` metric module into a folder to load by path.

Afterwards ``evaluate.load("DIR/fisher_alignment")`` loads it, offline too (``HF_EVALUATE_OFFLINE=1``);
``evaluate.load(fisherhub.metric_path())`` needs no installing, and ``evaluate.load("ORG/fisher_alignment")``
loads a Space made with ``scripts/push_metric_space.py``. Nothing is written into evaluate's own namespace.
"""

from __future__ import annotations

import argparse

from fisherhub.cli.support.arguments import HelpFormatter


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "install-metric",
        help='copy the evaluate metric into a folder, for evaluate.load("DIR/fisher_alignment")',
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "folder",
        metavar="DIR",
        nargs="?",
        default=None,
        help="where to put it (a fisher_alignment folder is made inside unless DIR is named so; "
        "default: $HF_HOME/fisherhub/fisher_alignment)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fisherhub.metric import install_metric

    installed = install_metric(args.folder)
    print(f"installed the fisher_alignment metric: {installed}")
    print(f"load it with: evaluate.load({str(installed)!r})")
    return 0
