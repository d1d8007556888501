"""Display text both front ends share: times, sizes, job status, runner rows.

Pure functions of plain values (no textual, no terminal): `app headless` prints
them in its tables (app/cli/render.py), the TUI puts them in its widgets.
"""

import time

from lanpool.app.runners.views import RunnerView
from lanpool.app.store import JobRow
from lanpool.protocol import JobState

RUNNER_HEADERS = ("NAME", "ADDRESS", "STATE", "GPUS FREE", "JOBS", "EXECUTOR", "SOURCE", "LAST SEEN")


NAME_CHARS = 40  # a name's column in a table: a longer one (stored before names were bounded) is cut


def clip(text: str, width: int = NAME_CHARS) -> str:
    """`text` in at most `width` characters, ending in `...` where it was cut."""
    return text if len(text) <= width else text[: width - 3] + "..."


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


def status_text(job: JobRow, runner_state: str | None = None, pulling: int | None = None) -> str:
    """A job's status, with its exit code once it ended (and why a live one may be stale);
    `pulling`: how far its artifacts have come back (a pull under way, or left to resume)."""
    if job.exit_code is not None and job.state.is_terminal():
        text = f"{job.status} ({job.exit_code})"
        return text if pulling is None else f"{text}, pulling artifacts {pulling}%"
    if runner_state == "OFFLINE" and not job.state.is_terminal() and job.state is not JobState.QUEUED:
        return f"{job.status} (runner offline)"
    return job.status


def gpu_util_text(v: RunnerView) -> str:
    """ "37% 0%": each GPU's utilization now, "-" when the runner reports none."""
    return " ".join("?" if u is None else f"{u}%" for u in v.gpu_util) or "-"


def executor_text(props: dict[str, str]) -> str:
    """ "process, sandboxed": what runs jobs there and whether process jobs are kept off the
    runner's files (agent.executors.sandbox); "-" when the runner says nothing."""
    executor = props.get("executor", "") or "-"
    isolation = props.get("isolation", "")
    if not isolation:  # an older agent
        return executor
    return f"{executor}, {'sandboxed' if isolation.startswith('bwrap') else 'unsandboxed'}"


def runner_cells(v: RunnerView, now: float | None = None) -> list[str]:
    """One runner's row, in RUNNER_HEADERS order."""
    gpu_name = v.props.get("gpu_name", "")
    return [
        v.name,
        f"{v.host}:{v.port}",
        v.state,
        f"{v.gpus_free}/{v.gpus}" + (f" {gpu_name}" if gpu_name else ""),
        str(v.running),
        executor_text(v.props),
        v.source,
        ago(v.last_seen, now),
    ]
