"""What a runner keeps on disk: finished jobs' directories, the blob cache and the installed
requirements layers of jobs' Python environments, within a budget.

`app agent gc` removes finished jobs older than --keep-days, then, while the
total of finished jobs and blobs exceeds --max-size, whichever is oldest of
them: a finished job (by when it finished), a blob or a requirements layer (by
when it was last used; a layer an unfinished job's environment uses is kept). A job that has not finished (queued, starting, running) is never
touched, nor are its files. While the agent runs, gc cannot see what it is
about to use (a blob a controller was just told is there, a finished job whose
artifacts a controller has yet to pull), so it keeps what was used or finished
in the last `recent_s` (an hour, from agent/cli.py) and says so.

Queued jobs' files (their staged workspaces) are counted and kept, unless asked
(`--queued`): then each queued job is cancelled (STOPPED, saying why, in its journal
and log) and every file of it but those two goes. Only with no agent running: the
caller holds the data dir's lock exclusive (AgentHome.lock), which a running
agent holds shared, so an agent never starts a job whose files are going.
"""

import contextlib
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from lanpool.agent.errors import AgentError
from lanpool.agent.home import AgentHome
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.jobs.kept_secrets import SecretKeeper
from lanpool.agent.jobs.usage import record_usage
from lanpool.agent.workspace.blobs import BlobCache
from lanpool.agent.workspace.spool import LogSpool
from lanpool.protocol import JobState

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
    pyenvs_removed: int = 0  # installed requirements layers
    bytes_freed: int = 0
    kept_unfinished: int = 0
    kept_recent: int = 0  # used or finished too recently to remove while the agent runs
    bytes_kept: int = 0
    queued_kept: int = 0  # queued jobs, their files kept (no --queued)
    queued_bytes: int = 0  # what their files take
    queued_cancelled: list[str] = field(default_factory=list)  # --queued: cancelled, their files freed


def finished_jobs(home: AgentHome) -> tuple[list[tuple[float, str, Path]], list[Path]]:
    """(finished_at, job id, dir) of finished jobs, oldest first; and the dirs of those not finished."""
    done: list[tuple[float, str, Path]] = []
    unfinished: list[Path] = []
    needed: set[str] = set()  # inputs of DAG steps still waiting (agent.jobs.dag): kept like them
    if not home.jobs.is_dir():
        return [], []
    for job_dir in home.jobs.iterdir():
        try:
            record = JobRecord.load(job_dir)
        except (OSError, ValueError, TypeError, KeyError):
            continue  # not a journal this agent can read: not ours to judge
        if not record.terminal:
            unfinished.append(job_dir)
            needed.update(str(a) for a in record.after)
            continue
        done.append((record.finished_at or job_dir.stat().st_mtime, record.job_id, job_dir))
    unfinished += [path for _when, job_id, path in done if job_id in needed]
    return sorted(d for d in done if d[1] not in needed), unfinished


def requirement_layers(home: AgentHome, unfinished: list[Path]) -> list[tuple[float, int, Path]]:
    """(last used, size, dir) of the installed requirements layers no unfinished job layers on.

    A job's env names its layer in its `_lanpool.pth` (agent/python/job_envs.py); the layer's
    ready marker is touched each time a job reuses it."""
    if not home.pyenvs.is_dir():
        return []
    in_use = set()
    for job_dir in unfinished:
        for pth in (job_dir / "pyenv").glob("lib/python3*/site-packages/_lanpool.pth"):
            with contextlib.suppress(OSError):
                in_use.add(pth.read_text())
    out = []
    for layer in home.pyenvs.iterdir():
        if layer.is_symlink() or not layer.is_dir() or any(str(layer) + "/" in text for text in in_use):
            continue
        marker = layer / ".lanpool-ready"
        used = marker.stat().st_mtime if marker.exists() else layer.stat().st_mtime
        out.append((used, tree_size(layer), layer))
    return out


