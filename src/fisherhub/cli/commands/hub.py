"""``fisherhub hub serve``: a local stand-in for the Hugging Face Hub, to try the Hub workflow (push, list, pull,
select, index) on this machine when the real Hub is out of reach.

A development tool, not the Hub: it answers the part of the Hub's HTTP API that huggingface_hub uses for small
files, on 127.0.0.1 only (nothing beyond this machine can reach it), accepts any token, and keeps its repos in
memory, or in a folder with --root DIR (they are still there after a restart). It prints the environment that
points fisherhub, huggingface_hub, datasets and transformers at it: export it in the shell you work in.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import tempfile
import threading
from pathlib import Path

from fisherhub.cli.support.arguments import HelpFormatter
from fisherhub.core.errors import InputError

#: the port ``serve`` listens on unless told otherwise (0: any free one)
DEFAULT_PORT = 8421
#: the address it listens on: this machine only
LOOPBACK = "127.0.0.1"
#: the account the local Hub says every token belongs to (``hf auth whoami``; repos created without an org)
LOCAL_USER = "me"
#: the token to export: the local Hub takes any, but writes need one
LOCAL_TOKEN = "hf_fisherhub_local_hub"
#: where a --root folder keeps the Hugging Face cache of the shell that uses it
CACHE_FOLDER = "hf-cache"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hub",
        help="a local stand-in for the Hugging Face Hub, for trying the Hub workflow (development tool)",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(
        dest="hub_command", metavar="COMMAND", required=True, help="serve: run the local Hub"
    )
    serve = commands.add_parser(
        "serve",
        help="serve a local Hub on 127.0.0.1 and print the environment that points the Hub clients at it",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    serve.add_argument(
        "--root",
        metavar="DIR",
        default=None,
        help="folder that keeps the repos across restarts (created if missing; default: in memory, lost on exit)",
    )
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port on 127.0.0.1 (0: any free port; default: {DEFAULT_PORT})"
    )
    serve.add_argument(
        "--busy",
        action="store_true",
        help="answer as the real Hub does a client that reads thousands of repos: 50-150 ms per request, 2%% of "
        "reads HTTP 429 with Retry-After, listings 1,000 repos a page, 1%% of the model repos failing after "
        "being listed (404, 500, a truncated .safetensors file); drawn from --seed",
    )
    serve.add_argument("--seed", type=int, default=0, help="the seed of --busy's faults (default: 0)")
    serve.set_defaults(func=run_serve)


def environment(endpoint: str, cache: Path) -> dict[str, str]:
    """The variables that point the Hub clients at ``endpoint``, with a Hugging Face cache of their own (files of
    the local Hub never mix with the real Hub's in the user's cache)."""
    return {
        "HF_ENDPOINT": endpoint,
        "HF_TOKEN": LOCAL_TOKEN,
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_DISABLE_XET": "1",  # the local Hub takes uploads inline or through LFS, not Xet
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def run_serve(args: argparse.Namespace) -> int:
    from fisherhub.testing.hub_faults import BUSY_HUB
    from fisherhub.testing.hub_server import HubServer
    from fisherhub.testing.hub_state import StateLockedError

    if not 0 <= args.port < 65536:
        raise InputError(f"--port {args.port}: give a port between 1 and 65535, or 0 for any free one")
    root = Path(args.root).absolute() if args.root else None
    if root is not None and root.exists() and not root.is_dir():
        raise InputError(f"--root {args.root} is a file: give a folder (it is created when missing)")
    server = HubServer(LOCAL_USER, LOOPBACK, root=root, port=args.port)
    if args.busy:
        server.faults = dataclasses.replace(BUSY_HUB, seed=args.seed)
    try:
        server.start()
    except StateLockedError as exc:
        raise InputError(f"--root {args.root}: {exc}; stop it first, or give another folder") from None
    except ValueError as exc:
        raise InputError(f"--root {args.root}: {exc}; give another folder") from None
    except OSError as exc:
        raise InputError(
            f"cannot listen on {LOOPBACK}:{args.port} ({exc.strerror or exc}): another local Hub (or another "
            "program) has the port; pass --port N, or --port 0 for any free one"
        ) from None
    cache = root / CACHE_FOLDER if root is not None else Path(tempfile.mkdtemp(prefix="fisherhub-local-hub-cache-"))
    count = len(server.repos)
    kept = (
        f"kept in {root} ({count} repo{'' if count == 1 else 's'} now; they survive a restart)"
        if root is not None
        else "in memory: lost when it stops (--root DIR keeps it)"
    )
    print(
        f"fisherhub local Hub at {server.endpoint}: a development stand-in for the Hugging Face Hub, reachable from "
        f"this machine only; any token is accepted. Repos: {kept}."
        + (
            " Busy: it answers as the real Hub does a client reading thousands of repos (--busy).\n"
            if args.busy
            else "\n"
        )
        + "Point the Hub clients (fisherhub, huggingface_hub, datasets, transformers) at it in the shell you work in:\n"
    )
    for name, value in environment(server.endpoint, cache).items():
        print(f"export {name}={value}")
    print("\nCtrl-C stops it; `unset HF_ENDPOINT HF_TOKEN HF_HUB_CACHE` goes back to the real Hub.", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        stopped.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    print("local Hub stopped" + (f"; its repos are in {root}" if root is not None else ""), file=sys.stderr)
    return 0
