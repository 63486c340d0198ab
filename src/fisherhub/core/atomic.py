"""Writing a file so that it holds the new content or what it held before, never a partial file."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from safetensors import SafetensorError

from fisherhub.core.errors import InputError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """A temporary name beside ``path`` (``.<name>.<pid>.tmp``) to write to: moved onto ``path`` when the block
    ends, removed when it fails. A failure to write (a read-only folder, a full disk) is an ``InputError``
    that names the path and the reason, and leaves no temporary file."""
    folder, name = os.path.split(os.fspath(path))
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, (OSError, SafetensorError)):  # safetensors reports its failed writes as SafetensorError
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InputError(f"cannot write {os.fspath(path)} ({reason})") from exc
        raise
