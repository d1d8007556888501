"""Runs and their jobs: creation, status changes (each one logged as an event), lookups and listings."""

import json
import time
from typing import TYPE_CHECKING, Any

from lanpool.app.errors import NotFoundError
from lanpool.app.store.rows import JOB_COLS, JOB_FIELDS, RUN_COLS, JobRow, RunRow, Table, escape_like
from lanpool.app.store.transactions import atomic
from lanpool.protocol import JobState

if TYPE_CHECKING:  # `status` with filters builds one; a run never does (start-up time)
    from lanpool.app.store.run_filter import RunFilter

# A job_events status that is no job state: a warning about a job (e.g. an output it did
# not produce). Kept as an event, so the schema stays as it is.
WARNING = "WARNING"
_COMPARED = 50  # a workflow's newest jobs `plan` looks through for the one to compare with
# The newest runs first, read from idx_runs_created_at (rowid: the same order for runs made at the same time).
_NEWEST = "ORDER BY created_at DESC, rowid DESC LIMIT ?"


def _newest(limit: int, only: "RunFilter | None") -> tuple[str, list[object]]:
    """The names of the `limit` newest runs that `only` lets through, as a subquery and its params."""
    where, params = only.where() if only else ("1", [])
    return f"SELECT name FROM runs WHERE {where} {_NEWEST}", [*params, limit]


