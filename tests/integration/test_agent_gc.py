"""`app agent gc`: finished jobs and cached blobs within a budget, oldest first; a job
that has not finished keeps every file, and a queued one's are freed only when asked
(`--queued`), with the agent stopped.
The part with real agents and the CLI (integration); the rest: tests/unit/test_agent_gc.py."""

import asyncio
import hashlib
import json
import subprocess

from lanpool.agent.retention import CANCELLED_BY_GC
from lanpool.protocol import FileEntry, PutBlob, SubmitJob
from tests.harness import APP_MODULE, lanpool_env, start_agent
from tests.runner_jobs import ALL_CPUS, open_session, wait_state
from tests.unit.test_agent_gc import _home, _job


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
