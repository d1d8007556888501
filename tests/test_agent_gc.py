"""`app agent gc`: finished jobs and cached blobs within a budget, oldest first; a job
that has not finished keeps every file, and a queued one's are freed only when asked
(`--queued`), with the agent stopped."""

import asyncio
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

from lanpool.agent.home import AgentHome
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.jobs.kept_secrets import KeptSecrets, SecretKeeper
from lanpool.agent.retention import CANCELLED_BY_GC, collect, parse_size
from lanpool.protocol import FileEntry, PutBlob, SubmitJob
from tests.harness import APP_MODULE, lanpool_env, start_agent
from tests.runner_jobs import ALL_CPUS, open_session, wait_state


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
    import hashlib

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


def test_gc_cli_prints_what_it_freed_and_refuses_a_bad_size(tmp_path):
    home = _home(tmp_path)
    _job(home, "old", "DONE", 3000, 100_000)
    env = lanpool_env(tmp_path / "controller")
    base = [*APP_MODULE, "agent", "gc", "--data-dir", str(home.root)]
    res = subprocess.run([*base, "--max-size", "1K", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["jobs_removed"] == ["old"]
    res = subprocess.run([*base, "--max-size", "lots"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "not a size" in res.stderr


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


def test_gc_frees_queued_jobs_only_with_the_agent_stopped(tmp_path, controller_home):
    """Attack: `gc --queued` under a running agent would take a queued job's workspace from under
    it. Refused, even when the agent could not write agent.json (a full disk): the agent holds the
    data dir's lock. Stopped, the job is cancelled and its files go; the next agent says why."""
    blob = b"q" * 100_000
    sha = hashlib.sha256(blob).hexdigest()
    agent = start_agent(tmp_path / "agent", controller_home, extra_env=ALL_CPUS)
    gc = [*APP_MODULE, "agent", "gc", "--data-dir", str(agent.data_dir)]
    env = lanpool_env(controller_home)
    workspace = agent.data_dir / "jobs" / "waits" / "workspace"
    try:

        async def queue() -> None:
            async with await open_session(agent) as s:
                await s.put_blobs(iter([PutBlob(sha, 0, len(blob), blob)]), 1)
                await s.submit(SubmitJob("holds-all", "r", "w", ["sleep 60"], resources={"cpu": 2}, detached=True))
                await wait_state(s, "holds-all", {"RUNNING"})
                files = [FileEntry("data.bin", sha, len(blob))]
                job = SubmitJob("waits", "r", "w", ["true"], files=files, resources={"cpu": 1}, detached=True)
                assert (await s.submit(job)).state == "QUEUED"

        asyncio.run(queue())
        kept = subprocess.run([*gc, "--json"], env=env, capture_output=True, text=True, timeout=60)
        assert kept.returncode == 0, kept.stderr
        assert json.loads(kept.stdout)["queued_kept"] == 1 and json.loads(kept.stdout)["queued_bytes"] >= len(blob)
        (agent.data_dir / "agent.json").unlink()  # as on a full disk: only the lock says it runs
        for _ in range(2):
            refused = subprocess.run([*gc, "--queued"], env=env, capture_output=True, text=True, timeout=60)
            assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
            assert "is running" in refused.stderr and (workspace / "data.bin").exists()
    finally:
        agent.stop()
    done = subprocess.run([*gc, "--queued"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "cancelled queued job waits: its files freed" in done.stdout, done.stderr
    assert not workspace.exists()
    again = start_agent(agent.data_dir, controller_home, extra_env=ALL_CPUS)
    try:

        async def status():
            async with await open_session(again) as s:
                return await s.status("waits")

        status = asyncio.run(status())
        assert status.state == "STOPPED" and status.error == CANCELLED_BY_GC
    finally:
        again.stop()
