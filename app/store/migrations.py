"""Numbered schema migrations; PRAGMA user_version records the last one applied.

Append new migrations; never edit one that has shipped.
"""

import sqlite3
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from lanpool.app.store.transactions import atomic

if TYPE_CHECKING:
    import sqlite_utils


def _m001_initial(db: "sqlite_utils.Database") -> None:
    db.table("runners").create(
        {"name": str, "host": str, "port": int, "host_key": str, "source": str, "added_at": float, "last_seen": float},
        pk="name",
    )
    db.table("runs").create(
        {"name": str, "workflow": str, "project_dir": str, "created_at": float, "tag": str},
        pk="name",
    )
    db.table("jobs").create(
        {
            "id": str,
            "run_name": str,
            "workflow": str,
            "runner": str,
            "host": str,
            "port": int,
            "status": str,
            "exit_code": int,
            "error": str,
            "submitted_at": float,
            "started_at": float,
            "finished_at": float,
            "artifacts_archive": str,
            "artifacts_pulled": int,
            "spec": str,
            # 1 once the final status, every log line and the artifacts are here
            "synced": int,
        },
        pk="id",
        foreign_keys=[("run_name", "runs", "name")],
    )
    db.table("jobs").create_index(["run_name"])
    db.table("jobs").create_index(["submitted_at"])
    db.table("job_events").create(
        {"job_id": str, "at": float, "status": str, "detail": str},
        foreign_keys=[("job_id", "jobs", "id")],
    )
    db.table("job_events").create_index(["job_id"])
    # Logs are stored as the chunks they arrive in (many lines each): one row per
    # line would cap ingestion far below a fast job's output rate.
    db.execute(
        """CREATE TABLE log_chunks (
            job_id TEXT NOT NULL REFERENCES jobs(id),
            node INTEGER NOT NULL DEFAULT 0,
            seq INTEGER NOT NULL,
            n_lines INTEGER NOT NULL,
            stream TEXT NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (job_id, node, seq)
        ) WITHOUT ROWID"""
    )
    db.table("artifacts").create(
        {"job_id": str, "path": str, "size": int},
        pk=("job_id", "path"),
        foreign_keys=[("job_id", "jobs", "id")],
    )


def _m002_cache(db: "sqlite_utils.Database") -> None:
    # cache_key: hash of a job's inputs; cache_inputs: their parts, to explain a re-run
    db.table("jobs").add_column("cache_key", str)
    db.table("jobs").add_column("cache_inputs", str)
    db.table("jobs").create_index(["cache_key"])
    db.table("runs").add_column("variables", str)  # JSON: the run's resolved variables
    db.table("runs").create_index(["tag"])


def _m003_pool(db: "sqlite_utils.Database") -> None:
    runners = db.table("runners")
    runners.add_column("state", str)  # LIVE, BUSY, OFFLINE, UNPAIRED, CONFLICT (see app/runners/pool.py)
    runners.add_column("paired", int)  # 1 once this controller's key was accepted
    runners.add_column("props", str)  # JSON: resources from Hello / the mDNS TXT record
    runners.add_column("conflict_key", str)  # a different host key advertised under this name
    runners.add_column("last_ok", float)  # last time it answered


def _m004_nodes(db: "sqlite_utils.Database") -> None:
    # One row per node of a multi-node job (the jobs row holds the job as a whole).
    db.table("job_nodes").create(
        {
            "job_id": str,
            "node": int,
            "runner": str,
            "host": str,
            "port": int,
            "status": str,
            "exit_code": int,
            "error": str,
        },
        pk=("job_id", "node"),
        foreign_keys=[("job_id", "jobs", "id")],
    )


def _m005_stream_index(db: "sqlite_utils.Database") -> None:
    # Metrics ("met" chunks) of a job read without walking its whole log: the
    # TUI re-plots a long job's curves every second.
    db.execute("CREATE INDEX log_chunks_stream ON log_chunks (job_id, node, stream, seq)")


def _m006_trust(db: "sqlite_utils.Database") -> None:
    # Trust is this controller's own record (app/runners/pool.py): a runner gets jobs only after the
    # user paired it, added it by address or named it with `--runner HOST:PORT`. Accepting our
    # key proves nothing, so "paired" (it accepts us) is no longer enough.
    runners = db.table("runners")
    runners.add_column("trusted", int)  # 1: paired, added or named by address by the user
    runners.add_column("trusted_at", float)
    runners.add_column("conflict_service", str)  # the mDNS service that claimed the name with conflict_key
    runners.add_column("conflict_seen", float)  # last time that claim was heard: it lasts only while heard
    # Rows added by address (`runners add`, `--runner HOST:PORT`, pairing by address) were the
    # user's own acts. Runners found by mDNS cannot be told apart from a hostile peer that
    # accepted every key: they are paired (or added) again.
    db.execute("UPDATE runners SET trusted = 1, trusted_at = added_at WHERE source = 'manual'")
    db.execute("UPDATE runners SET trusted = 0 WHERE trusted IS NULL")


