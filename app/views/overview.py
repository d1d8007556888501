"""Read models for front ends: the runs list, log windows, metric series.

Plain data out of the store, shaped for display; no textual here (the TUI
and `app headless` both read through these). Every query is bounded, so a
store with years of runs and millions of log lines opens as fast as a new one.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lanpool.app.jobs.multinode import prefix_node
from lanpool.app.store import JobRow, Store
from lanpool.app.store.metric_lines import MetricsReader as MetricsReader  # (read here by the TUI)
from lanpool.app.views.terminal_text import safe_line
from lanpool.protocol import JobState
from lanpool.protocol.message_base import Record, record

LOG_STREAMS = ("out", "err", "sys")  # "met" is metrics, shown as curves instead


@record
class JobLine(Record):
    """One row of the runs list: a job and what the user asks about it."""

    job: JobRow
    variables: dict[str, Any]
    tag: str | None
    artifacts: int
    runners: tuple[str, ...]  # every node's runner (one for single-node jobs)

    @property
    def key(self) -> str:
        return self.job.id

    @property
    def status_text(self) -> str:
        j = self.job
        if j.exit_code is not None and j.state.is_terminal():
            return f"{j.status} ({j.exit_code})"
        if j.state is JobState.QUEUED and j.error:  # why it waits: what no runner has
            return f"{j.status}: {j.error}"
        return j.status

    @property
    def variables_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(self.variables.items()))


def job_lines(store: Store, text: str = "", status: str = "", limit: int = 500) -> list[JobLine]:
    out = []
    for job, variables, tag, n_art, nodes in store.job_rows(text, status, limit):
        try:
            values = json.loads(variables or "{}")
        except ValueError:
            values = {}
        runners = tuple(nodes.split(",")) if nodes else ((job.runner,) if job.runner else ())
        out.append(JobLine(job, values if isinstance(values, dict) else {}, tag, n_art, runners))
    return out


STATUS_CHOICES = tuple(str(s) for s in JobState)


@dataclass(slots=True)
class LogLine:
    text: str
    stream: str  # out, err, sys
    at: float | None = None  # when the agent received it (its chunk's time); None: not known


@dataclass
class LogWindow:
    """Lines of a job's log and, per node, the seq of the oldest one held (for paging back)."""

    lines: list[LogLine] = field(default_factory=list)
    oldest: dict[int, int] = field(default_factory=dict)  # node -> first seq in `lines`
    at_start: bool = True  # nothing older in the store


def decode_lines(data: bytes, stream: str, node: int | None, at: float | None = None) -> list[LogLine]:
    """Chunk bytes to display lines; `node` tags them (multi-node jobs), `at` is the chunk's
    time (each line of a chunk carries it, as `logs -t`). Lines are terminal-safe
    (app/views/terminal_text.py): whatever shows them never gets a job's escapes."""
    if node is not None:
        data = prefix_node(node, data)
    return [LogLine(safe_line(t), stream, at or None) for t in data.decode("utf-8", "replace").splitlines()]


def log_window(
    store: Store, job_id: str, max_lines: int, node: int | None = None, before: dict[int, int] | None = None
) -> LogWindow:
    """The last `max_lines` lines of a job's log (older than `before`, when paging back).

    Multi-node logs are merged by line number, so nodes' lines interleave
    about as they were printed.
    """
    nodes = store.log_nodes(job_id)
    multi = len(nodes) > 1 or any(n != 0 for n in nodes)
    if node is not None:
        nodes = [n for n in nodes if n == node]
    if len(nodes) == 1:  # one node (most jobs): its lines come in order, nothing to merge
        n = nodes[0]
        limit = None if before is None else before.get(n, 0)
        lines, first = _node_lines(store, job_id, n, limit, max_lines, n if multi else None)
        return LogWindow(lines=lines, oldest={n: first}, at_start=first == 0)
    tagged: list[tuple[int, int, LogLine]] = []
    for n in nodes:
        limit = None if before is None else before.get(n, 0)
        if limit == 0:
            continue  # that node is already at its start
        for seq, _n_lines, stream, data, at in store.node_tail(job_id, n, limit, max_lines, LOG_STREAMS):
            for i, line in enumerate(decode_lines(data, stream, n if multi else None, at)):
                if limit is None or seq + i < limit:  # a chunk may straddle the page boundary
                    tagged.append((seq + i, n, line))
    tagged.sort(key=lambda t: (t[0], t[1]))
    kept = tagged[-max_lines:]
    window = LogWindow(lines=[t[2] for t in kept])
    threshold = kept[0][0] if kept else 0
    for n in nodes:
        firsts = [seq for seq, k, _ in kept if k == n]
        window.oldest[n] = firsts[0] if firsts else min(threshold, (before or {}).get(n, threshold))
    window.at_start = all(v == 0 for v in window.oldest.values())
    return window


def _node_lines(
    store: Store, job_id: str, node: int, limit: int | None, max_lines: int, tag: int | None
) -> tuple[list[LogLine], int]:
    """The last `max_lines` lines of one node before seq `limit`, and the seq of the first one
    (0 when there is none: the node's start). Same numbering as the merge in log_window."""
    if limit == 0:
        return [], 0
    parts: list[tuple[int, list[LogLine]]] = []
    for seq, _n_lines, stream, data, at in store.node_tail(job_id, node, limit, max_lines, LOG_STREAMS):
        lines = decode_lines(data, stream, tag, at)
        if limit is not None and seq + len(lines) > limit:  # a chunk may straddle the page boundary
            lines = lines[: max(0, limit - seq)]
        parts.append((seq, lines))
    kept: list[list[LogLine]] = []
    first, room = 0, max_lines
    for seq, lines in reversed(parts):
        if room <= 0:
            break
        take = lines[-room:] if len(lines) > room else lines
        if take:
            first = seq + len(lines) - len(take)
            kept.append(take)
            room -= len(take)
    kept.reverse()
    return [line for part in kept for line in part], first


def search_log(store: Store, job_id: str, needle: str, limit: int = 1000) -> list[str]:
    """Lines of the whole stored log containing `needle` (case-insensitive), up to `limit`."""
    low = needle.lower()
    multi = len(store.nodes(job_id)) > 1
    found = []
    for node, _seq, stream, data in store.log_chunks(job_id):
        if stream not in LOG_STREAMS or low.encode() not in data.lower():
            continue
        for line in decode_lines(data, stream, node if multi else None):
            if low in line.text.lower():
                found.append(line.text)
                if len(found) >= limit:
                    return found
    return found


def save_log(store: Store, job_id: str, path: Path, node: int | None = None) -> int:
    """Write the job's whole stored log to `path`; returns the number of lines."""
    multi = len(store.nodes(job_id)) > 1
    count = 0
    with open(path, "wb") as out:
        for chunk_node, _seq, stream, data in store.log_chunks(job_id):
            if stream not in LOG_STREAMS or (node is not None and chunk_node != node):
                continue
            out.write(prefix_node(chunk_node, data) if multi else data)
            count += data.count(b"\n")
    return count


def metric_series(points: Iterable[dict[str, Any]]) -> dict[str, tuple[list[float], list[float]]]:
    """{name: (steps, values)} from metric points, in step order, non-numbers dropped."""
    series: dict[str, dict[float, float]] = {}
    for p in points:
        value = p.get("value")
        step = p.get("step")
        if not isinstance(value, (int, float)) or not isinstance(step, (int, float)) or value != value:
            continue
        series.setdefault(str(p["name"]), {})[step] = float(value)  # a re-sent point replaces itself
    return {name: (sorted(by), [by[s] for s in sorted(by)]) for name, by in series.items()}
