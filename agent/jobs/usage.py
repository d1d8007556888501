"""The runner's usage ledger (`app agent usage`, like Slurm's sacct/sreport): one JSON line per job
that ran, written when it ends, whatever its end (DONE, FAILED, STOPPED, LOST ...).

It is its own file beside the journal (`usage.jsonl` in the data dir, 0600), not part of a
job's dir: `app agent gc` removes finished jobs' dirs, and their hours must outlive them.

A line is written before the record that says the job ended (agent.jobs.end.settle): a crash
between the two makes the next start settle the job again, and a second line. So a reader
counts each job once, by its id, the last line winning (it is what the journal says now).
The file is read as untrusted: a line cut short by a crash, one too long, or one whose fields
are not what this writes is skipped, and the file is streamed, never read whole.
"""

import json
import logging
import math
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lanpool.agent.jobs.journal import JobRecord

log = logging.getLogger(__name__)

LEDGER_NAME = "usage.jsonl"
MAX_LINE_BYTES = 16 * 1024  # a line this writes is well under 2 KB: a longer one is not ours
TEXT_CHARS = 256  # of each name a line holds (job id, owner, label, workflow, run, state)
_MOST_GPUS = 4096
_MOST_CPUS = 1_000_000.0
_MOST_MEMORY_MB = 1 << 40
SHOWN_CHARS = 40  # of a label or workflow in the table

