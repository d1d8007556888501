"""Removing runs (`app headless rm`/`prune`, app/runs/retention.py): real SQLite, real files, the real CLI.
The in-process part (unit); the rest: tests/integration/test_retention.py."""

import os
import time
from pathlib import Path

import pytest

from lanpool.app.controller import Controller
from lanpool.app.errors import NotFoundError, UsageError
from lanpool.app.home import ControllerHome
from lanpool.protocol import JobState

RUNNER = {"name": "gpu-box", "host": "10.0.0.5", "port": 2222}


DAY = 86400.0


@pytest.fixture
def ctl(controller_home: Path):
    c = Controller(ControllerHome(controller_home))
    yield c
    c.close()


def _run(
    ctl: Controller,
    run: str,
    jobs: dict[str, str],
    *,
    workflow: str | None = None,
    tag: str | None = None,
    age_days: float = 0,
    files: dict[str, bytes] | None = None,
) -> None:
    """A run with jobs {job_id: final status}, a log line each, and `files` in each job's artifact dir."""
    store = ctl.store
    store.create_run(run, workflow or "train", "/home/me/project", tag)
    store.conn.execute("UPDATE runs SET created_at = ? WHERE name = ?", (time.time() - age_days * DAY, run))
    for job_id, status in jobs.items():
        store.create_job(job_id, run, workflow or "train", RUNNER, {"artifacts": ["out"]})
        store.set_node(job_id, 0, RUNNER, status)
        store.add_log_chunks([(job_id, 0, 0, 1, "out", f"log of {job_id}\n".encode())])
        if status != "SUBMITTED":
            store.set_job_status(job_id, status, synced=1 if JobState(status).is_terminal() else 0)
        if files:
            for path, data in files.items():
                dest = ctl.home.job_artifacts(job_id) / path
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
            store.set_artifacts(job_id, [(p, len(d)) for p, d in files.items()])


def _rows(ctl: Controller, job_id: str) -> dict[str, int]:
    conn = ctl.store.conn
    return {
        table: conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {col} = ?", (job_id,)).fetchone()[0]
        for table, col in [
            ("jobs", "id"),
            ("job_events", "job_id"),
            ("job_nodes", "job_id"),
            ("log_chunks", "job_id"),
            ("artifacts", "job_id"),
        ]
    }


def test_rm_removes_rows_and_files_and_counts_the_space(ctl):
    files = {"out/model.ckpt": b"w" * 70_000, "out/sub/notes.txt": b"hello\n"}
    _run(ctl, "old-run", {"a1": "DONE", "a2": "FAILED"}, files=files)
    _run(ctl, "other-run", {"b1": "DONE"}, files=files)
    removal = ctl.retention.remove(["old-run"])
    assert removal.runs == ["old-run"] and sorted(removal.jobs) == ["a1", "a2"]
    assert removal.files == 4 and removal.artifact_bytes == 2 * (70_000 + 6)
    assert removal.log_bytes == len(b"log of a1\n") + len(b"log of a2\n")
    for job in ("a1", "a2"):
        assert set(_rows(ctl, job).values()) == {0}
        assert not os.path.lexists(ctl.home.job_artifacts(job))
    assert ctl.store.run("old-run") is None
    # The other run is untouched.
    assert ctl.store.run("other-run") is not None and _rows(ctl, "b1")["artifacts"] == 2
    assert (ctl.home.job_artifacts("b1") / "out/model.ckpt").stat().st_size == 70_000


def test_rm_takes_what_an_interrupted_pull_left_and_nothing_of_other_jobs(ctl):
    _run(ctl, "pulled", {"abc1": "DONE"}, files={"f": b"x" * 10})
    _run(ctl, "neighbour", {"abc12": "DONE"}, files={"f": b"y" * 10})
    staging = ctl.home.artifacts / "abc1.0f0f.part"
    staging.mkdir()
    (staging / "half").write_bytes(b"h" * 30)
    (ctl.home.artifacts / "abc1.0f0f.part.node0.tar").write_bytes(b"t" * 40)
    removal = ctl.retention.remove(["pulled"])
    assert removal.files == 3 and removal.artifact_bytes == 80
    assert sorted(p.name for p in ctl.home.artifacts.iterdir()) == ["abc12"]


def _partial_pull(ctl: Controller, job_id: str) -> int:
    """What a cut-off ranged pull leaves beside the store (app/transfer/pull.py, artifact_ranges.py); its bytes."""
    art = ctl.home.artifacts
    art.mkdir(parents=True, exist_ok=True)
    (art / f"{job_id}.part" / "out").mkdir(parents=True)
    (art / f"{job_id}.part" / "out" / "big.bin").write_bytes(b"p" * 5000)
    (art / f"{job_id}.part.json").write_text('{"total": 9000}')
    (art / f"{job_id}.part.ranges").write_text('{"ranges": []}')
    (art / f"{job_id}.part.done").write_bytes(b"\0" * 16)
    (art / f"{job_id}.part.lock").write_bytes(b"")
    return 5000 + len('{"total": 9000}') + len('{"ranges": []}') + 16


