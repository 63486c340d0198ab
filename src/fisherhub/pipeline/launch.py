"""How many processes ``accelerate launch`` was asked for, against how many it started.

accelerate's launcher starts N processes (with a process group) only for ``--multi_gpu``, a config file that says
so, or on a machine with more than one GPU; otherwise, ``--num_processes N`` included, it runs its single-process
launcher: one process, without a word. It then sets ``MASTER_ADDR``/``MASTER_PORT`` (for N > 1) but no
``WORLD_SIZE``, which is how a run tells (docs/distributed.md: on the CPU, ``--multi_gpu`` starts the N).
"""

from __future__ import annotations

import os
import warnings

#: what the single-process launcher sets (``ACCELERATE_MIXED_PRECISION``: every launcher; ``MASTER_PORT``: when
#: asked for more than one process or machine) and what only a multi-process launch sets (``WORLD_SIZE``)
_LAUNCHED, _ASKED_FOR_MORE, _MULTI_PROCESS = "ACCELERATE_MIXED_PRECISION", "MASTER_PORT", "WORLD_SIZE"


class FewerProcessesWarning(UserWarning):
    """``accelerate launch`` started fewer processes than it was asked for."""


def asked_processes() -> int | None:
    """The number of processes the ``accelerate launch`` that started this single process was asked for (its
    ``--num_processes``, else its config file's), when that is more than one; None when this process was not
    started that way, and 0 when it was but the number cannot be read (the launcher's command line is gone)."""
    if _LAUNCHED not in os.environ or _ASKED_FOR_MORE not in os.environ or _MULTI_PROCESS in os.environ:
        return None
    try:
        words = _launcher_words()
        from accelerate.commands.launch import launch_command_parser

        args, _ = launch_command_parser().parse_known_args(words)
        asked = args.num_processes
        if asked is None:
            from accelerate.commands.config import default_config_file
            from accelerate.commands.config.config_args import load_config_from_file

            config = args.config_file or (default_config_file if os.path.isfile(default_config_file) else None)
            asked = load_config_from_file(config).num_processes if config else None
    except (ImportError, OSError, LookupError, ValueError, SystemExit):
        return 0
    return asked if isinstance(asked, int) and asked > 1 else (None if isinstance(asked, int) else 0)


def _launcher_words() -> list[str]:
    """The words after ``launch`` on the command line of the parent process (``accelerate launch ...`` or
    ``python -m accelerate.commands.launch ...``)."""
    import psutil  # accelerate's own dependency

    words = psutil.Process().parent().cmdline()
    start = next(i for i, word in enumerate(words) if word == "launch" or word.endswith("accelerate.commands.launch"))
    return words[start + 1 :]


def warn_if_fewer_processes(started: int, command: str = "sketch --cpu") -> None:
    """A ``FewerProcessesWarning`` naming both numbers when ``accelerate launch`` was asked for more processes than
    the ``started`` ones, and the launch of ``fisherhub COMMAND`` that starts them."""
    asked = asked_processes() if started == 1 else None
    if asked is None:
        return
    wanted = f"{asked} processes" if asked else "several processes"
    warnings.warn(
        f"accelerate launch was asked for {wanted} but started {started}: without --multi_gpu (or a config file "
        "that says so) accelerate starts one process on a machine with fewer than 2 GPUs, so this run sketches "
        f"with {started}. For {asked or 'N'} processes on the CPU: accelerate launch --multi_gpu --num_processes "
        f"{asked or 'N'} --num_machines 1 --mixed_precision no --dynamo_backend no --main_process_port 0 -m fisherhub "
        f"{command} ... (docs/distributed.md)",
        FewerProcessesWarning,
        stacklevel=2,
    )