class JobRows(Table):
    def run_name_taken(self, name: str) -> bool:
        return self.conn.execute("SELECT 1 FROM runs WHERE name = ?", (name,)).fetchone() is not None

    def create_run(
        self,
        name: str,
        workflow: str,
        project_dir: str,
        tag: str | None = None,
        variables: dict[str, Any] | None = None,
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
                # `project`, the dir's last part, is the store's to set (migration 13's trigger)
                "INSERT INTO runs (name, workflow, project_dir, created_at, tag, variables) VALUES (?, ?, ?, ?, ?, ?)",
                (name, workflow, project_dir, time.time(), tag, json.dumps(variables or {})),
            )
        return previous

    def run_variables(self, name: str) -> dict[str, Any]:
        """The run's resolved variables, as recorded when it started ({} for none, or an unknown run)."""
        row = self.conn.execute("SELECT variables FROM runs WHERE name = ?", (name,)).fetchone()
        try:
            found = json.loads(row[0]) if row and row[0] else {}
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}

    def job_variables(self, job_id: str) -> dict[str, Any]:
        """The variables a job ran with: those of its cache inputs, else its run's ({} for none)."""
        row = self.conn.execute("SELECT cache_inputs, run_name FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return {}
        try:
            inputs = json.loads(row[0]) if row[0] else {}
        except ValueError:
            inputs = {}
        found = inputs.get("variables") if isinstance(inputs, dict) else None
        return found if isinstance(found, dict) else self.run_variables(row[1])

    def tagged_job(self, tag: str, workflow: str) -> JobRow | None:
        """The DONE job of `workflow` in the run tagged `tag`."""
        row = self.conn.execute(
            f"SELECT {JOB_COLS} FROM jobs WHERE run_name = (SELECT name FROM runs WHERE tag = ?) "
            "AND workflow = ? AND status = 'DONE' AND synced = 1 ORDER BY finished_at DESC LIMIT 1",
            (tag, workflow),
        ).fetchone()
        return JobRow(*row) if row else None

    def tagged_jobs(self, tag: str) -> list[JobRow]:
        """Every DONE job of the run tagged `tag` (a dstack `- tag: NAME` dependency)."""
        rows = self.conn.execute(
            f"SELECT {JOB_COLS} FROM jobs WHERE run_name = (SELECT name FROM runs WHERE tag = ?) "
            "AND status = 'DONE' AND synced = 1 ORDER BY finished_at",
            (tag,),
        ).fetchall()
        return [JobRow(*row) for row in rows]

    def latest_done_job(self, project_dir: str, workflow: str) -> JobRow | None:
        """The newest DONE job of `workflow` in this project (a dstack `WORKFLOW:latest` dependency)."""
        row = self.conn.execute(
            f"SELECT {', '.join('j.' + c.strip() for c in JOB_COLS.split(','))} FROM jobs j JOIN runs r ON r.name = j.run_name "
            "WHERE r.project_dir = ? AND j.workflow = ? AND j.status = 'DONE' AND j.synced = 1 "
            "ORDER BY j.finished_at DESC LIMIT 1",
            (project_dir, workflow),
        ).fetchone()
        return JobRow(*row) if row else None

    def tag_exists(self, tag: str) -> bool:
        return self.conn.execute("SELECT 1 FROM runs WHERE tag = ?", (tag,)).fetchone() is not None

    def reusable_job(self, cache_key: str) -> JobRow | None:
        """The newest DONE job with these inputs whose artifacts are in the local store.
        A job with a warning (an output it declared but did not produce) is never reused."""
        row = self.conn.execute(
            f"SELECT {JOB_COLS} FROM jobs WHERE cache_key = ? AND status = 'DONE' AND synced = 1 "
            "AND NOT EXISTS (SELECT 1 FROM job_events e WHERE e.job_id = jobs.id AND e.status = ?) "
            "ORDER BY finished_at DESC LIMIT 1",
            (cache_key, WARNING),
        ).fetchone()
        return JobRow(*row) if row else None

    def last_inputs(
        self, project_dir: str, workflow: str, variables: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]] | None:
        """(job id, cache inputs) of the job of `workflow` in this project that `plan` compares a
        new one with: the one a rerun would have reused, the newest DONE job with these
        `variables`; else the newest DONE one; else the newest that recorded its inputs.
        Reads at most _COMPARED rows of that workflow (newest first), whatever the store holds."""
        rows = self.conn.execute(
            "SELECT j.id, j.cache_inputs, j.status = 'DONE' AS done FROM jobs j JOIN runs r ON r.name = j.run_name "
            "WHERE r.project_dir = ? AND j.workflow = ? AND j.cache_inputs IS NOT NULL "
            "ORDER BY done DESC, j.submitted_at DESC LIMIT ?",
            (project_dir, workflow, _COMPARED),
        ).fetchall()
        found = [(job_id, json.loads(inputs), done) for job_id, inputs, done in rows]
        twin = next((f for f in found if f[2] and f[1].get("variables") == variables), None)
        best = twin or next(iter(found), None)
        return (best[0], best[1]) if best else None

    def create_job(
        self,
        job_id: str,
        run_name: str,
        workflow: str,
        runner: dict[str, Any],
        spec: dict[str, Any],
        cache_key: str | None = None,
        cache_inputs: dict[str, Any] | None = None,
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

    def set_job_ports(self, job_id: str, ports: list[int]) -> None:
        """The ports the job listens on, once its runner picked those `ports: N` asked for: what
        `ports` and `run` forward (the spec's `ports`)."""
        with atomic(self.conn):
            self.conn.execute(
                "UPDATE jobs SET spec = json_set(spec, '$.ports', json(?)) WHERE id = ?", (json.dumps(ports), job_id)
            )

    def queue_job(self, job_id: str, run_name: str, workflow: str, reason: str, pid: int = 0) -> None:
        """A job waiting in this controller for a runner: QUEUED, with the reason and the pid
        of the process that will submit it (in its spec: `queued_by`, see `orphaned_queued`)."""
        with atomic(self.conn):
            self.conn.execute(
                """INSERT INTO jobs (id, run_name, workflow, runner, host, port, status, submitted_at, error,
                                     artifacts_pulled, spec, synced) VALUES (?, ?, ?, '', '', 0, ?, ?, ?, 0, ?, 0)
                   ON CONFLICT(id) DO UPDATE SET error = excluded.error""",
                (job_id, run_name, workflow, str(JobState.QUEUED), time.time(), reason, json.dumps({"queued_by": pid})),
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
            assert all(f in JOB_FIELDS for f in fields), fields  # column names are code, never input
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
        assert "status" not in fields and all(f in JOB_FIELDS for f in fields), fields
        with atomic(self.conn):
            assignments = ", ".join(f"{c} = ?" for c in fields)
            self.conn.execute(f"UPDATE jobs SET {assignments} WHERE id = ?", (*fields.values(), job_id))

    def job(self, job_id: str) -> JobRow:
        row = self.conn.execute(f"SELECT {JOB_COLS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no job {job_id!r}: `app headless status` lists runs and jobs")
        return JobRow(*row)

    def jobs_of_run(self, run_name: str) -> list[JobRow]:
        rows = self.conn.execute(f"SELECT {JOB_COLS} FROM jobs WHERE run_name = ? ORDER BY submitted_at", (run_name,))
        return [JobRow(*r) for r in rows]

    def resolve_jobs(self, ref: str) -> list[JobRow]:
        """Jobs named by a run name or a job id (a unique prefix of a job id works too)."""
        if not ref.strip():
            raise NotFoundError("name a run or a job: `app headless status` lists them")
        jobs = self.jobs_of_run(ref)
        if jobs:
            return jobs
        rows = self.conn.execute(
            f"SELECT {JOB_COLS} FROM jobs WHERE id = ? OR id LIKE ? ESCAPE '\\'", (ref, escape_like(ref) + "%")
        ).fetchall()
        exact = [r for r in rows if r[0] == ref]
        rows = exact or rows
        if not rows:
            raise NotFoundError(f"no run or job named {ref!r}: `app headless status` lists them")
        if len(rows) > 1:
            raise NotFoundError(f"{ref!r} matches {len(rows)} jobs; give more of the job id")
        return [JobRow(*rows[0])]

    def unfinished_jobs(self) -> list[JobRow]:
        """Jobs not in a terminal state, oldest first (`stop --all`). A scan of jobs: run on request only."""
        ended = tuple(str(s) for s in JobState if s.is_terminal())
        marks = ", ".join("?" * len(ended))
        rows = self.conn.execute(
            f"SELECT {JOB_COLS} FROM jobs WHERE status NOT IN ({marks}) ORDER BY submitted_at", ended
        ).fetchall()
        return [JobRow(*r) for r in rows]

    def recent_runs(self, limit: int = 50, only: "RunFilter | None" = None) -> list[RunRow]:
        names, params = _newest(limit, only)
        rows = self.conn.execute(
            f"SELECT {RUN_COLS} FROM runs WHERE name IN ({names}) ORDER BY created_at DESC, rowid DESC", params
        )
        return [RunRow(*r) for r in rows]

    # `status` of any number of runs asks three queries, not three per job.
    def jobs_of_recent(self, limit: int, only: "RunFilter | None" = None) -> dict[str, list[JobRow]]:
        """The jobs of the `limit` newest runs (that `only` lets through), by run name, each run's in
        submission order."""
        names, params = _newest(limit, only)
        out: dict[str, list[JobRow]] = {}
        rows = self.conn.execute(
            f"SELECT {JOB_COLS} FROM jobs WHERE run_name IN ({names}) ORDER BY submitted_at", params
        )
        for row in rows:
            job = JobRow(*row)
            out.setdefault(job.run_name, []).append(job)
        return out

    def notes_of_recent(
        self, limit: int, only: "RunFilter | None" = None
    ) -> tuple[dict[str, list[str]], dict[str, list[tuple[str, int]]]]:
        """The warnings and the artifact files (path, size) of the jobs of the `limit` newest runs,
        by job id, in the order `warnings` and `artifacts` give them."""
        names, params = _newest(limit, only)
        of_recent = f"SELECT id FROM jobs WHERE run_name IN ({names})"
        warnings: dict[str, list[str]] = {}
        for job_id, detail in self.conn.execute(
            f"SELECT job_id, detail FROM job_events WHERE job_id IN ({of_recent}) AND status = ? ORDER BY rowid",
            (*params, WARNING),
        ):
            warnings.setdefault(job_id, []).append(detail)
        artifacts: dict[str, list[tuple[str, int]]] = {}
        for job_id, path, size in self.conn.execute(
            f"SELECT job_id, path, size FROM artifacts WHERE job_id IN ({of_recent}) ORDER BY job_id, path", params
        ):
            artifacts.setdefault(job_id, []).append((path, size))
        return warnings, artifacts

    def job_rows(self, text: str = "", status: str = "", limit: int = 500) -> list[tuple[Any, ...]]:
        """Jobs (newest first) with their run's variables and artifact count, for the runs list.

        `text` matches run name, job id, workflow, runner, tag or variables;
        `status` one job status. Bounded by `limit`: the list never loads the
        whole history (10,000 runs open in milliseconds).
        """
        where, params = [], []
        if text:
            like = "%" + escape_like(text) + "%"
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
            f"SELECT {', '.join('j.' + c for c in JOB_COLS.split(', '))}, r.variables, r.tag, "
            "(SELECT COUNT(*) FROM artifacts a WHERE a.job_id = j.id), "
            "(SELECT GROUP_CONCAT(n.runner, ',') FROM job_nodes n WHERE n.job_id = j.id) "
            "FROM jobs j JOIN runs r ON r.name = j.run_name "
            + ("WHERE " + " AND ".join(where) + " " if where else "")
            + "ORDER BY j.submitted_at DESC LIMIT ?"
        )
        n = len(JOB_COLS.split(", "))
        return [(JobRow(*row[:n]), *row[n:]) for row in self.conn.execute(sql, (*params, limit))]

    def add_warning(self, job_id: str, line: str) -> None:
        """Note something wrong with a job that ended (kept with its events, once per line)."""
        with atomic(self.conn):
            if line not in self.warnings(job_id):
                self.conn.execute(
                    "INSERT INTO job_events (job_id, at, status, detail) VALUES (?, ?, ?, ?)",
                    (job_id, time.time(), WARNING, line),
                )

    def warnings(self, job_id: str) -> list[str]:
        rows = self.conn.execute(
            "SELECT detail FROM job_events WHERE job_id = ? AND status = ? ORDER BY rowid", (job_id, WARNING)
        )
        return [r[0] for r in rows]

    def job_events(self, job_id: str) -> list[tuple[float, str, str]]:
        return self.conn.execute(
            "SELECT at, status, detail FROM job_events WHERE job_id = ? ORDER BY rowid", (job_id,)
        ).fetchall()

    def set_node(
        self, job_id: str, node: int, runner: dict[str, Any], status: str, exit_code: int | None = None, error: str = ""
    ) -> None:
        with atomic(self.conn):
            self.conn.execute(
                """INSERT INTO job_nodes (job_id, node, runner, host, port, status, exit_code, error)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(job_id, node) DO UPDATE SET
                   status = excluded.status, exit_code = excluded.exit_code, error = excluded.error""",
                (job_id, node, runner["name"], runner["host"], runner["port"], str(status), exit_code, error),
            )

    def nodes(self, job_id: str) -> list[dict[str, Any]]:
        return self._dicts("SELECT * FROM job_nodes WHERE job_id = ? ORDER BY node", (job_id,))
