"""``fisherhub install-metric [DIR] [--uninstall]``: install the ``fisher_alignment`` evaluate metric.

Without DIR, into evaluate's modules cache (``$HF_MODULES_CACHE``, default ``$HF_HOME/modules``) as evaluate keeps
a downloaded canonical module: afterwards ``evaluate.load("fisher_alignment")`` loads it by its bare name, offline
too (evaluate logs that it uses its cached copy). With DIR, into that folder (a ``fisher_alignment`` folder is
made inside unless DIR is named so), for ``evaluate.load("DIR/fisher_alignment")``. The copy names the fisherhub
version that installed it and warns when loaded under another one: run this again after upgrading (a stale copy
is replaced, and said so). ``--uninstall`` removes what this command installed there.
``evaluate.load(fisherhub.metric_path())`` needs no installing; ``evaluate.load("ORG/fisher_alignment")`` loads a
Space made with ``fisherhub metric-space --push``.
"""

from __future__ import annotations

import argparse

from fisherhub.cli.support.arguments import HelpFormatter


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "install-metric",
        help='install the evaluate metric, for evaluate.load("fisher_alignment") (or into a folder)',
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "folder",
        metavar="DIR",
        nargs="?",
        default=None,
        help="a folder to put it in, for evaluate.load('DIR/fisher_alignment') (default: evaluate's modules "
        "cache, for evaluate.load('fisher_alignment'))",
    )
    parser.add_argument("--uninstall", action="store_true", help="remove the copy this command installed")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fisherhub import __version__
    from fisherhub.metric import METRIC_NAME, install_metric, installed_copies, uninstall_metric

    where = "evaluate's modules cache" if args.folder is None else str(args.folder)
    if args.uninstall:
        removed = uninstall_metric(args.folder)
        for module in removed:
            print(f"removed {module}")
        if not removed:
            print(f"no fisher_alignment metric installed by fisherhub in {where}: nothing to remove")
        return 0
    earlier = installed_copies(args.folder)
    module = install_metric(args.folder)
    for old, version in earlier.items():
        if version != __version__:
            print(f"replaced a stale copy installed by fisherhub {version}: {old}")
    print(f"installed the fisher_alignment metric of fisherhub {__version__} in {where}: {module}")
    name = METRIC_NAME if args.folder is None else str(module.parent)
    print(f"load it with: evaluate.load({name!r})")
    return 0
