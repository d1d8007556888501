"""Runs, jobs, runners, logs and artifacts in one SQLite file.

Every job status change goes through `set_job_status`, which also appends to
job_events, so the history of a job can always be read back. The Store is one
connection with its tables' methods grouped by area: runners.py, jobs.py (runs
and jobs), outputs.py (logs and artifacts), cleanup.py (removing runs).
"""

import sqlite3
from pathlib import Path

from app.errors import LanpoolError
from app.store.cleanup import CleanupRows
from app.store.jobs import JobRows
from app.store.migrations import migrate
from app.store.outputs import OutputRows
from app.store.rows import ARTIFACTS_REFUSED, JobRow, RunRow
from app.store.runners import RunnerRows

__all__ = ["ARTIFACTS_REFUSED", "JobRow", "RunRow", "Store"]


class Store(RunnerRows, JobRows, OutputRows, CleanupRows):
    def __init__(self, path: Path | str) -> None:
        try:
            conn = sqlite3.connect(str(path), timeout=10, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across app crashes
            conn.execute("PRAGMA foreign_keys=ON")
            migrate(conn)
        except sqlite3.DatabaseError as exc:
            raise LanpoolError(f"cannot open the lanpool database {path}: {exc}") from None
        self.conn = conn

    def close(self) -> None:
        self.conn.close()
