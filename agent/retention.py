"""What a runner keeps on disk: finished jobs' directories and the blob cache, within a budget.

`app agent gc` removes finished jobs older than --keep-days, then, while the
total of finished jobs and blobs exceeds --max-size, whichever is oldest of
the two: a finished job (by when it finished) or a blob (by when it was last
used). A job that has not finished (queued, starting, running) is never
touched, nor are its files. While the agent runs, gc cannot see what it is
about to use (a blob a controller was just told is there, a finished job whose
artifacts a controller has yet to pull), so it keeps what was used or finished
in the last `recent_s` (an hour, from agent/cli.py) and says so.
"""

import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.blobs import BlobCache
from agent.errors import AgentError
from agent.home import AgentHome
from agent.journal import JobRecord

log = logging.getLogger(__name__)

_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from "500M", "20G", "1.5TiB", "4096"."""
    found = _SIZE.fullmatch(text)
    if not found:
        raise AgentError(f"size {text!r} is not a size like 500M, 20G or 1T")
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


def tree_size(path: Path) -> int:
    """Bytes of the files under `path`, links not followed."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


@dataclass
class GcReport:
    jobs_removed: list[str] = field(default_factory=list)
    blobs_removed: int = 0
    bytes_freed: int = 0
    kept_unfinished: int = 0
    kept_recent: int = 0  # used or finished too recently to remove while the agent runs
    bytes_kept: int = 0


def finished_jobs(home: AgentHome) -> tuple[list[tuple[float, str, Path]], int]:
    """(finished_at, job id, dir) of finished jobs, oldest first; and how many have not finished."""
    done, unfinished = [], 0
    if not home.jobs.is_dir():
        return [], 0
    for job_dir in home.jobs.iterdir():
        try:
            record = JobRecord.load(job_dir)
        except (OSError, ValueError, TypeError, KeyError):
            continue  # not a journal this agent can read: not ours to judge
        if not record.terminal:
            unfinished += 1
            continue
        done.append((record.finished_at or job_dir.stat().st_mtime, record.job_id, job_dir))
    return sorted(done), unfinished


def collect(
    home: AgentHome, keep_days: float | None, max_size: int | None, now: float | None = None, recent_s: float = 0
) -> GcReport:
    now = time.time() if now is None else now
    report = GcReport()
    jobs, report.kept_unfinished = finished_jobs(home)
    blobs = BlobCache(home.blobs)
    # Oldest first, jobs and blobs together: (when, kind, size, path, job id).
    candidates: list[tuple[float, str, int, Path, str]] = [
        (finished, "job", tree_size(path), path, job_id) for finished, job_id, path in jobs
    ]
    if home.blobs.is_dir():
        candidates += [(mtime, "blob", size, path, "") for mtime, size, path in blobs.entries()]
    candidates.sort(key=lambda c: c[0])
    total = sum(c[2] for c in candidates)
    for when, kind, size, path, job_id in candidates:
        too_old = kind == "job" and keep_days is not None and when < now - keep_days * 86400
        over = max_size is not None and total > max_size
        if not (too_old or over):
            continue
        if when > now - recent_s:
            report.kept_recent += 1
            continue
        if kind == "job":
            shutil.rmtree(path, ignore_errors=True)
            report.jobs_removed.append(job_id)
        else:
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            report.blobs_removed += 1
        report.bytes_freed += size
        total -= size
    report.bytes_kept = total
    if home.legacy_transfer.is_dir():  # snapshot and artifact tars of an older version: unused
        report.bytes_freed += tree_size(home.legacy_transfer)
        shutil.rmtree(home.legacy_transfer, ignore_errors=True)
    return report