def queued_jobs(home: AgentHome) -> list[tuple[JobRecord, Path]]:
    """(record, dir) of the jobs waiting in the queue, in job-id order."""
    out = []
    for job_dir in sorted(home.jobs.iterdir()) if home.jobs.is_dir() else []:
        try:
            record = JobRecord.load(job_dir)
        except (OSError, ValueError, TypeError, KeyError):
            continue  # not a journal this agent can read: not ours to judge
        if record.state == JobState.QUEUED:
            out.append((record, job_dir))
    return out


CANCELLED_BY_GC = "cancelled while queued: its files were freed on the runner (`app agent gc --queued`)"
_KEPT_OF_CANCELLED = {"job.json", "log.spool"}  # what its controller still reads: why it ended, its log


def cancel_queued(home: AgentHome, record: JobRecord, job_dir: Path, now: float) -> int | None:
    """Cancel a queued job and free its files (the agent is stopped: the caller holds the lock);
    the bytes freed, or None when its journal could not say so (then nothing is removed: the
    next agent would start it without its files)."""
    record.state = JobState.STOPPED
    record.stop_requested = True
    record.error = CANCELLED_BY_GC
    record.finished_at = now
    record_usage(home.usage_ledger, record)  # a retry waiting in the queue ran before: its hours count
    if not record.save(job_dir):
        return None
    with contextlib.suppress(OSError):  # its log says why too; a full disk may refuse that line
        spool = LogSpool(job_dir / "log.spool")
        try:
            spool.append("sys", f"lanpool: {CANCELLED_BY_GC}\n".encode())
        finally:
            spool.close()
    SecretKeeper(home.secrets).forget(record.job_id)
    freed = 0
    for entry in job_dir.iterdir():
        if entry.name in _KEPT_OF_CANCELLED:
            continue
        if entry.is_dir() and not entry.is_symlink():
            freed += tree_size(entry)
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                freed += entry.lstat().st_size
                entry.unlink()
    return freed


def collect(
    home: AgentHome,
    keep_days: float | None,
    max_size: int | None,
    now: float | None = None,
    recent_s: float = 0,
    queued: bool = False,
) -> GcReport:
    """What gc removes (see the module docstring). `queued`: queued jobs are cancelled and their
    files freed; only while the caller holds the data dir's lock exclusive (AgentHome.lock)."""
    now = time.time() if now is None else now
    report = GcReport()
    for record, job_dir in queued_jobs(home):
        freed = cancel_queued(home, record, job_dir, now) if queued else None
        if freed is None:
            report.queued_kept += 1
            report.queued_bytes += tree_size(job_dir)
        else:
            report.queued_cancelled.append(record.job_id)
            report.bytes_freed += freed
    jobs, unfinished = finished_jobs(home)
    report.kept_unfinished = len(unfinished)
    blobs = BlobCache(home.blobs)
    # Oldest first, jobs and blobs together: (when, kind, size, path, job id).
    candidates: list[tuple[float, str, int, Path, str]] = [
        (finished, "job", tree_size(path), path, job_id) for finished, job_id, path in jobs
    ]
    if home.blobs.is_dir():
        candidates += [(mtime, "blob", size, path, "") for mtime, size, path in blobs.entries()]
    candidates += [(used, "pyenv", size, path, "") for used, size, path in requirement_layers(home, unfinished)]
    candidates.sort(key=lambda c: c[0])
    total = sum(c[2] for c in candidates)
    for when, kind, size, path, job_id in candidates:
        too_old = kind in ("job", "pyenv") and keep_days is not None and when < now - keep_days * 86400
        over = max_size is not None and total > max_size
        if not (too_old or over):
            continue
        if when > now - recent_s:
            report.kept_recent += 1
            continue
        if kind == "job":
            shutil.rmtree(path, ignore_errors=True)
            report.jobs_removed.append(job_id)
        elif kind == "pyenv":
            shutil.rmtree(path, ignore_errors=True)
            report.pyenvs_removed += 1
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
