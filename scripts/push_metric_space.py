"""Publish the ``fisher_alignment`` metric as an evaluate Space on the Hub: ``fisherhub metric-space --push
spaces/ORG/fisher_alignment``, with ORG defaulting to you.

    python scripts/push_metric_space.py --namespace ORG [--private]

Creates the Gradio Space ``ORG/fisher_alignment`` (or updates it) with ``hub_cards/evaluate_space/`` in one
commit: the metric card (README.md with evaluate's YAML header), ``app.py`` (its page: two signature uploads,
the result with its error bars and flags), ``requirements.txt`` and the module ``fisher_alignment.py`` (both
linked from src/fisherhub/metric/). Afterwards ``evaluate.load("ORG/fisher_alignment")`` loads the metric from the
Hub: evaluate fetches ``<name>.py`` from the Space named ``<name>``, so the Space name is fixed. The endpoint and
token are huggingface_hub's (``HF_ENDPOINT``, ``HF_TOKEN`` or ``hf auth login``).
"""

from __future__ import annotations

import argparse
import sys

from fisherhub.cli import main as fisherhub_main
from fisherhub.metric import METRIC_NAME


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namespace", help="user or organisation that owns the Space (default: you)")
    parser.add_argument("--private", action="store_true", help="create the Space private")
    parser.add_argument("--token", help="Hub token (default: huggingface_hub's stored or HF_TOKEN)")
    args = parser.parse_args(argv)
    if args.namespace is None:
        from huggingface_hub import HfApi

        args.namespace = HfApi(token=args.token).whoami()["name"]
    command = ["metric-space", "--push", f"spaces/{args.namespace}/{METRIC_NAME}"]
    return fisherhub_main(command + ["--private"] * args.private + (["--token", args.token] if args.token else []))


if __name__ == "__main__":
    sys.exit(main())
