"""`logs --tail N`, `--since WHEN`, `-t`: a job's log lines chosen and stamped as people read them.

The times are the agent's: it stamps each spool record as the job's output arrives
(agent/workspace/spool.py), the stamp travels with the log chunk and is stored with it. A chunk
holds lines that arrived within a tenth of a second, so each line carries its chunk's
time. Lines of an older agent or store have no time: `-t` shows a dash, `--since`
leaves them out (nothing says they are recent).
"""

import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from lanpool.app.errors import UsageError
from lanpool.app.jobs.multinode import prefix_node
from lanpool.app.store import Store

STREAMS = ("out", "err", "sys")  # "met" lines are metrics: `app headless metrics`
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_AGO = re.compile(r"(?:(\d+(?:\.\d+)?)([smhd]))+")
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")

Printer = Callable[[str, str, bytes], None]  # (job_id, stream, data), as render.LogPrinter


def parse_since(text: str, now: float | None = None) -> float:
    """Unix time from `10m`, `1h30m`, `2d` (that long ago) or a local date/time
    (`2025-05-01 14:00`, `2025-05-01T14:00:05`, `14:00`: today)."""
    now = time.time() if now is None else now
    raw = text.strip()
    if _AGO.fullmatch(raw):
        return now - sum(float(n) * _UNITS[u] for n, u in _PART.findall(raw))
    try:
        if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", raw):
            day = datetime.fromtimestamp(now).date().isoformat()
            return datetime.fromisoformat(f"{day}T{raw}").timestamp()
        return datetime.fromisoformat(raw).timestamp()
    except ValueError:
        pass
    raise UsageError(
        f"--since {text!r}: not a time; give a duration ago (30s, 10m, 2h, 1d, 1h30m) "
        "or a date/time (2025-05-01 14:00, 14:00 for today)"
    )


def stamp(at: float | None) -> bytes:
    """A line's time as `-t` prints it: local, to the millisecond."""
    if not at:
        return b"-".ljust(23) + b" "
    return datetime.fromtimestamp(at).isoformat(sep=" ", timespec="milliseconds").encode() + b" "


class LogSelection:
    """Prints a job's stored lines (the last `tail` per node, those since `since`, stamped
    with `timestamps`), then, called as a follow sink, each line stored after them.

    As a sink it reads the store rather than the chunk it is handed: the store has the
    chunk's time, and the chunk was stored before the sink is called.
    """

    # A follower commits rows in batches (app/store/log_batch.py): this sink has them stored first.
    reads_the_store = True

    def __init__(
        self,
        store: Store,
        job_id: str,
        printer: Printer,
        *,
        tail: int | None = None,
        since: float | None = None,
        timestamps: bool = False,
        node: int | None = None,
    ) -> None:
        self.store = store
        self.job_id = job_id
        self.printer = printer
        self.tail = tail
        self.since = since
        self.timestamps = timestamps
        self.node = node
        self.nodes = [n for n in store.log_nodes(job_id) if node is None or n == node]
        self.multi = len(store.nodes(job_id)) > 1
        self.cursor: dict[int, int] = {}  # node -> the seq after the last line printed or passed over

    def print_stored(self) -> int:
        """Print what the store holds now; returns the number of lines printed."""
        picked: list[tuple[int, int, str, bytes, float | None]] = []  # (seq, node, stream, line, at)
        for n in self.nodes:
            kept: deque[tuple[int, int, str, bytes, float | None]] = (
                deque(maxlen=self.tail) if self.tail is not None else deque()
            )
            for _seq, line_no, stream, line, at in self._lines(n, 0):
                kept.append((line_no, n, stream, line, at))
                self.cursor[n] = line_no + 1
            picked += kept
        picked.sort(key=lambda p: (p[0], p[1]))  # nodes interleave by line number, as in the TUI
        self._print_all((n, stream, line, at) for _seq, n, stream, line, at in picked)
        return len(picked)

    def __call__(self, job_id: str, stream: str, data: bytes) -> None:
        """Follow sink: print the lines stored since the last call."""
        for n in self.store.log_nodes(self.job_id):
            if self.node is not None and n != self.node:
                continue
            new = list(self._lines(n, self.cursor.get(n, 0)))
            if new:
                self.cursor[n] = new[-1][1] + 1
            self._print_all((n, stream, line, at) for _seq, _no, stream, line, at in new)

    def _lines(self, node: int, from_seq: int) -> Iterator[tuple[int, int, str, bytes, float | None]]:
        """(chunk seq, line seq, stream, line, at) of node `node` from `from_seq`, `since` applied."""
        for seq, stream, data, at in self.store.timed_chunks(self.job_id, node, from_seq, STREAMS):
            lines = data.splitlines(keepends=True)
            if self.since is not None and (at is None or at < self.since):
                self.cursor[node] = max(self.cursor.get(node, 0), seq + len(lines))
                continue
            for i, line in enumerate(lines):
                if seq + i >= from_seq:
                    yield seq, seq + i, stream, line, at

    def _print_all(self, lines: Iterable[tuple[int, str, bytes, float | None]]) -> None:
        """Print (node, stream, line, at) items, consecutive lines of one stream in one write."""
        run: list[bytes] = []
        run_stream = ""
        for node, stream, line, at in lines:
            if self.multi:
                line = prefix_node(node, line)
            if self.timestamps:
                line = stamp(at) + line
            if run and stream != run_stream:
                self.printer(self.job_id, run_stream, b"".join(run))
                run = []
            run_stream = stream
            run.append(line)
        if run:
            self.printer(self.job_id, run_stream, b"".join(run))
