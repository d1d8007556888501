"""Plain-text output of the headless CLI: tables and job log text (times and sizes: app/views/formatting.py)."""

import sys
from collections.abc import Sequence
from typing import IO, BinaryIO

from lanpool.app.views.terminal_text import safe_bytes, safe_line, safe_text


def say(text: str) -> None:
    """One of our own lines on stderr. They quote runners and jobs (names, errors): never a control sequence."""
    print(safe_text(text), file=sys.stderr, flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    # Cells hold names and text from runners and jobs: nothing in them reaches the terminal as a control.
    cells = [[safe_line(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=False)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in cells]
    return "\n".join(lines)


class LogPrinter:
    """The sink that prints job log text: "out" lines to stdout, "err" and "sys" to stderr,
    metrics not at all (`app headless metrics` shows them).

    To a terminal the text is neutralised (app/views/terminal_text.py: no escape sequence
    from a job reaches it); to a file or pipe, or with `raw`, it is written as stored.
    """

    def __init__(self, raw: bool = False, stdout: BinaryIO | None = None, stderr: BinaryIO | None = None) -> None:
        self.out = stdout or sys.stdout.buffer
        self.err = stderr or sys.stderr.buffer
        self._safe = {id(f): not raw and _isatty(f) for f in (self.out, self.err)}

    def __call__(self, job_id: str, stream: str, data: bytes) -> None:
        if stream == "met":
            return
        target = self.out if stream == "out" else self.err
        target.write(safe_bytes(data) if self._safe[id(target)] else data)
        target.flush()


def _isatty(stream: IO[bytes]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a real stream
        return False
