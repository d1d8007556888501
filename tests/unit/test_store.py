"""The controller's SQLite store, on a real temp file.
The in-process part (unit); the rest: tests/integration/test_store.py."""

import sqlite3
from pathlib import Path

import pytest

from lanpool.app.errors import LanpoolError, NotFoundError
from lanpool.app.store import Store, migrations
from lanpool.protocol import JobState

RUNNER = {"name": "gpu-box", "host": "10.0.0.5", "port": 2222}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "lanpool.db"


@pytest.fixture
def store(db_path: Path):
    s = Store(db_path)
    yield s
    s.close()


def _job(store: Store, job_id: str, run: str = "pink-fly-1", spec: dict | None = None) -> None:
    if not store.run_name_taken(run):
        store.create_run(run, "train", "/home/me/project")
    store.create_job(job_id, run, "train", RUNNER, spec or {"artifacts": ["model.ckpt"]})


def _tables(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_migrations_create_the_tables_and_set_user_version(store, db_path):
    assert _tables(store.conn) >= {"runners", "runs", "jobs", "job_events", "log_chunks", "artifacts"}
    raw = sqlite3.connect(db_path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == len(migrations.MIGRATIONS)
    raw.close()


def test_wal_and_foreign_keys_are_on(store):
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    with pytest.raises(sqlite3.IntegrityError):
        store.create_job("orphan", "no-such-run", "train", RUNNER, {})


def test_reopening_keeps_data_and_does_not_rerun_migrations(db_path, monkeypatch):
    first = Store(db_path)
    _job(first, "job-1")
    first.close()

    calls = []
    wrapped = [lambda db, step=step: (calls.append(step), step(db)) for step in migrations.MIGRATIONS]
    monkeypatch.setattr(migrations, "MIGRATIONS", wrapped)
    again = Store(db_path)
    assert calls == []
    assert again.job("job-1").run_name == "pink-fly-1"
    assert again.conn.execute("PRAGMA user_version").fetchone()[0] == len(wrapped)
    again.close()


def test_a_new_migration_is_applied_once(db_path, monkeypatch):
    Store(db_path).close()

    def m_add_notes(db):
        db.execute("ALTER TABLE runs ADD COLUMN notes TEXT")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, m_add_notes])
    for _ in range(2):
        s = Store(db_path)
        assert "notes" in {r[1] for r in s.conn.execute("PRAGMA table_info(runs)")}
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == len(migrations.MIGRATIONS)
        s.close()


def test_a_failed_migration_leaves_nothing_behind(db_path, monkeypatch):
    Store(db_path).close()

    def m_broken(db):
        db["scratch"].create({"id": int}, pk="id")
        raise RuntimeError("bug in migration")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, m_broken])
    with pytest.raises(RuntimeError):
        Store(db_path)
    raw = sqlite3.connect(db_path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == len(migrations.MIGRATIONS) - 1
    assert "scratch" not in {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
    raw.close()

    def m_fixed(db):
        db["scratch"].create({"id": int}, pk="id")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS[:-1], m_fixed])
    s = Store(db_path)  # the fixed migration applies cleanly
    assert "scratch" in _tables(s.conn)
    s.close()


def test_corrupt_database_file_is_a_clear_lanpool_error(db_path):
    db_path.write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(LanpoolError) as exc:
        Store(db_path)
    assert not isinstance(exc.value, sqlite3.DatabaseError)
    assert str(db_path) in str(exc.value) and "database" in str(exc.value)
    assert exc.value.__cause__ is None or not isinstance(exc.value.__cause__, LanpoolError)


def test_create_run_and_job(store):
    store.create_run("pink-fly-1", "train", "/proj", tag="baseline")
    assert store.run_name_taken("pink-fly-1") and not store.run_name_taken("pink-fly-2")
    store.create_job("job-1", "pink-fly-1", "train", RUNNER, {"artifacts": ["a", "b"]})
    job = store.job("job-1")
    assert (job.run_name, job.runner, job.host, job.port) == ("pink-fly-1", "gpu-box", "10.0.0.5", 2222)
    assert job.state is JobState.SUBMITTED and job.synced == 0 and job.exit_code is None
    assert job.artifact_paths == ["a", "b"]
    (run,) = store.recent_runs()
    assert (run.name, run.workflow, run.project_dir, run.tag) == ("pink-fly-1", "train", "/proj", "baseline")


