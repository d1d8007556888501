"""Each job's metrics summed up as their points arrive: per metric, how many points, the last one,
the lowest and the highest (with their steps). `compare` reads these rows instead of every point a
job logged: a 100-point sweep of 10,000 points each was 2.7 s to decode and is now a few rows.

A point is a line of a "met" chunk that is a JSON object with "name" and "step" (what the TUI and
`metrics` read too: app/store/metric_lines.py). Order is the log's: node, then line, so "last" is
the newest line of the highest node, and of equal bests the first logged is the one kept. A value
that is no finite number (NaN, inf, text, a boolean) counts as a point, is never lowest or
highest, and as the last point leaves `last` empty.
"""

import json
import math
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lanpool.app.store.metric_lines import metric_points

_SCORES = frozenset(
    {"acc", "accuracy", "f1", "auc", "auroc", "precision", "recall", "score", "reward", "bleu", "iou", "map"}
)


def better_is(metric: str, mode: str | None = None) -> str:
    """ "min" or "max": `mode` when given, else read from the metric's name."""
    if mode:
        return mode
    words = [w for w in re.split(r"[^a-z0-9]+", metric.lower()) if w]
    return "max" if any(w in _SCORES or w.endswith("acc") for w in words) else "min"


# A point's place in its job's log as one integer: node, then line (a chunk's points are lines
# seq, seq+1, ... of it, fewer than its n_lines, so two chunks' points never share a place).
_NODE_SHIFT = 50


@dataclass
class StoredSummary:
    """One metric of one job. Steps are the job's own values (any JSON), kept as they were logged."""

    points: int = 0
    last: float | None = None
    last_step: Any = None
    last_at: int = -1
    low: float | None = None
    low_step: Any = None
    low_at: int = -1
    high: float | None = None
    high_step: Any = None
    high_at: int = -1

    def add(self, value: object, step: object, at: int) -> None:
        self.points += 1
        number = _number(value)
        if at >= self.last_at:
            self.last, self.last_step, self.last_at = number, step, at
        if number is None:
            return
        # (a better value, or an equal one logged earlier: the best is where it was first reached)
        if self.low is None or number < self.low or (number == self.low and at < self.low_at):
            self.low, self.low_step, self.low_at = number, step, at
        if self.high is None or number > self.high or (number == self.high and at < self.high_at):
            self.high, self.high_step, self.high_at = number, step, at

    def best(self, mode: str) -> tuple[float | None, Any]:
        """(value, step) of the best point: the lowest for "min", the highest for "max"."""
        return (self.low, self.low_step) if mode == "min" else (self.high, self.high_step)


_COLUMNS = "points, last, last_step, last_at, low, low_step, low_at, high, high_step, high_at"


def read_summaries(conn: sqlite3.Connection, job_ids: Iterable[str]) -> dict[str, dict[str, StoredSummary]]:
    """job id -> metric name -> its summary (a job that logged no metric: an empty map)."""
    return {job_id: _read(conn, job_id) for job_id in dict.fromkeys(job_ids)}


def fold_chunks(conn: sqlite3.Connection, chunks: list[tuple[str, int, int, bytes | str]]) -> None:
    """Add the points of new "met" chunks (job_id, node, seq, data) to their jobs' summaries.
    Called inside the transaction that stored the chunks, with only the chunks it added (a chunk
    that came twice must not count twice)."""
    by_job: dict[str, list[tuple[int, int, bytes | str]]] = {}
    for job_id, node, seq, data in chunks:
        by_job.setdefault(job_id, []).append((node, seq, data))
    for job_id, own in by_job.items():
        summaries = _read(conn, job_id)
        changed: set[str] = set()
        for node, seq, data in own:
            base = (node << _NODE_SHIFT) + seq
            for i, point in enumerate(metric_points(data)):
                name = point["name"]
                name = name if name.__class__ is str else str(name)
                summary = summaries.get(name)
                if summary is None:
                    summary = summaries[name] = StoredSummary()
                summary.add(point.get("value"), point["step"], base + i)
                changed.add(name)
        conn.executemany(
            f"INSERT OR REPLACE INTO metric_summaries (job_id, name, {_COLUMNS}) VALUES ({', '.join('?' * 12)})",
            [(job_id, name, *_row(summaries[name])) for name in changed],
        )


def rebuild(conn: sqlite3.Connection) -> None:
    """Every job's summaries from the chunks already stored (migration 14, once)."""
    conn.execute("DELETE FROM metric_summaries")
    job_ids = [r[0] for r in conn.execute("SELECT DISTINCT job_id FROM log_chunks WHERE stream = 'met'")]
    for job_id in job_ids:
        rows = conn.execute(
            "SELECT node, seq, data FROM log_chunks WHERE job_id = ? AND stream = 'met' ORDER BY node, seq",
            (job_id,),
        ).fetchall()
        fold_chunks(conn, [(job_id, node, seq, data) for node, seq, data in rows])


def _read(conn: sqlite3.Connection, job_id: str) -> dict[str, StoredSummary]:
    found = {}
    for name, *values in conn.execute(f"SELECT name, {_COLUMNS} FROM metric_summaries WHERE job_id = ?", (job_id,)):
        points, last, last_step, last_at, low, low_step, low_at, high, high_step, high_at = values
        found[name] = StoredSummary(
            points, last, _step(last_step), last_at, low, _step(low_step), low_at, high, _step(high_step), high_at
        )
    return found


def _row(s: StoredSummary) -> tuple[Any, ...]:
    steps = (json.dumps(s.last_step), json.dumps(s.low_step), json.dumps(s.high_step))
    return (s.points, s.last, steps[0], s.last_at, s.low, steps[1], s.low_at, s.high, steps[2], s.high_at)


def _step(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _number(value: object) -> float | None:
    if not isinstance(value, int | float) or isinstance(value, bool):  # text, a bool: no number
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond a float's range (JSON allows it)
        return None
    return number if math.isfinite(number) else None
