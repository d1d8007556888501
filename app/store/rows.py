"""The rows the store hands out, and what its tables share: the connection and small SQL helpers."""

import json
import sqlite3
from typing import Any

from lanpool.app.store.slurm_nodes import slurm_nodes
from lanpool.protocol import JobState
from lanpool.protocol.message_base import Record, record

ARTIFACTS_REFUSED = -1  # jobs.artifacts_pulled: 0 not yet, 1 pulled, -1 refused


@record
class RunRow(Record):
    """A row of the runs table."""

    name: str
    workflow: str
    project_dir: str
    created_at: float
    tag: str | None
    project: str = ""  # the project dir's last part (migration 13)


@record
class JobRow(Record):
    """A row of the jobs table: where the job ran, its state, and what was kept of it."""

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
    retries: int = 0  # retries so far: the job ran retries + 1 times

    @property
    def state(self) -> JobState:
        return JobState(self.status)

    @property
    def slurm_nodes(self) -> int:
        """The nodes a Slurm runner runs as this one job (app/store/slurm_nodes.py); 0 for any other job."""
        return slurm_nodes(self.spec)

    @property
    def artifact_paths(self) -> list[str]:
        paths: list[str] = json.loads(self.spec or "{}").get("artifacts", [])
        return paths


JOB_FIELDS = frozenset(JobRow.__dataclass_fields__)
JOB_COLS = (
    "id, run_name, workflow, runner, host, port, status, exit_code, error, submitted_at, started_at, "
    "finished_at, artifacts_archive, artifacts_pulled, spec, synced, retries"
)
RUN_COLS = "name, workflow, project_dir, created_at, tag, project"


class Table:
    """What each part of the Store (app/store/store.py composes them) works on: one connection."""

    conn: sqlite3.Connection

    def _dicts(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        cur = self.conn.execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=False)) for row in cur]


def escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