def test_every_transition_is_an_event(store):
    _job(store, "job-1")
    store.set_job_status("job-1", JobState.RUNNING, started_at=10.0)
    store.set_job_status("job-1", JobState.RUNNING)  # no change, no detail: no event
    store.set_job_status("job-1", JobState.RUNNING, detail="reattached")  # a detail is recorded
    store.set_job_status("job-1", JobState.DONE, exit_code=0, finished_at=20.0)
    events = store.job_events("job-1")
    assert [(status, detail) for _, status, detail in events] == [
        ("SUBMITTED", "to gpu-box"),
        ("RUNNING", ""),
        ("RUNNING", "reattached"),
        ("DONE", ""),
    ]
    times = [at for at, _, _ in events]
    assert times == sorted(times)
    job = store.job("job-1")
    assert job.state is JobState.DONE and job.exit_code == 0
    assert job.started_at == 10.0 and job.finished_at == 20.0


def test_status_of_an_unknown_job(store):
    with pytest.raises(NotFoundError):
        store.set_job_status("nope", JobState.RUNNING)
    with pytest.raises(NotFoundError):
        store.job("nope")


def test_jobs_of_run_in_submission_order(store):
    for i in range(3):
        _job(store, f"job-{i}")
    _job(store, "other", run="other-run-1")
    assert [j.id for j in store.jobs_of_run("pink-fly-1")] == ["job-0", "job-1", "job-2"]


@pytest.fixture
def resolvable(store):
    _job(store, "a1b2c3d4e5", run="calm-owl-1")
    _job(store, "a1b2ffff00", run="calm-owl-2")
    _job(store, "zz_9", run="calm-owl-3")
    _job(store, "zzX9", run="calm-owl-3")
    return store


def test_resolve_by_run_name(resolvable):
    assert [j.id for j in resolvable.resolve_jobs("calm-owl-3")] == ["zz_9", "zzX9"]


def test_resolve_by_full_id(resolvable):
    assert [j.id for j in resolvable.resolve_jobs("a1b2c3d4e5")] == ["a1b2c3d4e5"]


def test_resolve_by_unique_prefix(resolvable):
    assert [j.id for j in resolvable.resolve_jobs("a1b2c")] == ["a1b2c3d4e5"]
    assert [j.id for j in resolvable.resolve_jobs("a1b2f")] == ["a1b2ffff00"]


def test_resolve_ambiguous_prefix(resolvable):
    with pytest.raises(NotFoundError) as exc:
        resolvable.resolve_jobs("a1b2")
    assert "matches" in str(exc.value) and "2" in str(exc.value)


def test_like_wildcards_in_a_reference_are_literal(resolvable):
    assert [j.id for j in resolvable.resolve_jobs("zz_")] == ["zz_9"]  # '_' does not match 'X'
    with pytest.raises(NotFoundError):
        resolvable.resolve_jobs("%")
    with pytest.raises(NotFoundError):
        resolvable.resolve_jobs("a1b2%")


def test_resolve_unknown(resolvable):
    with pytest.raises(NotFoundError) as exc:
        resolvable.resolve_jobs("nothing-like-it")
    assert "nothing-like-it" in str(exc.value)


CHUNKS = [  # (seq, n_lines, stream, data)
    (0, 3, "out", b"a\nb\nc\n"),
    (3, 1, "err", b"oops\n"),
    (4, 2, "out", b"d\ne\n"),
]


def _rows(job_id, node=0, chunks=CHUNKS):
    return [(job_id, node, seq, n, stream, data) for seq, n, stream, data in chunks]


def test_log_chunks_are_stored_once(store):
    _job(store, "job-1")
    store.add_log_chunks(_rows("job-1"))
    store.add_log_chunks(_rows("job-1"))  # a re-attach may resend what is already here
    store.add_log_chunks(_rows("job-1")[1:2])
    assert store.log_line_count("job-1") == 6
    assert store.log_end("job-1") == 6
    assert [c[1] for c in store.log_chunks("job-1")] == [0, 3, 4]