def _m007_every_job_has_nodes(db: "sqlite_utils.Database") -> None:
    # Every job is a gang of N >= 1 nodes (app/jobs/remote.py): a single-node job has its one
    # job_nodes row too. Jobs sent before this had none: node 0 is the jobs row's runner.
    db.execute("""INSERT INTO job_nodes (job_id, node, runner, host, port, status, exit_code, error)
                  SELECT id, 0, runner, host, port, status, exit_code, COALESCE(error, '') FROM jobs
                  WHERE runner != '' AND id NOT IN (SELECT job_id FROM job_nodes)""")


def _m008_log_times(db: "sqlite_utils.Database") -> None:
    # When the agent received each chunk's first line (`logs -t`, `--since`); NULL for
    # chunks stored before, or sent by an agent that does not say.
    db.execute("ALTER TABLE log_chunks ADD COLUMN at REAL")


def _m009_log_chunks_rowid(db: "sqlite_utils.Database") -> None:
    # log_chunks as a rowid table. WITHOUT ROWID kept each ~30 KB chunk inside the
    # primary key's b-tree, whose cells hold ~1 KB before spilling, so every insert moved key
    # pages and overflow chains around: ~2x the insert time of a rowid table, whose rows are
    # appended and found through a small index. The UNIQUE key is the old primary key:
    # `INSERT OR IGNORE` still stores a chunk sent twice (re-attach, restart) once.
    # One statement copies every row inside the migration's transaction: a failure (disk
    # full) rolls back to the old table, whole. A big store needs its log's size again in
    # free disk for the copy while it runs.
    db.execute(
        """CREATE TABLE log_chunks_new (
            job_id TEXT NOT NULL REFERENCES jobs(id),
            node INTEGER NOT NULL DEFAULT 0,
            seq INTEGER NOT NULL,
            n_lines INTEGER NOT NULL,
            stream TEXT NOT NULL,
            data BLOB NOT NULL,
            at REAL
        )"""
    )
    # In key order: rowids follow each log's order, so reading a log walks the table forwards.
    db.execute(
        """INSERT INTO log_chunks_new (job_id, node, seq, n_lines, stream, data, at)
           SELECT job_id, node, seq, n_lines, stream, data, at FROM log_chunks ORDER BY job_id, node, seq"""
    )
    db.execute("DROP TABLE log_chunks")  # and its index log_chunks_stream (migration 5), made again below
    db.execute("ALTER TABLE log_chunks_new RENAME TO log_chunks")
    # The indexes made after the copy, each in one piece: made with the table, their pages
    # came between its rows' and reading a migrated log took twice as long.
    db.execute("CREATE UNIQUE INDEX log_chunks_key ON log_chunks (job_id, node, seq)")
    db.execute("CREATE INDEX log_chunks_stream ON log_chunks (job_id, node, stream, seq)")


def _m010_runs_by_time(db: "sqlite_utils.Database") -> None:
    # `status` shows the newest runs: read from an index, not a sort of every run.
    db.execute("CREATE INDEX IF NOT EXISTS idx_runs_created_at ON runs (created_at)")


def _m011_job_retries(db: "sqlite_utils.Database") -> None:
    # A job's retries so far, as its runners count them (a gang's: every node's attempt at once).
    db.execute("ALTER TABLE jobs ADD COLUMN retries INTEGER NOT NULL DEFAULT 0")


