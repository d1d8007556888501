"""Removing runs and jobs, with every row that points at them (app/runs/retention.py decides what goes)."""

import sqlite3
from collections.abc import Iterator, Sequence

from lanpool.app.store.rows import JOB_COLS, RUN_COLS, JobRow, RunRow, Table
from lanpool.app.store.transactions import atomic
from lanpool.protocol import JobState

# SQLite allows 999 parameters in one statement on older builds: ids go in batches.
_BATCH = 500
_UNFINISHED = tuple(str(s) for s in JobState if not s.is_terminal())


class CleanupRows(Table):
    def run(self, name: str) -> RunRow | None:
        row = self.conn.execute(f"SELECT {RUN_COLS} FROM runs WHERE name = ?", (name,)).fetchone()
        return RunRow(*row) if row else None

    def runs_created_before(self, when: float) -> list[RunRow]:
        """Runs older than `when`, oldest first."""
        rows = self.conn.execute(
            f"SELECT {RUN_COLS} FROM runs WHERE created_at < ? ORDER BY created_at", (when,)
        ).fetchall()
        return [RunRow(*r) for r in rows]

    def unfinished_jobs(self) -> list[JobRow]:
        """Jobs queued, submitted or running, across every run."""
        marks = ",".join("?" * len(_UNFINISHED))
        rows = self.conn.execute(f"SELECT {JOB_COLS} FROM jobs WHERE status IN ({marks})", _UNFINISHED).fetchall()
        return [JobRow(*r) for r in rows]

    def known_jobs(self, job_ids: Sequence[str]) -> set[str]:
        """Those of `job_ids` that are jobs in the store (prune's test for orphaned artifact files)."""
        found: set[str] = set()
        for batch in _batches(job_ids):
            marks = ",".join("?" * len(batch))
            found.update(r[0] for r in self.conn.execute(f"SELECT id FROM jobs WHERE id IN ({marks})", batch))
        return found

    def log_bytes(self, job_ids: Sequence[str]) -> int:
        """Bytes of log text stored for these jobs (length() reads a blob's size, not its bytes)."""
        total = 0
        for batch in _batches(job_ids):
            marks = ",".join("?" * len(batch))
            row = self.conn.execute(
                f"SELECT COALESCE(SUM(LENGTH(data)), 0) FROM log_chunks WHERE job_id IN ({marks})", batch
            ).fetchone()
            total += row[0]
        return total

    def delete_jobs(self, job_ids: Sequence[str]) -> list[str]:
        """Delete the jobs with their events, nodes, logs and artifact rows (and rows any later
        table keeps about them), then each run left without a job; returns those runs' names.
        One transaction: a failure leaves every row in place."""
        with atomic(self.conn):
            referring = _tables_referring_to(self.conn, "jobs")
            runs: set[str] = set()
            for batch in _batches(job_ids):
                marks = ",".join("?" * len(batch))
                runs.update(
                    r[0] for r in self.conn.execute(f"SELECT DISTINCT run_name FROM jobs WHERE id IN ({marks})", batch)
                )
                for table, column in referring:
                    self.conn.execute(f'DELETE FROM "{table}" WHERE "{column}" IN ({marks})', batch)
                self.conn.execute(f"DELETE FROM jobs WHERE id IN ({marks})", batch)
            emptied = [
                name
                for name in sorted(runs)
                if self.conn.execute("SELECT 1 FROM jobs WHERE run_name = ? LIMIT 1", (name,)).fetchone() is None
            ]
            self.conn.executemany("DELETE FROM runs WHERE name = ?", [(n,) for n in emptied])
        return emptied

    def delete_runs(self, names: Sequence[str]) -> None:
        """Delete runs and everything of their jobs, in one transaction."""
        with atomic(self.conn):
            for name in names:
                job_ids = [r[0] for r in self.conn.execute("SELECT id FROM jobs WHERE run_name = ?", (name,))]
                self.delete_jobs(job_ids)  # nested: joins this transaction
                self.conn.execute("DELETE FROM runs WHERE name = ?", (name,))


def _tables_referring_to(conn: sqlite3.Connection, parent: str) -> list[tuple[str, str]]:
    """(table, column) of every foreign key to `parent`: read from the schema, so a table a later
    migration adds is cleaned too, and foreign_keys=ON never refuses the delete."""
    found = []
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        for fk in conn.execute(f'PRAGMA foreign_key_list("{table}")'):
            if fk[2] == parent:  # (id, seq, table, from, to, on_update, on_delete, match)
                found.append((table, fk[3]))
    return found


def _batches(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), _BATCH):
        yield items[i : i + _BATCH]