def test_same_seq_on_another_node_is_another_chunk(store):
    _job(store, "job-1")
    store.add_log_chunks(_rows("job-1", node=0))
    store.add_log_chunks(_rows("job-1", node=1, chunks=CHUNKS[:1]))
    assert store.log_line_count("job-1") == 9
    assert store.log_end("job-1", node=0) == 6
    assert store.log_end("job-1", node=1) == 3
    assert [(n, s) for n, s, _, _ in store.log_chunks("job-1")] == [(0, 0), (0, 3), (0, 4), (1, 0)]


def test_log_end_and_count_of_a_job_without_logs(store):
    _job(store, "job-1")
    assert store.log_end("job-1") == 0
    assert store.log_line_count("job-1") == 0
    assert list(store.log_chunks("job-1")) == []


@pytest.mark.parametrize(
    ("from_seq", "seqs"),
    [(0, [0, 3, 4]), (1, [0, 3, 4]), (2, [0, 3, 4]), (3, [3, 4]), (4, [4]), (5, [4]), (6, []), (100, [])],
)
def test_log_chunks_from_seq_start_at_the_chunk_holding_it(store, from_seq, seqs):
    _job(store, "job-1")
    _job(store, "job-2")
    store.add_log_chunks(_rows("job-1"))
    store.add_log_chunks(_rows("job-2", chunks=[(0, 1, "out", b"other job\n")]))
    got = list(store.log_chunks("job-1", from_seq))
    assert [seq for _, seq, _, _ in got] == seqs
    by_seq = {c[0]: c for c in CHUNKS}
    for node, seq, stream, data in got:
        assert node == 0 and (stream, data) == (by_seq[seq][2], by_seq[seq][3])


def test_a_failed_batch_of_log_chunks_stores_none_of_it(store):
    _job(store, "job-1")
    batch = _rows("job-1") + [("no-such-job", 0, 0, 1, "out", b"x\n")]  # violates the foreign key
    with pytest.raises(sqlite3.IntegrityError):
        store.add_log_chunks(batch)
    assert store.log_line_count("job-1") == 0
    store.add_log_chunks(_rows("job-1"))
    assert store.log_line_count("job-1") == 6


def test_set_and_read_artifacts(store):
    _job(store, "job-1")
    _job(store, "job-2")
    assert store.artifacts("job-1") == []
    store.set_artifacts("job-1", [("model.ckpt", 100), ("logs/a.csv", 5)])
    store.set_artifacts("job-2", [("other", 1)])
    assert store.artifacts("job-1") == [("logs/a.csv", 5), ("model.ckpt", 100)]
    assert store.job("job-1").artifacts_pulled == 1
    store.set_artifacts("job-1", [("model.ckpt", 200)])  # a second pull replaces the list
    assert store.artifacts("job-1") == [("model.ckpt", 200)]
    assert store.artifacts("job-2") == [("other", 1)]


def test_upsert_runner_replaces_by_name_never_by_address(store):
    store.upsert_runner("a", "10.0.0.1", 22, "key-a", trusted=True)
    store.upsert_runner("a", "10.0.0.2", 22, "key-a2")
    row = store.runner("a")
    assert row["host"] == "10.0.0.2" and row["host_key"] == "key-a2" and row["trusted"] == 1  # trust kept
    # Same address, new name (an mDNS advert can claim any address): the known runner stays.
    store.upsert_runner("b", "10.0.0.2", 22, "key-b")
    assert [r["name"] for r in store.runners()] == ["a", "b"]
    assert store.runner("a")["host_key"] == "key-a2" and store.runner("b")["trusted"] == 0
    assert store.runner_by_address("10.0.0.2", 22)["name"] == "a"  # the trusted one first
    store.set_runner("b", trusted=1)
    assert store.runner("b")["trusted_at"] is not None


def test_a_write_refused_for_want_of_room_is_one_line_and_other_errors_are_not_taken_for_it(tmp_path):
    import errno
    import sqlite3

    from lanpool.app.store.store import disk_full

    full = disk_full(sqlite3.OperationalError("database or disk is full"), tmp_path)
    assert full is not None and f"the disk holding {tmp_path} is full" in full.message and "\n" not in full.message
    assert disk_full(OSError(errno.ENOSPC, "No space left on device"), tmp_path) is not None
    assert disk_full(sqlite3.OperationalError("database is locked"), tmp_path) is None  # tmp_path has room
    assert disk_full(OSError(errno.EACCES, "Permission denied"), tmp_path) is None
    assert disk_full(ValueError("x"), tmp_path) is None
