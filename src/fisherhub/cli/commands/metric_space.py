"""``fisherhub metric-space``: the ``fisher_alignment`` metric's Space (``hub_cards/evaluate_space/``: the metric
card, its page, the requirements and the module).

``--push spaces/ORG/fisher_alignment`` creates or updates it in one commit; afterwards
``evaluate.load("ORG/fisher_alignment")`` loads the metric from it (evaluate fetches ``fisher_alignment.py`` from
the Space of that name, so the name is fixed). ``--serve`` runs the page here: two signature uploads, then A,
S_a, S_e and ρ with their error bars and flags.
"""

from __future__ import annotations

import argparse

from fisherhub.cli.support.arguments import HelpFormatter


def register(subparsers: argparse._SubParsersAction) -> None:
    from fisherhub.cli.support.space_arguments import add_space_arguments

    parser = subparsers.add_parser(
        "metric-space",
        help="the fisher_alignment metric's Space: push it, or serve its page here",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    add_space_arguments(parser, "spaces/ORG/fisher_alignment")  # the name evaluate.load fetches the module by
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fisherhub.cli.support.space_arguments import publish_or_serve
    from fisherhub.core.errors import InputError
    from fisherhub.metric import METRIC_NAME
    from fisherhub.space.publish import metric_space_files, space_repo

    if args.push and space_repo(args.push).split("/")[1] != METRIC_NAME:  # before anything is read or pushed
        raise InputError(
            f"{args.push}: the metric's Space is named {METRIC_NAME} (spaces/ORG/{METRIC_NAME}): "
            f'evaluate.load("ORG/{METRIC_NAME}") fetches {METRIC_NAME}.py from the Space of that name'
        )

    def page():
        import evaluate

        from fisherhub.metric import metric_path
        from fisherhub.space.metric_app import build_metric_app

        return build_metric_app(evaluate.load(metric_path()))

    space = f"spaces/ORG/{METRIC_NAME}"
    return publish_or_serve(args, metric_space_files(), f"the {METRIC_NAME} metric's Space", page, space)