def test_rm_and_prune_take_partial_pulls_and_range_resume_files(ctl):
    _run(ctl, "half-pulled", {"d1": "DONE"}, age_days=10)
    _run(ctl, "kept-new", {"d2": "DONE"}, files={"f": b"k"})
    part_bytes = _partial_pull(ctl, "d1")
    _partial_pull(ctl, "d2")
    dry = ctl.retention.prune(7 * DAY, dry_run=True)
    assert dry.runs == ["half-pulled"] and dry.artifact_bytes == part_bytes and dry.files == 5
    assert (ctl.home.artifacts / "d1.part.done").exists()
    removal = ctl.retention.prune(7 * DAY)
    assert removal.artifact_bytes == part_bytes and removal.freed == part_bytes + len(b"log of d1\n")
    left = sorted(p.name for p in ctl.home.artifacts.iterdir())
    assert left == ["d2", "d2.part", "d2.part.done", "d2.part.json", "d2.part.lock", "d2.part.ranges"]
    gone = ctl.retention.remove(["kept-new"])
    assert gone.files == 6 and not list(ctl.home.artifacts.iterdir())


def test_prune_takes_leftovers_of_jobs_no_longer_stored_and_counts_them(ctl):
    _run(ctl, "stored", {"e1": "DONE"}, files={"f": b"s" * 10})
    orphan_bytes = _partial_pull(ctl, "e9")
    whole = ctl.home.job_artifacts("e8") / "out"
    whole.mkdir(parents=True)
    (whole / "model.ckpt").write_bytes(b"m" * 3000)  # an `rm` whose files failed half-way
    dry = ctl.retention.prune(7 * DAY, dry_run=True)
    assert dry.runs == [] and dry.artifact_bytes == orphan_bytes + 3000
    assert sorted(dry.orphans) == ["e8", "e9.part", "e9.part.done", "e9.part.json", "e9.part.lock", "e9.part.ranges"]
    assert (ctl.home.artifacts / "e9.part").is_dir()
    removal = ctl.retention.prune(7 * DAY)
    assert removal.freed == orphan_bytes + 3000 and removal.to_json()["orphans"] == dry.orphans
    assert sorted(p.name for p in ctl.home.artifacts.iterdir()) == ["e1"]


def test_a_pull_in_progress_is_never_removed(ctl):
    """Attack twin: a pull another process holds (its lock) keeps its staging dir, run or orphan."""
    import fcntl

    _run(ctl, "being-pulled", {"f1": "DONE"}, age_days=10)
    _partial_pull(ctl, "f1")
    _partial_pull(ctl, "f9")  # no job any more, but its pull still runs
    fds = [os.open(ctl.home.artifacts / f"{j}.part.lock", os.O_RDWR) for j in ("f1", "f9")]
    try:
        for fd in fds:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(UsageError, match="pulling the artifacts of job f1"):
            ctl.retention.remove(["being-pulled"])
        removal = ctl.retention.prune(7 * DAY)
        assert removal.runs == [] and removal.orphans == []
        assert removal.kept == [("being-pulled", "the artifacts of job f1 are being pulled")]
        assert (ctl.home.artifacts / "f1.part" / "out" / "big.bin").exists()
        assert (ctl.home.artifacts / "f9.part" / "out" / "big.bin").exists()
    finally:
        for fd in fds:
            os.close(fd)
    assert ctl.retention.prune(7 * DAY).runs == ["being-pulled"]
    assert not list(ctl.home.artifacts.iterdir())


def test_rm_of_a_job_keeps_its_siblings_and_the_run(ctl):
    _run(ctl, "two-jobs", {"c1": "DONE", "c2": "DONE"}, files={"f": b"x"})
    removal = ctl.retention.remove(["c1"])
    assert removal.jobs == ["c1"] and removal.runs == []
    assert _rows(ctl, "c2")["jobs"] == 1 and ctl.store.run("two-jobs") is not None
    assert ctl.retention.remove(["c2"]).runs == ["two-jobs"]  # its last job: the run goes too


