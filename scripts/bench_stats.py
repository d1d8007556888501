"""What the benchmarks (scripts/bench*.py) share: summary figures of repeated measurements,
CPU time of processes, progress lines, and how a benchmark runs, reports and exits.

Measurements that did not happen are None; the figures leave them out.
"""

import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

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


def run_bench(
    prog: str,
    work: Callable[[], dict],
    stop: Callable[[], None],
    report: Callable[[dict, TextIO], None],
    as_json: bool,
    errors: tuple[type[BaseException], ...] = (),
) -> int:
    """Run `work` (it returns the figures), always `stop` (processes, temp dir), then report.

    The table goes to stdout, or with --json to stderr while stdout gets one JSON object.
    Exit code: 0, 1 when it could not run (BenchError, a failed subprocess, OSError and
    `errors`: one line and the subprocess's stderr, no traceback), 130 when interrupted.
    """

    def on_term(signum, frame):
        raise SystemExit(128 + signum)  # `finally: stop()` still runs

    signal.signal(signal.SIGTERM, on_term)
    t0 = time.perf_counter()
    try:
        results = work()
    except (BenchError, subprocess.SubprocessError, OSError, *errors) as exc:
        detail = getattr(exc, "stderr", None) or ""
        detail = detail.decode(errors="replace") if isinstance(detail, bytes) else detail
        say(f"{prog}: could not run: {exc}" + (f"\n{detail}" if detail else ""))
        return 1
    except KeyboardInterrupt:
        say(f"{prog}: interrupted")
        return 130
    finally:
        stop()
    results.setdefault("bench_wall_s", time.perf_counter() - t0)
    report(results, sys.stderr if as_json else sys.stdout)
    if as_json:
        print(json.dumps(results, indent=2))
    return 0
