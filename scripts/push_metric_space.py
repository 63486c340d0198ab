"""Publish the ``fisher_alignment`` metric as an evaluate Space on the Hub.

    python scripts/push_metric_space.py --namespace ORG [--private]

Creates the Gradio Space ``ORG/fisher_alignment`` and uploads ``hub_cards/evaluate_space/`` in one commit:
the metric card (README.md with evaluate's YAML header), ``app.py`` (evaluate's Gradio widget),
``requirements.txt`` and the module ``fisher_alignment.py`` (both linked from src/fisherhub/metric/).
Afterwards ``evaluate.load("ORG/fisher_alignment")`` loads the metric from the Hub: evaluate fetches
``<name>.py`` from the Space named ``<name>``, so the Space name is fixed. ``evaluate-cli create`` is not
used: it is broken with huggingface_hub >= 1. The endpoint and token are huggingface_hub's
(``HF_ENDPOINT``, ``HF_TOKEN`` or ``hf auth login``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fisherhub.metric import METRIC_NAME

SPACE_FOLDER = Path(__file__).resolve().parent.parent / "hub_cards" / "evaluate_space"


def push_metric_space(namespace: str | None = None, private: bool = False, token: str | None = None) -> str:
    """Create (or update) the Space ``namespace/fisher_alignment``; return the commit URL.

    ``namespace`` defaults to the authenticated user.
    """
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    repo_id = f"{namespace or api.whoami()['name']}/{METRIC_NAME}"
    api.create_repo(repo_id, repo_type="space", space_sdk="gradio", private=private, exist_ok=True)
    commit = api.upload_folder(
        repo_id=repo_id,
        repo_type="space",
        folder_path=SPACE_FOLDER,
        commit_message=f"Upload the {METRIC_NAME} evaluate metric",
    )
    return commit.commit_url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namespace", help="user or organisation that owns the Space (default: you)")
    parser.add_argument("--private", action="store_true", help="create the Space private")
    parser.add_argument("--token", help="Hub token (default: huggingface_hub's stored or HF_TOKEN)")
    args = parser.parse_args(argv)
    print(push_metric_space(args.namespace, private=args.private, token=args.token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
