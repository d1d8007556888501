"""Runs, jobs, runners, logs and artifacts in one SQLite file.

Every job status change goes through `set_job_status`, which also appends to
job_events, so the history of a job can always be read back. The Store is one
connection with its tables' methods grouped by area: runners.py, jobs.py (runs
and jobs), outputs.py (logs and artifacts), cleanup.py (removing runs).
"""

import contextlib
import errno
import os
import sqlite3
from pathlib import Path

from lanpool.app.errors import LanpoolError
from lanpool.app.store.cleanup import CleanupRows
from lanpool.app.store.jobs import JobRows
from lanpool.app.store.migrations import migrate
from lanpool.app.store.outputs import OutputRows
from lanpool.app.store.rows import ARTIFACTS_REFUSED, JobRow, RunRow
from lanpool.app.store.runners import RunnerRows

__all__ = ["ARTIFACTS_REFUSED", "JobRow", "RunRow", "Store", "disk_full"]

WAL_CHECKPOINT_PAGES = 16384  # 64 MiB of 4 KiB pages (see __init__)
# Less than this free where the store lives: a write that failed there failed for want of room.
# SQLite does not always say SQLITE_FULL: a WAL it cannot create or grow is a "disk I/O error".
_ROOM_BYTES = 1 << 20


def disk_full(exc: BaseException, where: Path) -> LanpoolError | None:
    """The one line for a write the controller could not make because the disk holding
    `where` (its data dir) is full; None for any other error. SQLite rolled the write's
    transaction back, so what the store held is all there."""
    if isinstance(exc, sqlite3.Error):
        full = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc)
    elif isinstance(exc, OSError):
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    else:
        return None
    try:
        stat = os.statvfs(where)
        full = full or stat.f_bavail * stat.f_frsize < _ROOM_BYTES
    except OSError:
        pass
    if not full:
        return None
    return LanpoolError(
        f"the disk holding {where} is full ({exc}): free space there (or set LANPOOL_HOME to a disk with room), "
        "then `app headless status`: what was stored is kept, and a job that ran on on its runner is recorded then"
    )


class Store(RunnerRows, JobRows, OutputRows, CleanupRows):
    def __init__(self, path: Path | str) -> None:
        try:
            _private(path)
            conn = sqlite3.connect(str(path), timeout=10, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across app crashes
            # A checkpoint runs inside the commit that crosses the WAL's limit, on the follower's
            # event loop, and syncs twice: at SQLite's default (4 MiB) a 100 MB log flood paid ~25
            # of them. 64 MiB: a flood pays one or two, and the WAL file is cut back to that size
            # after each (a reader's view stays cheap: the WAL index is in shared memory).
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
            conn.execute(f"PRAGMA journal_size_limit={WAL_CHECKPOINT_PAGES * 4096}")
            conn.execute("PRAGMA foreign_keys=ON")
            migrate(conn)
        except sqlite3.DatabaseError as exc:
            raise disk_full(exc, Path(path).parent) or LanpoolError(
                f"cannot open the lanpool database {path}: {exc}"
            ) from None
        self.conn = conn

    def close(self) -> None:
        self.conn.close()


def _private(path: Path | str) -> None:
    """The database file readable by its user only (it holds logs and `--env` values), before
    SQLite opens it: SQLite makes its -wal and -shm files with the database file's mode. A file
    an older lanpool made 0644 is tightened; ":memory:" and other URIs are left alone."""
    if str(path) == ":memory:" or str(path).startswith("file:"):
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return  # sqlite3.connect says why, in the caller's words
    try:
        info = os.fstat(fd)
        if info.st_mode & 0o077 and info.st_uid == os.getuid():
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for extra in ("-wal", "-shm"):
        with contextlib.suppress(OSError):
            os.chmod(f"{path}{extra}", 0o600)
