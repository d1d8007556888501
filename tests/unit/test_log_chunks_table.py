"""log_chunks as a rowid table (migration 9): a store made with the old WITHOUT ROWID
table keeps every row and every reader's answer, a chunk sent twice is still stored once, and
no reader of a log scans the table."""

import sqlite3
from pathlib import Path

import pytest

from lanpool.app.store import Store, metric_summaries, migrations
from lanpool.app.store.log_counts import window_start

RUNNER = {"name": "gpu-box", "host": "10.0.0.5", "port": 2222}
OLD_VERSION = 8  # the last migration with log_chunks WITHOUT ROWID


def _job(store: Store, job_id: str, run: str = "pink-fly-1") -> None:
    if not store.run_name_taken(run):
        store.create_run(run, "train", "/home/me/project")
    store.create_job(job_id, run, "train", RUNNER, {})


def _chunks(job_id: str, node: int, n: int, stream_every: int = 7) -> list[tuple]:
    """n chunks of 3 lines each; every `stream_every`-th a metrics chunk, some without a time.
    Lines of ~1.4 KB: chunks bigger than a page, as a flood's are (overflow pages)."""
    rows = []
    for i in range(n):
        stream = "met" if i % stream_every == 3 else ("err" if i % 5 == 1 else "out")
        data = b"".join(f"{job_id} n{node} c{i} l{k} ".encode() + b"x" * 1400 + b"\n" for k in range(3))
        rows.append((job_id, node, i * 3, 3, stream, data, 0 if i % 4 == 0 else 1000.0 + i))
    return rows


def _readers(store: Store) -> dict:
    """What every reader of log_chunks answers on this store."""
    out: dict = {}
    for job in ("job-1", "job-2", "job-none"):
        out[job] = {
            "end": [store.log_end(job, node) for node in (0, 1, 2)],
            "count": store.log_line_count(job),
            "chunks": list(store.log_chunks(job)),
            "chunks_from": list(store.log_chunks(job, 100)),
            "tail": store.node_tail(job, 1, None, 10),
            "tail_before": store.node_tail(job, 0, 60, 20, ("out",)),
            "timed": list(store.timed_chunks(job, 0, 30)),
            "met": store.stream_since(job, "met", {0: 20}),
            "nodes": store.log_nodes(job),
            "window": window_start(store.conn, job, 0, 25, ("out", "err")),
            "bytes": store.log_bytes([job]),
        }
    return out


def _all_rows(conn: sqlite3.Connection) -> list[tuple]:
    return conn.execute(
        "SELECT job_id, node, seq, n_lines, stream, data, at FROM log_chunks ORDER BY job_id, node, seq"
    ).fetchall()


def _table_sql(conn: sqlite3.Connection) -> str:
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'log_chunks'").fetchone()
    return str(row[0])


@pytest.fixture
def old_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A store as lanpool made it before migration 9, filled: (path, its rows, its readers' answers)."""
    path = tmp_path / "lanpool.db"
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:OLD_VERSION])
        m.setattr(metric_summaries, "fold_chunks", lambda _conn, _chunks: None)  # none then (migration 14)
        old = Store(path)
        assert "WITHOUT ROWID" in _table_sql(old.conn)  # the old layout, or this test proves nothing
        _job(old, "job-1")
        _job(old, "job-2")
        old.add_log_chunks(_chunks("job-1", 0, 60))
        old.add_log_chunks(_chunks("job-1", 1, 20))
        old.add_log_chunks(_chunks("job-2", 0, 30, stream_every=2))
        rows, answers = _all_rows(old.conn), _readers(old)
        assert old.conn.execute("PRAGMA user_version").fetchone()[0] == OLD_VERSION
        old.close()
    return path, rows, answers


