"""The one policy for the files a command writes: an existing file is replaced only with ``--overwrite``, and
what can be checked before the work starts (a folder in the way, a folder one cannot write into) is."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from fisherhub.core.errors import InputError

#: what every command's ``--overwrite`` says
OVERWRITE_HELP = (
    "replace output files that exist (default: an existing file is kept, and the run refused before it starts)"
)


def _folder_problem(path: Path) -> str | None:
    """Why the file ``path`` cannot be created in its folder (the nearest one that exists), or None."""
    folder = path.parent.absolute()
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write into {folder} (permission denied)"
    return None


def output_problem(path: str | os.PathLike, flag: str, overwrite: bool) -> str | None:
    """Why ``path`` cannot be written as ``flag``'s output now (None when it can)."""
    path = Path(path)
    if path.is_dir():
        return f"{flag} {path} is a folder: give the path of a file in it, e.g. {path / 'signature.safetensors'}"
    if path.exists() and not path.is_file():
        return f"{flag} {path} exists and is not a regular file: give another path"
    if path.exists() and not overwrite:
        return f"{flag} {path} exists: pass --overwrite to replace it, or give another path"
    if (problem := _folder_problem(path)) is not None:
        return f"{flag} {path}: {problem}; give a path in a writable folder"
    return None


def check_outputs(outputs: Iterable[tuple[str, str | os.PathLike | None]], overwrite: bool) -> None:
    """Refuse the outputs ((flag, path) pairs; a path None or '' for none) that cannot be written, in one message."""
    problems = [problem for flag, path in outputs if path and (problem := output_problem(path, flag, overwrite))]
    if problems:
        raise InputError("; ".join(problems))
