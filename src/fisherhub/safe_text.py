"""Text from repos, made safe to print or publish: one sanitiser (``printable``) under every printer.

Repo ids, file names, card and signature metadata come from publishers one cannot trust; a terminal acts on the
control characters they may hold (ESC sequences clear the screen, set colours or the window title, write
hyperlinks; BEL rings; the Unicode bidirectional overrides reorder what is shown). ``printable`` replaces each
with a space. The command line writes through ``printable_streams`` (every print, table, warning, error and
log line of a command), and the library's own renderers (selection tables, index summaries, cards) apply
``printable`` to what they show, so text printed from Python is safe too.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Iterator
from typing import TextIO

#: C0 and C1 control characters and the Unicode bidirectional marks and overrides: what a terminal or a
#: renderer acts on
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: the same, less the line breaks and tabs of multi-line text
_CONTROL_IN_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(value: object) -> str:
    """``value`` as one line of text without control characters (each becomes a space): safe to print in a
    terminal or write into a card, whatever a repo's metadata holds."""
    return _CONTROL.sub(" ", str(value))


def printable_text(value: object) -> str:
    """``value`` as text whose line breaks and tabs are kept and whose other control characters become spaces."""
    return _CONTROL_IN_TEXT.sub(" ", str(value))


class PrintableStream(io.TextIOBase):
    """A text stream that writes ``printable_text`` of what it is given to ``stream``. A carriage return that
    begins or ends a write is kept (progress bars redraw their line that way); one inside a write is not."""

    def __init__(self, stream: TextIO):
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        head = "\r" if text.startswith("\r") else ""
        tail = "\r" if text.endswith("\r") and len(text) > len(head) else ""
        body = text[len(head) : len(text) - len(tail)]
        self.stream.write(head + printable_text(body) + tail)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")


@contextlib.contextmanager
def printable_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` written through ``PrintableStream`` while the block runs (a command)."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (
        stream if isinstance(stream, PrintableStream) else PrintableStream(stream) for stream in streams
    )
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = streams


def console(**options):
    """A ``rich`` console on ``sys.stdout`` that adds no escape sequences of its own (no colour, no markup, no
    hyperlinks), so that what it prints passes ``PrintableStream`` unchanged; ``options`` go to ``Console``."""
    from fisherhub.extras import require

    require("rich")
    from rich.console import Console

    return Console(file=sys.stdout, color_system=None, markup=False, emoji=False, highlight=False, **options)