def test_migration_keeps_every_row_and_every_readers_answer(old_store):
    path, rows, answers = old_store
    store = Store(path)
    try:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == len(migrations.MIGRATIONS)
        assert "WITHOUT ROWID" not in _table_sql(store.conn)
        assert len(rows) == 110
        assert _all_rows(store.conn) == rows
        assert _readers(store) == answers
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert store.conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert _tables(store.conn) == _tables_made_new(path.parent / "new.db")
    finally:
        store.close()


def _tables(conn: sqlite3.Connection) -> list[tuple]:
    """Tables and indexes of the store, without their SQL text (a renamed table keeps a quoted name)."""
    return conn.execute("SELECT type, name, tbl_name FROM sqlite_master ORDER BY type, name").fetchall()


def _tables_made_new(path: Path) -> list[tuple]:
    new = Store(path)
    try:
        return _tables(new.conn)
    finally:
        new.close()


def test_a_chunk_sent_again_after_the_migration_is_stored_once(old_store):
    path, rows, _ = old_store
    store = Store(path)
    try:
        resent = [r[:6] for r in rows if r[0] == "job-1"]
        store.add_log_chunks(resent)  # a re-attach resends what is stored
        changed = [(*r[:5], b"different text\n", r[6]) for r in rows[:5]]
        store.add_log_chunks(changed)  # the same key with other bytes: the first one stays
        assert _all_rows(store.conn) == rows
        store.add_log_chunks([("job-1", 0, 180, 1, "out", b"new line\n")])
        assert store.log_end("job-1", 0) == 181
        assert store.log_line_count("job-1") == 60 * 3 + 20 * 3 + 1
    finally:
        store.close()


def test_deleting_a_job_still_removes_its_migrated_log(old_store):
    """Cleanup finds log_chunks by its foreign key to jobs: the rebuilt table keeps it."""
    path, _, _ = old_store
    store = Store(path)
    try:
        store.delete_jobs(["job-1"])
        assert store.log_line_count("job-1") == 0
        assert store.log_line_count("job-2") == 90
        with pytest.raises(sqlite3.IntegrityError):  # still refused: a chunk of no job
            store.add_log_chunks([("no-such-job", 0, 0, 1, "out", b"x\n")])
    finally:
        store.close()


def test_no_reader_of_a_log_scans_the_table(tmp_path: Path):
    """Every query the readers send uses an index: a scan reads every job's log to answer for one."""
    store = Store(tmp_path / "lanpool.db")
    try:
        _job(store, "job-1")
        _job(store, "job-2")
        store.add_log_chunks(_chunks("job-1", 0, 20))
        store.add_log_chunks(_chunks("job-2", 0, 20))
        sent: list[str] = []
        store.conn.set_trace_callback(sent.append)
        _readers(store)
        store.delete_jobs(["job-2"])
        store.conn.set_trace_callback(None)
        queries = {q for q in sent if "log_chunks" in q and not q.startswith("PRAGMA")}
        assert len(queries) >= 10
        for query in queries:
            plan = [r[3] for r in store.conn.execute(f"EXPLAIN QUERY PLAN {query}")]
            assert not any(step.startswith("SCAN log_chunks") for step in plan), (query, plan)
            assert any("log_chunks USING" in step for step in plan), (query, plan)
    finally:
        store.close()


def test_a_rebuild_that_fails_leaves_the_old_table_whole(old_store):
    """One transaction: a failure half-way (here the new table's name is taken) keeps every row in
    the old table and the store at its old version, with a clear error; fixed, it migrates."""
    from lanpool.app.errors import LanpoolError

    path, rows, answers = old_store
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE log_chunks_new (x)")
    raw.commit()
    raw.close()
    with pytest.raises(LanpoolError, match="cannot open the lanpool database"):
        Store(path)
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == OLD_VERSION
        assert "WITHOUT ROWID" in _table_sql(raw)
        assert _all_rows(raw) == rows
        raw.execute("DROP TABLE log_chunks_new")
        raw.commit()
    finally:
        raw.close()
    store = Store(path)
    try:
        assert _all_rows(store.conn) == rows
        assert _readers(store) == answers
    finally:
        store.close()