def _m012_slurm_jobs_have_their_nodes(db: "sqlite_utils.Database") -> None:
    # A Slurm runner's multi-node job (app/store/slurm_nodes.py) had one node row, its nodes'
    # lines tagged in node 0's log. Like any gang now: a row per node, each line in its node's
    # log. Each row is moved once, in the migration's transaction.
    from lanpool.app.store.slurm_nodes import by_node, slurm_nodes

    for job_id, spec in db.execute("SELECT id, spec FROM jobs").fetchall():
        nodes = slurm_nodes(spec)
        if not nodes:
            continue
        for k in range(1, nodes):
            db.execute(
                """INSERT OR IGNORE INTO job_nodes (job_id, node, runner, host, port, status, exit_code, error)
                   SELECT job_id, ?, runner, host, port, status, exit_code, error FROM job_nodes
                   WHERE job_id = ? AND node = 0""",
                (k, job_id),
            )
        cols = "job_id, node, seq, n_lines, stream, data, at"
        rows = db.execute(f"SELECT {cols} FROM log_chunks WHERE job_id = ? AND node = 0", (job_id,)).fetchall()
        db.execute("DELETE FROM log_chunks WHERE job_id = ? AND node = 0", (job_id,))
        db.conn.executemany(
            f"INSERT OR IGNORE INTO log_chunks ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?)", by_node(rows, nodes)
        )


def _m013_run_projects(db: "sqlite_utils.Database") -> None:
    # A run's project by name (its dir's last part): `status` shows it in a column and
    # `status --project NAME` finds its runs from an index. project_dir stays as it was.
    # A trigger names each new run's project, so every writer of runs (create_run, and code
    # written before this column) gets it without knowing the column; the same expression
    # names the runs already stored.
    db.execute("ALTER TABLE runs ADD COLUMN project TEXT NOT NULL DEFAULT ''")
    db.execute(f"UPDATE runs SET project = {_LAST_PART.format(path='project_dir')}")
    db.execute(
        f"""CREATE TRIGGER runs_project_name AFTER INSERT ON runs WHEN NEW.project = ''
            BEGIN UPDATE runs SET project = {_LAST_PART.format(path="NEW.project_dir")} WHERE rowid = NEW.rowid; END"""
    )
    db.execute("CREATE INDEX idx_runs_project ON runs (project, created_at)")


# A path's last part in SQL (`/home/me/gpt` -> `gpt`): rtrim drops the trailing characters that
# are not '/', which is the last part; what remains is the part before it.
_LAST_PART = (
    "substr(COALESCE({path}, ''), length(rtrim(COALESCE({path}, ''), replace(COALESCE({path}, ''), '/', ''))) + 1)"
)


def _m014_metric_summaries(db: "sqlite_utils.Database") -> None:
    # Each job's metrics summed up as they arrive (app/store/metric_summaries.py): `compare` reads
    # a row per job and metric, not every point. Steps are JSON text (a job's own values).
    db.execute(
        """CREATE TABLE metric_summaries (
            job_id TEXT NOT NULL REFERENCES jobs(id),
            name TEXT NOT NULL,
            points INTEGER NOT NULL,
            last REAL, last_step TEXT, last_at INTEGER NOT NULL,
            low REAL, low_step TEXT, low_at INTEGER NOT NULL,
            high REAL, high_step TEXT, high_at INTEGER NOT NULL,
            PRIMARY KEY (job_id, name)
        ) WITHOUT ROWID"""
    )
    from lanpool.app.store.metric_summaries import rebuild

    rebuild(db.conn)  # the metrics stored before this migration


MIGRATIONS: list[Callable[["sqlite_utils.Database"], None]] = [
    _m001_initial,
    _m002_cache,
    _m003_pool,
    _m004_nodes,
    _m005_stream_index,
    _m006_trust,
    _m007_every_job_has_nodes,
    _m008_log_times,
    _m009_log_chunks_rowid,
    _m010_runs_by_time,
    _m011_job_retries,
    _m012_slurm_jobs_have_their_nodes,
    _m013_run_projects,
    _m014_metric_summaries,
]


def _sqlite_utils() -> ModuleType:
    """sqlite_utils, imported only when there is something to migrate (the first command on a
    new home), and without numpy and pandas: it imports them when installed (~0.2 s) only to map
    their scalar types to columns, which these migrations never use."""
    import sys

    if "sqlite_utils" in sys.modules:
        return sys.modules["sqlite_utils"]
    blocked = [name for name in ("numpy", "pandas") if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # None in sys.modules: ImportError on import
    try:
        import sqlite_utils
    finally:
        for name in blocked:  # a later `import numpy` in this process works as usual
            sys.modules.pop(name, None)
    return sqlite_utils


def migrate(conn: sqlite3.Connection) -> None:
    """Apply the migrations this database has not had yet."""
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    if current >= len(MIGRATIONS):
        return
    db = _sqlite_utils().Database(conn)
    for number, step in enumerate(MIGRATIONS[current:], start=current + 1):
        with atomic(db.conn):  # a failed step leaves no half-made schema behind
            step(db)
            db.execute(f"PRAGMA user_version = {number}")