BY = ("owner", "workflow")
_AGE = re.compile(r"(\d{1,9})([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class UsageEntry:
    """One job's line: who ran it, what it held, from when to when."""

    job_id: str
    owner: str  # the controller key's fingerprint (agent.jobs.owner)
    label: str  # that key's comment in authorized_keys
    workflow: str
    run: str
    gpus: int  # GPUs it held
    cpus: float  # CPUs it asked for (0: none asked, so none counted)
    memory_mb: int
    started_at: float
    finished_at: float
    state: str

    def seconds_in(self, start: float, end: float) -> float:
        """How long it ran within [start, end]."""
        return max(0.0, min(self.finished_at, end) - max(self.started_at, start))


def entry_of(record: JobRecord) -> UsageEntry | None:
    """The line of a job that ended; None for one that never started (it used nothing)."""
    if record.started_at is None or record.finished_at is None:
        return None
    return UsageEntry(
        job_id=record.job_id[:TEXT_CHARS],
        owner=record.owner[:TEXT_CHARS],
        label=record.owner_label[:TEXT_CHARS],
        workflow=record.workflow[:TEXT_CHARS],
        run=record.run_name[:TEXT_CHARS],
        # The GPUs it held; a job stopped while it waited for a retry holds none then: what it asked.
        gpus=len(record.gpus) or record.gpu_count,
        cpus=float(record.cpus),
        memory_mb=int(record.memory_mb),
        started_at=float(record.started_at),
        finished_at=max(float(record.finished_at), float(record.started_at)),
        state=str(record.state)[:TEXT_CHARS],
    )


def record_usage(path: Path, record: JobRecord) -> bool:
    """Append the ended job's line to the ledger at `path`; False (said in the agent's log) when
    the disk refused it: a ledger that cannot be written must not take the job's end down with it."""
    entry = entry_of(record)
    if entry is None:
        return True
    line = json.dumps(asdict(entry), sort_keys=True).encode() + b"\n"
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        log.warning("job %s: its usage could not be recorded in %s: %s", record.job_id, path, exc.strerror or exc)
        return False
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line  # a crash cut the last line: this one must not join it
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
        return True
    except OSError as exc:
        log.warning("job %s: its usage could not be recorded in %s: %s", record.job_id, path, exc.strerror or exc)
        return False
    finally:
        os.close(fd)


def read_usage(path: Path, since: float, until: float) -> list[UsageEntry]:
    """Each job's last line (by id) that ran within [since, until], in the order they ended."""
    latest: dict[str, UsageEntry] = {}
    for entry in _entries(path):
        latest.pop(entry.job_id, None)  # the last line wins, even one outside the window
        if entry.finished_at >= since and entry.started_at <= until:
            latest[entry.job_id] = entry
    return sorted(latest.values(), key=lambda e: e.finished_at)


def _entries(path: Path) -> Iterator[UsageEntry]:
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below; a missing ledger is an empty one
    except FileNotFoundError:
        return
    with f:
        while line := f.readline(MAX_LINE_BYTES + 1):
            if not line.endswith(b"\n") and len(line) > MAX_LINE_BYTES:
                while (rest := f.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                    pass  # the rest of an overlong line, skipped a bounded piece at a time
                continue
            entry = parse_line(line)
            if entry is not None:
                yield entry


def parse_line(line: bytes) -> UsageEntry | None:
    """One ledger line, or None when it is not a line this module writes."""
    try:
        data = json.loads(line)
    except ValueError:  # a line cut short, or not UTF-8
        return None
    if not isinstance(data, dict):
        return None
    texts = {k: data.get(k) for k in ("job_id", "owner", "label", "workflow", "run", "state")}
    if not all(isinstance(v, str) for v in texts.values()) or not texts["job_id"]:
        return None
    gpus = _number(data.get("gpus"), 0, _MOST_GPUS, whole=True)
    cpus = _number(data.get("cpus"), 0, _MOST_CPUS)
    memory = _number(data.get("memory_mb"), 0, _MOST_MEMORY_MB, whole=True)
    started = _number(data.get("started_at"), 0, 1e11)
    finished = _number(data.get("finished_at"), 0, 1e11)
    if gpus is None or cpus is None or memory is None or started is None or finished is None or finished < started:
        return None
    clipped = {k: str(v)[:TEXT_CHARS] for k, v in texts.items()}
    return UsageEntry(
        gpus=int(gpus), cpus=cpus, memory_mb=int(memory), started_at=started, finished_at=finished, **clipped
    )


def _number(value: Any, low: float, high: float, whole: bool = False) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and low <= number <= high else None


def parse_window(text: str) -> float:
    """`--since 30d` as seconds: a whole number and a unit (s, m, h, d, w), more than nothing.
    ValueError says what is wrong and what to give."""
    match = _AGE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"expects an age like 12h, 30d or 2w, not {text[:40]!r}")
    seconds = int(match[1]) * _UNITS[match[2]]
    if seconds <= 0:
        raise ValueError(f"{text.strip()} is an empty window: give an age like 12h, 30d or 2w")
    return float(seconds)


@dataclass
class UsageRow:
    """A group's totals: jobs, GPU-, CPU- and wall-hours within the window."""

    key: str
    label: str = ""
    jobs: int = 0
    gpu_hours: float = 0.0
    cpu_hours: float = 0.0
    wall_hours: float = 0.0

    def add(self, entry: UsageEntry, hours: float) -> None:
        self.jobs += 1
        self.gpu_hours += entry.gpus * hours
        self.cpu_hours += entry.cpus * hours
        self.wall_hours += hours


@dataclass
class UsageReport:
    by: str
    since: float
    until: float
    rows: list[UsageRow] = field(default_factory=list)
    total: UsageRow = field(default_factory=lambda: UsageRow("total"))
    entries: list[tuple[UsageEntry, float]] = field(default_factory=list)  # each job and its hours counted

    def to_json(self) -> dict[str, Any]:
        key = "owner" if self.by == "owner" else "workflow"
        rows = [{key: r.key, **({"label": r.label} if self.by == "owner" else {}), **_figures(r)} for r in self.rows]
        return {
            "by": self.by,
            "since": self.since,
            "until": self.until,
            "rows": rows,
            "total": _figures(self.total),
            "entries": [{**asdict(e), "hours": hours} for e, hours in self.entries],
        }


def _figures(row: UsageRow) -> dict[str, Any]:
    return {"jobs": row.jobs, "gpu_hours": row.gpu_hours, "cpu_hours": row.cpu_hours, "wall_hours": row.wall_hours}


def summarize(entries: list[UsageEntry], by: str, since: float, until: float) -> UsageReport:
    """The entries' hours within [since, until] (a job that started before counts from `since`),
    grouped by controller key (`owner`, its label shown) or by workflow; most GPU-hours first."""
    report = UsageReport(by, since, until)
    groups: dict[str, UsageRow] = {}
    for entry in entries:
        hours = entry.seconds_in(since, until) / 3600
        key = entry.owner if by == "owner" else entry.workflow
        row = groups.setdefault(key, UsageRow(key))
        if by == "owner" and entry.label:
            row.label = entry.label  # the latest (entries come in the order they ended)
        row.add(entry, hours)
        report.total.add(entry, hours)
        report.entries.append((entry, hours))
    report.rows = sorted(groups.values(), key=lambda r: (-r.gpu_hours, -r.cpu_hours, -r.wall_hours, r.key))
    return report


def shown(text: str, width: int = SHOWN_CHARS) -> str:
    """A name from a controller or a job, as one terminal-safe table cell: every character a
    terminal could act on (escape sequences, C1 controls, bidi overrides) shown as `?`, clipped."""
    safe = "".join(c if c.isprintable() else "?" for c in text)
    return safe if len(safe) <= width else safe[: width - 3] + "..."


def window_text(seconds: float) -> str:
    """`--since`'s window as given: 2592000 s is `30d`."""
    for unit, size in sorted(_UNITS.items(), key=lambda u: -u[1]):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def render(report: UsageReport, where: Path) -> str:
    """The table `app agent usage` prints: a row per group, then the total."""
    if report.by == "owner":
        headers = ["OWNER", "KEY"]
        cells = [[shown(r.label or "-"), shown(r.key or "(none: an older agent's job)", 24)] for r in report.rows]
    else:
        headers = ["WORKFLOW"]
        cells = [[shown(r.key or "-")] for r in report.rows]
    headers += ["JOBS", "GPU-HOURS", "CPU-HOURS", "WALL-HOURS"]
    body = [c + _cells(r) for c, r in zip(cells, report.rows, strict=True)]
    body.append(["total", *([""] * (len(headers) - 5)), *_cells(report.total)])
    widths = [max(len(row[i]) for row in [headers, *body]) for i in range(len(headers))]
    window = window_text(round(report.until - report.since))
    lines = [f"jobs that ran on this runner in the last {window} ({where}), by {report.by}"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *body]]
    if not report.rows:
        lines.append("no job ran in that window")
    return "\n".join(lines)


def _cells(row: UsageRow) -> list[str]:
    return [str(row.jobs), f"{row.gpu_hours:.3f}", f"{row.cpu_hours:.3f}", f"{row.wall_hours:.3f}"]
