"""The rows `app headless usage` sums (app/views/usage.py): each node of each job that ran and
ended, with the resources its spec asked for. Read with the store's connection, never written."""

import sqlite3
from typing import Any

# A node of a job: the job's times and its resources as asked (each node holds them), and the
# node's runner (a job stored before node rows had none: its jobs row names the runner). A spec
# that is not JSON, or a resource that is no number (JSON's true would read as 1), gives none.
_NUMBER = """CASE WHEN json_valid(j.spec) AND json_type(j.spec, '$.resources.{key}') IN ('integer', 'real')
                  THEN json_extract(j.spec, '$.resources.{key}') END"""
_NODES = """
SELECT j.id, j.run_name, j.workflow, COALESCE(n.runner, j.runner), COALESCE(n.node, 0),
       j.status, j.started_at, j.finished_at,
       {gpu}, {cpu}, {memory_mb}
FROM jobs j LEFT JOIN job_nodes n ON n.job_id = j.id
WHERE j.started_at IS NOT NULL AND j.finished_at IS NOT NULL AND j.finished_at >= ? AND j.started_at <= ?
ORDER BY j.finished_at, j.id, 5
""".format(**{key: _NUMBER.format(key=key) for key in ("gpu", "cpu", "memory_mb")})


def ended_job_nodes(conn: sqlite3.Connection, since: float, until: float) -> list[tuple[Any, ...]]:
    """(job id, run, workflow, runner, node, status, started_at, finished_at, gpu, cpu, memory_mb)
    of each node of the jobs that ran within [since, until]; the resources as stored (any JSON value)."""
    return conn.execute(_NODES, (since, until)).fetchall()
