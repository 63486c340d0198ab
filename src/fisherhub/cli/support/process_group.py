"""The way out of a command that may run under ``accelerate launch``: every process waits for the others, the
process group is handed back, and a launched run (more than one process) ends at once, before the
interpreter's teardown. A gloo group torn down while another process still works (the main one pushing), or
in the interpreter's teardown, can abort a process (SIGABRT; docs/distributed.md)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable


def run_and_release(command: Callable[[], int]) -> int:
    """``command()``'s exit status; then, once every process has returned, the process group (if the command
    set one up) is destroyed, and in a run of more than one process this process exits with that status
    (``os._exit``, streams flushed). A command that raises skips the wait: the launcher ends the others."""
    from accelerate import PartialState
    from accelerate.state import is_initialized

    launched = False
    status = command()
    if is_initialized():  # the command made its state (PartialState() itself would set one up)
        state = PartialState()
        launched = state.num_processes > 1
        state.wait_for_everyone()  # no group is torn down while another process still uses it
        state.destroy_process_group()
    if launched:  # the work is written: skip the interpreter's teardown
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status
