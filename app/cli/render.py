"""Plain-text rendering for the headless CLI: tables, times, sizes, job log text."""

import sys
import time
from collections.abc import Sequence
from typing import BinaryIO

from app.terminal_text import safe_bytes, safe_line


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    # Cells hold names and text from runners and jobs: nothing in them reaches the terminal as a control.
    rows = [[safe_line(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def ago(ts: float | None, now: float | None = None) -> str:
    if not ts:
        return "-"
    secs = (now or time.time()) - ts
    if secs < 60:
        return f"{int(secs)}s ago"
    if secs < 3600:
        return f"{int(secs // 60)}m ago"
    if secs < 86400:
        return f"{int(secs // 3600)}h ago"
    return time.strftime("%Y-%m-%d", time.localtime(ts))


def duration(start: float | None, end: float | None, now: float | None = None) -> str:
    if not start:
        return "-"
    secs = (end or now or time.time()) - start
    if secs < 60:
        return f"{secs:.1f}s"
    minutes, secs = divmod(int(secs), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


class LogPrinter:
    """The sink that prints job log text: "out" lines to stdout, "err" and "sys" to stderr,
    metrics not at all (`app headless metrics` shows them).

    To a terminal the text is neutralised (app/terminal_text.py: no escape sequence
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


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a real stream
        return False
