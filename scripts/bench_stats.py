"""What the benchmarks (scripts/bench*.py) share: summary figures of repeated measurements,
CPU time of processes, progress lines, and the error that makes a benchmark exit 1.

Measurements that did not happen are None; the figures leave them out.
"""

import os
import resource
import statistics
import sys
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """The benchmark could not run (not: its figures missed a target)."""


def say(text: str, prefix: str = "") -> None:
    """A progress line on stderr, so that stdout holds only the report (or --json)."""
    print(f"{prefix}{text}", file=sys.stderr, flush=True)


def med(xs: list[float | None]) -> float:
    """Median of the measurements there are; nan when none."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def pct(xs: list[float | None], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of the measurements there are; nan when none."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def summary(xs: list[float | None]) -> dict:
    """median, min, max and n of the measurements there are (None each when none: JSON null)."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def proc_cpu(pid: int) -> tuple[float, float]:
    """(own CPU seconds, CPU seconds of its waited-for children) of a running process; nan when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return (float("nan"), float("nan"))
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)", which may hold spaces: field 3 is fields[0]
    return ((int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK)


def children_cpu() -> float:
    """User + system CPU seconds of this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
