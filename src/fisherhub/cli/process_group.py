"""The way out of a command that may run under ``accelerate launch``: its process group handed back, and a
launched run (more than one process) ended at once, before the interpreter's teardown, where a gloo group's
threads can abort it (SIGABRT; docs/distributed.md)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable


def run_and_release(command: Callable[[], int]) -> int:
    """``command()``'s exit status; then the process group (if the command set one up) is destroyed, and in a
    run of more than one process this process exits with that status (``os._exit``, streams flushed)."""
    from accelerate import PartialState
    from accelerate.state import is_initialized

    launched = False
    try:
        status = command()
    finally:
        if is_initialized():  # the command made its state (PartialState() itself would set one up)
            state = PartialState()
            launched = state.num_processes > 1
            state.destroy_process_group()
    if launched:  # the work is written: skip the interpreter's teardown
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status
