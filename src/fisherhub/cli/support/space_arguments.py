"""What the Space commands share (``index space``, ``metric-space``): their options, and pushing or serving."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from fisherhub.cli.support.repo_arguments import add_token_argument


def add_space_arguments(parser: argparse.ArgumentParser, space: str) -> None:
    """``--push``, ``--private``, ``--serve``, ``--host``, ``--port``, ``--token``: what a Space command takes."""
    parser.add_argument(
        "--push",
        default=None,
        metavar=space,
        help="create or update this Space on the Hub, in one commit (nothing is pushed without it)",
    )
    parser.add_argument("--private", action="store_true", help="create the Space private")
    parser.add_argument("--serve", action="store_true", help="run the page here until interrupted")
    parser.add_argument("--host", default="127.0.0.1", help="the address --serve listens on")
    parser.add_argument("--port", type=int, default=7860, help="the port --serve listens on")
    add_token_argument(parser)


def publish_or_serve(
    args: argparse.Namespace, files: dict[str, bytes], what: str, demo: Callable[[], Any], space: str
) -> int:
    """``--push``: the Space gets ``files`` in one commit; ``--serve``: ``demo()`` (the page) runs here; neither:
    say what would be pushed (to a Space named like ``space``)."""
    from fisherhub.space.publish import push_space

    if args.push:
        url, changed = push_space(
            args.push, files, f"{what}: {', '.join(sorted(files))}", token=args.token, private=args.private
        )
        print(f"pushed {what} to {args.push}: {url}" if changed else f"{args.push} already holds {what}: {url}")
    if args.serve:
        from fisherhub.space.ui import launch

        print(f"serving {what} on http://{args.host}:{args.port}/ (Ctrl-C stops it)", flush=True)
        launch(demo(), host=args.host, port=args.port)
    if not (args.push or args.serve):
        print(f"{what}: nothing pushed. Its Space would hold {', '.join(sorted(files))}; run again with")
        print(f"--push {space} to create or update it (one commit), or --serve to run it here")
    return 0
