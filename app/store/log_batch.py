"""Log rows of a followed job, stored a transaction at a time instead of a batch at a time.

A fast job's log arrives as hundreds of SSH batches a second; committing each one
made the commits (and the WAL checkpoints they trigger) most of the controller's
time (132 commits for a 1M-line flood). Rows wait here at most
`EVERY_S` seconds or `MAX_BYTES` bytes, so memory stays flat whatever the rate.

Nothing is lost by waiting: the runner keeps every line in its spool, and a follow
resumes where the store ends (`log_end`), so rows not yet committed when the
controller dies are asked for again. The follower flushes before it records a
status, so a reader never sees a job's end before the lines that came before it.
"""

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)

EVERY_S = 0.25  # longest a line waits before it is stored (what another process's view lags)
MAX_BYTES = 4 * 2**20  # most log bytes held here at once (memory stays flat)

Row = tuple[Any, ...]


class LogBatch:
    """Rows for `add_log_chunks`, committed by time or size; `flush` stores what waits now."""

    def __init__(
        self, store_rows: Callable[[list[Row]], None], every_s: float = EVERY_S, max_bytes: int = MAX_BYTES
    ) -> None:
        self._store_rows = store_rows
        self.every_s = every_s
        self.max_bytes = max_bytes
        self._rows: list[Row] = []
        self._bytes = 0
        self._since = 0.0  # when the oldest waiting row came
        self._timer: asyncio.TimerHandle | None = None
        self.commits = 0

    def add(self, rows: Iterable[Row]) -> None:
        for row in rows:
            self._rows.append(row)
            self._bytes += len(row[5])
        if not self._rows:
            return
        now = time.monotonic()
        if self._timer is None and self._since == 0.0:
            self._since = now
            self._arm()
        if self._bytes >= self.max_bytes or now - self._since >= self.every_s:
            self.flush()

    def _arm(self) -> None:
        """A job that goes quiet still has its last lines stored within `every_s`."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): flushed on the next add or by the caller
            return
        self._timer = loop.call_later(self.every_s, self._flush_later)

    def _flush_later(self) -> None:
        self._timer = None
        try:
            self.flush()
        except sqlite3.Error as exc:  # kept for the next flush; the follower's own flush raises it
            log.warning("could not store log lines yet: %s", exc)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._rows:
            return
        self._store_rows(self._rows)  # raises with the rows still here: nothing dropped
        self._rows, self._bytes, self._since = [], 0, 0.0
        self.commits += 1
