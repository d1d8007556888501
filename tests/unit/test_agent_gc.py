"""`app agent gc`: finished jobs and cached blobs within a budget, oldest first; a job
that has not finished keeps every file, and a queued one's are freed only when asked
(`--queued`), with the agent stopped.
The in-process part (unit); the rest: tests/integration/test_agent_gc.py."""

import hashlib
import os
import time
from pathlib import Path

from lanpool.agent.home import AgentHome
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.jobs.kept_secrets import KeptSecrets, SecretKeeper
from lanpool.agent.retention import CANCELLED_BY_GC, collect, parse_size


def _job(home: AgentHome, job_id: str, state: str, finished_ago: float | None, size: int) -> Path:
    job_dir = home.job_dir(job_id)
    (job_dir / "workspace").mkdir(parents=True)
    (job_dir / "workspace" / "data.bin").write_bytes(b"x" * size)
    now = time.time()
    record = JobRecord(job_id=job_id, run_name="r", workflow="w", commands=["true"], env={}, artifacts=[], state=state)
    record.finished_at = now - finished_ago if finished_ago is not None else None
    record.save(job_dir)
    return job_dir


def _blob(home: AgentHome, fill: int, size: int, used_ago: float) -> Path:

    data = bytes([fill]) * size
    path = home.blobs / hashlib.sha256(data).hexdigest()
    path.write_bytes(data)
    os.utime(path, (time.time() - used_ago, time.time() - used_ago))
    return path


def _home(tmp_path: Path) -> AgentHome:
    home = AgentHome(tmp_path / "agent")
    home.create()
    return home


def test_budget_removes_oldest_first_and_never_a_running_job(tmp_path):
    home = _home(tmp_path)
    running = _job(home, "running", "RUNNING", None, 50_000)
    old = _job(home, "old", "DONE", 3000, 10_000)
    new = _job(home, "new", "FAILED", 100, 10_000)
    stale_blob = _blob(home, 1, 10_000, 2000)
    fresh_blob = _blob(home, 2, 10_000, 10)
    report = collect(home, None, 25_000)
    assert report.jobs_removed == ["old"] and report.blobs_removed == 1
    assert not old.exists() and not stale_blob.exists()
    assert new.exists() and fresh_blob.exists()
    assert (running / "workspace" / "data.bin").stat().st_size == 50_000  # over budget alone, still kept
    assert report.kept_unfinished == 1 and report.bytes_freed >= 20_000
    # A budget of nothing: every finished job and blob goes, the running job stays.
    collect(home, None, 0)
    assert running.exists() and not new.exists() and not fresh_blob.exists()


def test_keep_days_removes_only_older_finished_jobs(tmp_path):
    home = _home(tmp_path)
    week_old = _job(home, "week", "DONE", 7 * 86400, 10)
    today = _job(home, "today", "DONE", 3600, 10)
    queued = _job(home, "queued", "SUBMITTED", None, 10)
    assert collect(home, 2, None).jobs_removed == ["week"]
    assert not week_old.exists() and today.exists() and queued.exists()


def test_parse_size():
    assert parse_size("500M") == 500 * 1024**2 and parse_size("20G") == 20 * 1024**3
    assert parse_size("1.5GiB") == int(1.5 * 1024**3) and parse_size("4096") == 4096


def test_with_the_agent_running_what_was_used_in_the_last_hour_stays(tmp_path):
    """A live agent may just have told a controller that a blob is there, or have a finished
    job whose artifacts are still to be pulled: gc keeps those, and says so."""
    home = _home(tmp_path)
    old = _job(home, "old", "DONE", 7200, 10_000)
    just_done = _job(home, "just-done", "DONE", 60, 10_000)
    stale_blob = _blob(home, 1, 10_000, 7200)
    just_used = _blob(home, 2, 10_000, 30)
    report = collect(home, None, 0, recent_s=3600)
    assert report.jobs_removed == ["old"] and report.blobs_removed == 1 and report.kept_recent == 2
    assert not old.exists() and not stale_blob.exists()
    assert just_done.exists() and just_used.exists()


def test_requirements_layers_go_least_recently_used_first_never_one_in_use(tmp_path):
    home = _home(tmp_path)
    running = _job(home, "running", "RUNNING", None, 10)

    def layer(key: str, used_ago: float) -> Path:
        path = home.pyenvs / key
        (path / "lib").mkdir(parents=True)
        (path / "lib" / "pkg.py").write_bytes(b"x" * 10_000)
        marker = path / ".lanpool-ready"
        marker.write_text("requirements.txt\n")
        os.utime(marker, (time.time() - used_ago, time.time() - used_ago))
        return path

    in_use = layer("aaaa", 9000)  # the oldest, but a running job's env layers on it
    stale = layer("bbbb", 5000)
    fresh = layer("cccc", 10)
    pth = running / "pyenv" / "lib" / "python3.11" / "site-packages" / "_lanpool.pth"
    pth.parent.mkdir(parents=True)
    pth.write_text(f"import site; site.addsitedir('{in_use}/lib/python3.11/site-packages')\n")
    report = collect(home, None, 15_000)
    assert report.pyenvs_removed == 1 and not stale.exists()
    assert in_use.exists() and fresh.exists()
    os.utime(fresh / ".lanpool-ready", (time.time() - 2000, time.time() - 2000))
    report = collect(home, 0.01, None)  # --keep-days 0.01: layers unused for ~15 minutes go, unless in use
    assert report.pyenvs_removed == 1 and not fresh.exists() and in_use.exists()


def test_queued_jobs_files_are_counted_and_kept_unless_asked(tmp_path):
    home = _home(tmp_path)
    queued = _job(home, "waits", "QUEUED", None, 30_000)
    SecretKeeper(home.secrets).keep("waits", KeptSecrets(["s3cret"], {"TOKEN": "s3cret"}))
    report = collect(home, None, 0)
    assert report.queued_kept == 1 and report.queued_bytes >= 30_000 and report.queued_cancelled == []
    assert (queued / "workspace" / "data.bin").exists()
    report = collect(home, None, None, queued=True)
    assert report.queued_cancelled == ["waits"] and report.bytes_freed >= 30_000 and report.queued_kept == 0
    assert sorted(p.name for p in queued.iterdir()) == ["job.json", "log.spool"]  # why it ended, its log
    record = JobRecord.load(queued)
    assert record.state == "STOPPED" and record.error == CANCELLED_BY_GC and record.finished_at
    assert CANCELLED_BY_GC.encode() in (queued / "log.spool").read_bytes()
    assert SecretKeeper(home.secrets).read("waits") is None
