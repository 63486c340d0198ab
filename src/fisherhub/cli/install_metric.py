"""``fisherhub install-metric``: register the ``fisher_alignment`` metric in evaluate's modules cache.

Afterwards ``evaluate.load("fisher_alignment")`` works by its bare name, offline too
(``HF_EVALUATE_OFFLINE=1``); ``evaluate.load(fisherhub.metric.metric_path())`` needs no installing.
"""

from __future__ import annotations

import argparse

from fisherhub.cli.arguments import HelpFormatter


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "install-metric",
        help='make evaluate.load("fisher_alignment") work offline (registers the module in evaluate\'s cache)',
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--modules-cache",
        metavar="DIR",
        default=None,
        help="evaluate's modules cache (default: $HF_MODULES_CACHE, else $HF_HOME/modules); "
        "a custom folder must also be exported as HF_MODULES_CACHE for evaluate to find it",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fisherhub.metric import install_metric

    installed = install_metric(args.modules_cache)
    print(f"installed the fisher_alignment metric: {installed}")
    print('load it with: evaluate.load("fisher_alignment")  (offline: export HF_EVALUATE_OFFLINE=1)')
    return 0
