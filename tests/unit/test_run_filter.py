"""`status`'s filters (app/store/run_filter.py) on a real store, and migration 13, which gives
every run its project's name without losing a row."""

import sqlite3

import pytest

from lanpool.app.store import Store, migrations
from lanpool.app.store.run_filter import RunFilter
from lanpool.protocol import JobState

RUNNER = {"name": "gpu1", "host": "127.0.0.1", "port": 1}


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "lanpool.db")
    # (run, workflow, project dir, tag, [(job workflow, state, runner)])
    for i, (run, workflow, project, tag, jobs) in enumerate(
        [
            ("a-run", "train", "/home/me/gpt", "base", [("prep", "DONE", "gpu1"), ("train", "FAILED", "gpu2")]),
            ("b-run", "train", "/home/me/gpt", None, [("train", "RUNNING", "gpu1")]),
            ("c-run", "eval", "/srv/other", None, [("eval", "DONE", "gpu3")]),
        ]
    ):
        s.create_run(run, workflow, project, tag)
        s.conn.execute("UPDATE runs SET created_at = ? WHERE name = ?", (1000.0 + i, run))
        for k, (wf, state, runner) in enumerate(jobs):
            job = f"{run}-{k}"
            s.create_job(job, run, wf, {**RUNNER, "name": runner}, {})
            s.set_node(job, 0, {**RUNNER, "name": runner}, state)
            s.set_job_status(job, state)
    yield s
    s.close()


def _names(store, **only) -> list[str]:
    return [r.name for r in store.recent_runs(50, RunFilter(**only))]


def test_each_filter_and_their_combination(store):
    assert _names(store) == ["c-run", "b-run", "a-run"]
    assert _names(store, states=("FAILED",)) == ["a-run"]
    assert _names(store, states=("RUNNING", "FAILED")) == ["b-run", "a-run"]
    assert _names(store, workflow="prep") == ["a-run"]  # a dependency's job counts
    assert _names(store, workflow="train") == ["b-run", "a-run"]
    assert _names(store, runner="gpu2") == ["a-run"]
    assert _names(store, tag="base") == ["a-run"]
    assert _names(store, project="gpt") == ["b-run", "a-run"]
    assert _names(store, project_dir="/srv/other") == ["c-run"]
    assert _names(store, project="gpt", states=("DONE",)) == ["a-run"]
    assert _names(store, runner="gpu1", workflow="eval") == []


def test_the_limit_counts_matching_runs_and_jobs_and_notes_follow_it(store):
    only = RunFilter(project="gpt")
    assert [r.name for r in store.recent_runs(1, only)] == ["b-run"]
    assert set(store.jobs_of_recent(1, only)) == {"b-run"}
    store.add_warning("a-run-1", "artifact 'x' was not produced")
    warnings, _ = store.notes_of_recent(5, RunFilter(tag="base"))
    assert warnings == {"a-run-1": ["artifact 'x' was not produced"]}
    assert store.notes_of_recent(5, RunFilter(tag="none"))[0] == {}


def test_hostile_filter_text_is_a_value_never_sql(store):
    assert _names(store, workflow="train' OR '1'='1") == []
    assert _names(store, project="%") == [] and _names(store, runner="_") == []


def test_unfinished_jobs_are_those_not_ended(store):
    assert [j.id for j in store.unfinished_jobs()] == ["b-run-0"]
    store.set_job_status("b-run-0", JobState.STOPPED)
    assert store.unfinished_jobs() == []


def test_migration_13_names_the_projects_of_existing_runs_and_keeps_every_row(tmp_path, monkeypatch):
    path = tmp_path / "old.db"
    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:12])
    old = Store(path)
    old.conn.execute(
        "INSERT INTO runs (name, workflow, project_dir, created_at, tag) VALUES "
        "('x', 'train', '/home/me/gpt', 1, 't'), ('y', 'train', '', 2, NULL)"
    )
    old.close()
    monkeypatch.undo()
    new = Store(path)
    try:
        rows = new.conn.execute("SELECT name, project_dir, project, tag FROM runs ORDER BY name").fetchall()
        assert rows == [("x", "/home/me/gpt", "gpt", "t"), ("y", "", "", None)]
        assert [r.name for r in new.recent_runs(5, RunFilter(project="gpt"))] == ["x"]
    finally:
        new.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == len(migrations.MIGRATIONS)


@pytest.mark.parametrize(
    ("project_dir", "name"),
    [
        ("/home/me/gpt", "gpt"),
        ("/srv/my proj.v2", "my proj.v2"),
        ("/data/ünï", "ünï"),
        ("/", ""),
        ("", ""),
        ("rel", "rel"),
    ],
)
def test_every_new_run_gets_its_projects_name_whoever_writes_it(tmp_path, project_dir, name):
    s = Store(tmp_path / "lanpool.db")
    try:
        s.create_run("by-the-store", "w", project_dir)
        s.conn.execute(
            "INSERT INTO runs (name, workflow, project_dir, created_at) VALUES ('raw', 'w', ?, 1)", (project_dir,)
        )
        got = dict(s.conn.execute("SELECT name, project FROM runs").fetchall())
        assert got == {"by-the-store": name, "raw": name}
    finally:
        s.close()
