"""Runs, jobs, runners, logs and artifacts in one SQLite file.

Every job status change goes through `set_job_status`, which also appends to
job_events, so the history of a job can always be read back.
"""

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from app.errors import LanpoolError, NotFoundError
from app.store.migrations import migrate
from app.store.transactions import atomic
from protocol import JobState


@dataclass(frozen=True)
class RunRow:
    name: str
    workflow: str
    project_dir: str
    created_at: float
    tag: str | None


@dataclass(frozen=True)
class JobRow:
    id: str
    run_name: str
    workflow: str
    runner: str
    host: str
    port: int
    status: str
    exit_code: int | None
    error: str | None
    submitted_at: float | None
    started_at: float | None
    finished_at: float | None
    artifacts_archive: str | None
    artifacts_pulled: int | None
    spec: str | None
    synced: int | None

    @property
    def state(self) -> JobState:
        return JobState(self.status)

    @property
    def artifact_paths(self) -> list[str]:
        return json.loads(self.spec or "{}").get("artifacts", [])


class Store:
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

    # -- runners -----------------------------------------------------------------

    def runner(self, name: str) -> dict | None:
        rows = self._dicts("SELECT * FROM runners WHERE name = ?", (name,))
        return rows[0] if rows else None

    def known_runner(self, name: str) -> dict:
        """The runner's row, which the caller knows is there (NotFoundError if it was removed meanwhile)."""
        row = self.runner(name)
        if row is None:
            raise NotFoundError(f"no runner {name!r}: `app headless runners` lists them")
        return row

    def runner_by_address(self, host: str, port: int) -> dict | None:
        """The runner at an address, a trusted one first: an advert may put another name there."""
        rows = self._dicts(
            "SELECT * FROM runners WHERE host = ? AND port = ? ORDER BY COALESCE(trusted, 0) DESC, added_at LIMIT 1",
            (host, port),
        )
        return rows[0] if rows else None

    def runners(self) -> list[dict]:
        return self._dicts("SELECT * FROM runners ORDER BY name")

    def set_runner(self, name: str, **fields: object) -> None:
        """Update runner columns (state, paired, trusted, props, conflict_*, last_ok, last_seen, host, port).

        `trusted=1` is the user's act (pairing, `runners add`, `--runner HOST:PORT`): it also
        records when, unless `trusted_at` is given."""
        allowed = {
            "state",
            "paired",
            "props",
            "conflict_key",
            "conflict_service",
            "conflict_seen",
            "last_ok",
            "last_seen",
            "host",
            "port",
            "host_key",
            "source",
            "trusted",
            "trusted_at",
        }
        assert set(fields) <= allowed, fields  # column names are code, never input
        if fields.get("trusted") and "trusted_at" not in fields:
            fields["trusted_at"] = time.time()
        with atomic(self.conn):
            assignments = ", ".join(f"{c} = ?" for c in fields)
            self.conn.execute(f"UPDATE runners SET {assignments} WHERE name = ?", (*fields.values(), name))

    def running_jobs(self, runner: str) -> list[JobRow]:
        rows = self.conn.execute(
            f"SELECT {_JOB_COLS} FROM jobs WHERE runner = ? AND status IN ('SUBMITTED', 'RUNNING')", (runner,)
        )
        return [JobRow(*r) for r in rows]

    def remove_runner(self, name: str) -> bool:
        with atomic(self.conn):
            return self.conn.execute("DELETE FROM runners WHERE name = ?", (name,)).rowcount > 0

    def _dicts(self, sql: str, params: tuple = ()) -> list[dict]:
        cur = self.conn.execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=False)) for row in cur]

    def upsert_runner(
        self, name: str, host: str, port: int, host_key: str, source: str = "manual", trusted: bool | None = None
    ) -> None:
        """Add a runner, or set a known one's address and key (callers check the key first).

        Another runner at the same address is left alone: an mDNS advert can put any name
        anywhere, and must never delete a pinned runner (app/adverts.py)."""
        now = time.time()
        trust = None if trusted is None else int(trusted)
        with atomic(self.conn):
            self.conn.execute(
                """INSERT INTO runners (name, host, port, host_key, source, added_at, last_seen, trusted, trusted_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, COALESCE(?, 0), CASE WHEN ? = 1 THEN ? END)
                   ON CONFLICT(name) DO UPDATE SET host=excluded.host, port=excluded.port,
                     host_key=excluded.host_key, last_seen=excluded.last_seen,
                     trusted=COALESCE(?, trusted),
                     trusted_at=CASE WHEN ? = 1 THEN excluded.trusted_at ELSE trusted_at END""",
                (name, host, port, host_key, source, now, now, trust, trust, now, trust, trust),
            )

    # -- runs and jobs -------------------------------------------------------------

    def run_name_taken(self, name: str) -> bool:
        return self.conn.execute("SELECT 1 FROM runs WHERE name = ?", (name,)).fetchone() is not None

    def create_run(
        self, name: str, workflow: str, project_dir: str, tag: str | None = None, variables: dict | None = None
    ) -> str | None:
        """Record a run; a tag moves to it from the run that had it (whose name is returned)."""
        with atomic(self.conn):
            previous = None
            if tag:
                row = self.conn.execute("SELECT name FROM runs WHERE tag = ?", (tag,)).fetchone()
                if row:
                    previous = row[0]
                    self.conn.execute("UPDATE runs SET tag = NULL WHERE tag = ?", (tag,))
            self.conn.execute(
                "INSERT INTO runs (name, workflow, project_dir, created_at, tag, variables) VALUES (?, ?, ?, ?, ?, ?)",
                (name, workflow, project_dir, time.time(), tag, json.dumps(variables or {})),
            )
        return previous

    def tagged_job(self, tag: str, workflow: str) -> JobRow | None:
        """The DONE job of `workflow` in the run tagged `tag`."""
        row = self.conn.execute(
            f"SELECT {_JOB_COLS} FROM jobs WHERE run_name = (SELECT name FROM runs WHERE tag = ?) "
            "AND workflow = ? AND status = 'DONE' AND synced = 1 ORDER BY finished_at DESC LIMIT 1",
            (tag, workflow),
        ).fetchone()
        return JobRow(*row) if row else None

    def tag_exists(self, tag: str) -> bool:
        return self.conn.execute("SELECT 1 FROM runs WHERE tag = ?", (tag,)).fetchone() is not None

    def reusable_job(self, cache_key: str) -> JobRow | None:
        """The newest DONE job with these inputs whose artifacts are in the local store."""
        row = self.conn.execute(
            f"SELECT {_JOB_COLS} FROM jobs WHERE cache_key = ? AND status = 'DONE' AND synced = 1 "
            "ORDER BY finished_at DESC LIMIT 1",
            (cache_key,),
        ).fetchone()
        return JobRow(*row) if row else None

    def last_inputs(self, project_dir: str, workflow: str) -> tuple[str, dict] | None:
        """(job id, cache inputs) of the newest job of `workflow` in this project that recorded them."""
        row = self.conn.execute(
            "SELECT j.id, j.cache_inputs FROM jobs j JOIN runs r ON r.name = j.run_name "
            "WHERE r.project_dir = ? AND j.workflow = ? AND j.cache_inputs IS NOT NULL "
            "ORDER BY j.submitted_at DESC LIMIT 1",
            (project_dir, workflow),
        ).fetchone()
        return (row[0], json.loads(row[1])) if row else None

    def create_job(
        self,
        job_id: str,
        run_name: str,
        workflow: str,
        runner: dict,
        spec: dict,
        cache_key: str | None = None,
        cache_inputs: dict | None = None,
    ) -> None:
        now = time.time()
        with atomic(self.conn):
            self.conn.execute(
                """INSERT INTO jobs (id, run_name, workflow, runner, host, port, status, submitted_at,
                                     artifacts_pulled, spec, synced, cache_key, cache_inputs)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 0, ?, ?)
                   ON CONFLICT(id) DO UPDATE SET runner = excluded.runner, host = excluded.host,
                     port = excluded.port, status = excluded.status, spec = excluded.spec, error = NULL,
                     cache_key = excluded.cache_key, cache_inputs = excluded.cache_inputs""",
                (
                    job_id,
                    run_name,
                    workflow,
                    runner["name"],
                    runner["host"],
                    runner["port"],
                    str(JobState.SUBMITTED),
                    now,
                    json.dumps(spec),
                    cache_key,
                    json.dumps(cache_inputs) if cache_inputs is not None else None,
                ),
            )
            self.conn.execute(
                "INSERT INTO job_events (job_id, at, status, detail) VALUES (?, ?, ?, ?)",
                (job_id, now, JobState.SUBMITTED, f"to {runner['name']}"),
            )

    def queue_job(self, job_id: str, run_name: str, workflow: str, reason: str) -> None:
        """A job waiting for a runner with room: QUEUED, with the reason."""
        with atomic(self.conn):
            self.conn.execute(
                """INSERT INTO jobs (id, run_name, workflow, runner, host, port, status, submitted_at, error,
                                     artifacts_pulled, spec, synced) VALUES (?, ?, ?, '', '', 0, ?, ?, ?, 0, '{}', 0)
                   ON CONFLICT(id) DO UPDATE SET error = excluded.error""",
                (job_id, run_name, workflow, str(JobState.QUEUED), time.time(), reason),
            )
            self.conn.execute(
                "INSERT INTO job_events (job_id, at, status, detail) VALUES (?, ?, ?, ?)",
                (job_id, time.time(), str(JobState.QUEUED), reason),
            )

    def set_job_status(self, job_id: str, status: str, detail: str = "", **fields: object) -> None:
        """Record a status (and other job fields); a transition is also logged as an event."""
        with atomic(self.conn):
            old = self.conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if old is None:
                raise NotFoundError(f"no job {job_id}")
            if JobState(old[0]).is_terminal() and not JobState(str(status)).is_terminal():
                # An end, once recorded, stands: a late "still running" (a stop's immediate reply,
                # another controller's refresh) never revives a job. Checked inside the transaction.
                return
            assert all(f in _JOB_FIELDS for f in fields), fields  # column names are code, never input
            cols = {"status": str(status), **fields}
            assignments = ", ".join(f"{c} = ?" for c in cols)
            self.conn.execute(f"UPDATE jobs SET {assignments} WHERE id = ?", (*cols.values(), job_id))
            if old[0] != status or detail:
                self.conn.execute(
                    "INSERT INTO job_events (job_id, at, status, detail) VALUES (?, ?, ?, ?)",
                    (job_id, time.time(), str(status), detail),
                )

    def update_job(self, job_id: str, **fields: object) -> None:
        """Set job fields other than its status (status changes go through set_job_status)."""
        assert "status" not in fields and all(f in _JOB_FIELDS for f in fields), fields
        with atomic(self.conn):
            assignments = ", ".join(f"{c} = ?" for c in fields)
            self.conn.execute(f"UPDATE jobs SET {assignments} WHERE id = ?", (*fields.values(), job_id))

    def job(self, job_id: str) -> JobRow:
        row = self.conn.execute(f"SELECT {_JOB_COLS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no job {job_id!r}: `app headless status` lists runs and jobs")
        return JobRow(*row)

    def jobs_of_run(self, run_name: str) -> list[JobRow]:
        rows = self.conn.execute(f"SELECT {_JOB_COLS} FROM jobs WHERE run_name = ? ORDER BY submitted_at", (run_name,))
        return [JobRow(*r) for r in rows]

    def resolve_jobs(self, ref: str) -> list[JobRow]:
        """Jobs named by a run name or a job id (a unique prefix of a job id works too)."""
        if not ref.strip():
            raise NotFoundError("name a run or a job: `app headless status` lists them")
        jobs = self.jobs_of_run(ref)
        if jobs:
            return jobs
        rows = self.conn.execute(
            f"SELECT {_JOB_COLS} FROM jobs WHERE id = ? OR id LIKE ? ESCAPE '\\'", (ref, _escape_like(ref) + "%")
        ).fetchall()
        exact = [r for r in rows if r[0] == ref]
        rows = exact or rows
        if not rows:
            raise NotFoundError(f"no run or job named {ref!r}: `app headless status` lists them")
        if len(rows) > 1:
            raise NotFoundError(f"{ref!r} matches {len(rows)} jobs; give more of the job id")
        return [JobRow(*rows[0])]

    def recent_runs(self, limit: int = 50) -> list[RunRow]:
        rows = self.conn.execute(
            "SELECT name, workflow, project_dir, created_at, tag FROM runs ORDER BY created_at DESC LIMIT ?", (limit,)
        )
        return [RunRow(*r) for r in rows]

    def job_rows(self, text: str = "", status: str = "", limit: int = 500) -> list[tuple]:
        """Jobs (newest first) with their run's variables and artifact count, for the runs list.

        `text` matches run name, job id, workflow, runner, tag or variables;
        `status` one job status. Bounded by `limit`: the list never loads the
        whole history (10,000 runs open in milliseconds).
        """
        where, params = [], []
        if text:
            like = "%" + _escape_like(text) + "%"
            where.append(
                "(j.run_name LIKE ? ESCAPE '\\' OR j.id LIKE ? ESCAPE '\\' OR j.workflow LIKE ? "
                "ESCAPE '\\' OR j.runner LIKE ? ESCAPE '\\' OR r.tag LIKE ? ESCAPE '\\' "
                "OR r.variables LIKE ? ESCAPE '\\')"
            )
            params += [like] * 6
        if status:
            where.append("j.status = ?")
            params.append(status)
        sql = (
            f"SELECT {', '.join('j.' + c for c in _JOB_COLS.split(', '))}, r.variables, r.tag, "
            "(SELECT COUNT(*) FROM artifacts a WHERE a.job_id = j.id), "
            "(SELECT GROUP_CONCAT(n.runner, ',') FROM job_nodes n WHERE n.job_id = j.id) "
            "FROM jobs j JOIN runs r ON r.name = j.run_name "
            + ("WHERE " + " AND ".join(where) + " " if where else "")
            + "ORDER BY j.submitted_at DESC LIMIT ?"
        )
        return [(JobRow(*row[:16]), *row[16:]) for row in self.conn.execute(sql, (*params, limit))]

    def job_events(self, job_id: str) -> list[tuple[float, str, str]]:
        return self.conn.execute(
            "SELECT at, status, detail FROM job_events WHERE job_id = ? ORDER BY rowid", (job_id,)
        ).fetchall()

    def set_node(
        self, job_id: str, node: int, runner: dict, status: str, exit_code: int | None = None, error: str = ""
    ) -> None:
        with atomic(self.conn):
            self.conn.execute(
                """INSERT INTO job_nodes (job_id, node, runner, host, port, status, exit_code, error)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(job_id, node) DO UPDATE SET
                   status = excluded.status, exit_code = excluded.exit_code, error = excluded.error""",
                (job_id, node, runner["name"], runner["host"], runner["port"], str(status), exit_code, error),
            )

    def nodes(self, job_id: str) -> list[dict]:
        return self._dicts("SELECT * FROM job_nodes WHERE job_id = ? ORDER BY node", (job_id,))

    # -- logs ------------------------------------------------------------------------

    def add_log_chunks(self, chunks: Iterable[tuple[str, int, int, int, str, bytes]]) -> None:
        """Store (job_id, node, seq, n_lines, stream, data) rows; a chunk seen twice is kept once."""
        with atomic(self.conn):
            self.conn.executemany(
                "INSERT OR IGNORE INTO log_chunks (job_id, node, seq, n_lines, stream, data) VALUES (?, ?, ?, ?, ?, ?)",
                chunks,
            )

    def log_end(self, job_id: str, node: int = 0) -> int:
        """The seq after the last stored line: where a re-attach resumes."""
        # Lines are numbered without overlap, so the newest chunk ends the log: one seek
        # down the primary key, where MAX(seq + n_lines) read the whole log (120 ms at 500k lines).
        row = self.conn.execute(
            "SELECT seq + n_lines FROM log_chunks WHERE job_id = ? AND node = ? ORDER BY seq DESC LIMIT 1",
            (job_id, node),
        ).fetchone()
        return row[0] if row else 0

    def log_line_count(self, job_id: str) -> int:
        return self.conn.execute(
            "SELECT COALESCE(SUM(n_lines), 0) FROM log_chunks WHERE job_id = ?", (job_id,)
        ).fetchone()[0]

    def log_chunks(self, job_id: str, from_seq: int = 0) -> Iterator[tuple[int, int, str, bytes]]:
        """(node, seq, stream, data) in order, from the chunk holding `from_seq`."""
        yield from self.conn.execute(
            "SELECT node, seq, stream, data FROM log_chunks WHERE job_id = ? AND seq + n_lines > ? ORDER BY node, seq",
            (job_id, from_seq),
        )

    def node_tail(
        self,
        job_id: str,
        node: int,
        before_seq: int | None,
        max_lines: int,
        streams: tuple[str, ...] = ("out", "err", "sys"),
    ) -> list[tuple[int, int, str, bytes]]:
        """The newest chunks of one node's log (before `before_seq`), holding at least
        `max_lines` lines, oldest first: (seq, n_lines, stream, data). Walks the primary
        key backwards, so the tail of a million-line log costs as much as a short one."""
        marks = ",".join("?" * len(streams))
        sql = (
            f"SELECT seq, n_lines, stream, data FROM log_chunks WHERE job_id = ? AND node = ? AND seq < ? "
            f"AND stream IN ({marks}) ORDER BY seq DESC"
        )
        out, lines = [], 0
        for row in self.conn.execute(sql, (job_id, node, before_seq if before_seq is not None else 1 << 62, *streams)):
            out.append(row)
            lines += row[1]
            if lines >= max_lines:
                break
        out.reverse()
        return out

    def stream_since(self, job_id: str, stream: str, after: dict[int, int]) -> list[tuple[int, int, int, bytes]]:
        """(node, seq, n_lines, data) of one stream's chunks newer than `after` (node -> seq)."""
        rows = []
        for node in self.log_nodes(job_id):
            # The stream index (migration 5), or SQLite takes the primary key and reads the job's
            # whole log (its chunks hold the bytes) to find a few metrics lines: 15-50 ms a call.
            rows += [
                (node, *r)
                for r in self.conn.execute(
                    "SELECT seq, n_lines, data FROM log_chunks INDEXED BY log_chunks_stream "
                    "WHERE job_id = ? AND node = ? AND seq > ? AND stream = ? "
                    "ORDER BY seq",
                    (job_id, node, after.get(node, -1), stream),
                )
            ]
        return rows

    def log_nodes(self, job_id: str) -> list[int]:
        """Nodes with log lines; one index seek per node, not a scan of the log."""
        nodes: list[int] = []
        after = -1
        while True:
            row = self.conn.execute(
                "SELECT MIN(node) FROM log_chunks WHERE job_id = ? AND node > ?", (job_id, after)
            ).fetchone()
            if row[0] is None:
                return nodes
            nodes.append(after := row[0])

    # -- artifacts ---------------------------------------------------------------------

    def set_artifacts(self, job_id: str, files: list[tuple[str, int]]) -> None:
        with atomic(self.conn):
            self.conn.execute("DELETE FROM artifacts WHERE job_id = ?", (job_id,))
            self.conn.executemany(
                "INSERT INTO artifacts (job_id, path, size) VALUES (?, ?, ?)", [(job_id, p, s) for p, s in files]
            )
            self.conn.execute("UPDATE jobs SET artifacts_pulled = 1 WHERE id = ?", (job_id,))

    def refuse_artifacts(self, job_id: str) -> None:
        """The job's artifacts came back and were refused (app/artifact_files.py): none
        are listed, and `artifacts_pulled` says so, so nothing asks for them again. The
        reason is recorded with the job's status."""
        with atomic(self.conn):
            self.conn.execute("DELETE FROM artifacts WHERE job_id = ?", (job_id,))
            self.conn.execute("UPDATE jobs SET artifacts_pulled = ? WHERE id = ?", (ARTIFACTS_REFUSED, job_id))

    def artifacts(self, job_id: str) -> list[tuple[str, int]]:
        return self.conn.execute(
            "SELECT path, size FROM artifacts WHERE job_id = ? ORDER BY path", (job_id,)
        ).fetchall()


ARTIFACTS_REFUSED = -1  # jobs.artifacts_pulled: 0 not yet, 1 pulled, -1 refused
_JOB_FIELDS = frozenset(JobRow.__dataclass_fields__)
_JOB_COLS = (
    "id, run_name, workflow, runner, host, port, status, exit_code, error, submitted_at, started_at, "
    "finished_at, artifacts_archive, artifacts_pulled, spec, synced"
)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