def test_rm_refuses_a_run_with_a_job_not_ended_and_removes_nothing(ctl):
    _run(ctl, "done-run", {"d1": "DONE"}, files={"f": b"x"})
    _run(ctl, "busy-run", {"e1": "DONE", "e2": "RUNNING"}, workflow="train", files={"f": b"y"})
    with pytest.raises(UsageError, match=r"still RUNNING: stop it first.*nothing was removed"):
        ctl.retention.remove(["done-run", "busy-run"])
    for job in ("d1", "e1", "e2"):
        assert _rows(ctl, job)["jobs"] == 1 and ctl.home.job_artifacts(job).is_dir()


def test_rm_of_an_unknown_ref_removes_nothing(ctl):
    _run(ctl, "real-run", {"f1": "DONE"}, files={"f": b"x"})
    with pytest.raises(NotFoundError, match="no run or job named 'ghost'"):
        ctl.retention.remove(["real-run", "ghost"])
    assert _rows(ctl, "f1")["jobs"] == 1 and ctl.home.job_artifacts("f1").is_dir()


def test_links_out_of_the_store_are_unlinked_never_followed(ctl, tmp_path):
    outside = tmp_path / "precious"
    (outside / "dir").mkdir(parents=True)
    (outside / "file").write_bytes(b"p" * 1000)
    (outside / "dir" / "inner").write_bytes(b"q" * 1000)
    _run(ctl, "linky", {"g1": "DONE", "g2": "DONE"})
    g1 = ctl.home.job_artifacts("g1")
    g1.mkdir()
    (g1 / "own.bin").write_bytes(b"o" * 10)
    (g1 / "to-file").symlink_to(outside / "file")
    (g1 / "to-dir").symlink_to(outside / "dir", target_is_directory=True)
    ctl.home.job_artifacts("g2").symlink_to(outside, target_is_directory=True)  # the job's dir itself a link
    # A download hard-linked from the store: removing the store's link frees nothing.
    (g1 / "linked.bin").write_bytes(b"h" * 500)
    os.link(g1 / "linked.bin", tmp_path / "download.bin")

    removal = ctl.retention.remove(["linky"])
    assert removal.files == 2 and removal.artifact_bytes == 10  # neither the links' targets nor the hard-linked file
    assert not os.path.lexists(g1) and not os.path.lexists(ctl.home.job_artifacts("g2"))
    assert (outside / "file").read_bytes() == b"p" * 1000
    assert (outside / "dir" / "inner").read_bytes() == b"q" * 1000
    assert (tmp_path / "download.bin").read_bytes() == b"h" * 500


def test_prune_by_age_keeps_tagged_and_dry_run_removes_nothing(ctl):
    _run(ctl, "ancient", {"h1": "DONE"}, age_days=30, files={"f": b"a" * 100})
    _run(ctl, "ancient-tagged", {"h2": "DONE"}, age_days=30, tag="v1", files={"f": b"b" * 100})
    _run(ctl, "recent", {"h3": "FAILED"}, age_days=1, files={"f": b"c" * 100})
    dry = ctl.retention.prune(7 * DAY, keep_tagged=True, dry_run=True)
    assert dry.runs == ["ancient"] and dry.artifact_bytes == 100 and dry.kept == [("ancient-tagged", "tagged 'v1'")]
    assert _rows(ctl, "h1")["jobs"] == 1 and ctl.home.job_artifacts("h1").is_dir()

    done = ctl.retention.prune(7 * DAY, keep_tagged=True)
    assert done.runs == ["ancient"] and done.artifact_bytes == 100
    assert ctl.store.run("ancient") is None and not ctl.home.job_artifacts("h1").exists()
    assert ctl.store.run("ancient-tagged") is not None and ctl.store.run("recent") is not None
    assert ctl.retention.prune(7 * DAY).runs == ["ancient-tagged"]  # without --keep-tagged


def test_prune_keeps_done_runs_while_a_run_still_places_inputs(ctl):
    _run(ctl, "cached", {"i1": "DONE"}, workflow="prepare", age_days=30, files={"data": b"d"})
    _run(ctl, "failed-long-ago", {"i2": "FAILED"}, workflow="prepare", age_days=30)
    # A run of `train` whose dependency runs now: its `train` job is still to be placed, and may reuse i1.
    _run(ctl, "in-progress", {"i3": "RUNNING"}, workflow="prepare")
    ctl.store.conn.execute("UPDATE runs SET workflow = 'train' WHERE name = 'in-progress'")
    removal = ctl.retention.prune(7 * DAY)
    assert removal.runs == ["failed-long-ago"]  # a failed job is never an input
    assert [run for run, _ in removal.kept] == ["cached"]
    with pytest.raises(UsageError, match="in-progress is in progress and may still use job i1"):
        ctl.retention.remove(["cached"])
    # Once the run's last job is on a runner, nothing more is placed.
    ctl.store.create_job("i4", "in-progress", "train", RUNNER, {})
    assert ctl.retention.prune(7 * DAY).runs == ["cached"]
