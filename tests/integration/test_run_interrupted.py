"""A `run` interrupted (Ctrl-C) leaves nothing behind that cannot be stopped or removed: a job
no runner took ends ABORTED at once, a chain's steps never sent are listed as not started,
and a run again sends only the blobs the runner still lacks. Real agent, the real CLI in a
process of its own (SIGINT as a terminal sends it), the agent frozen (SIGSTOP) mid-upload so
that "mid-upload" is a state, not a race."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.harness import APP_MODULE, lanpool_env, start_agent, wait_stored_job

FILES, FILE_MB = 60, 4

UPLOAD = """
workflows:
  - name: big
    commands: ["ls data | wc -l"]
"""

CHAIN = """
workflows:
  - name: first
    commands: ["echo first-started", "sleep 60"]
  - name: second
    depends-on: [first]
    commands: ["echo second-ran"]
"""


def _blobs(agent) -> int:
    return len(_inodes(agent))


def _inodes(agent) -> dict[str, int]:
    """The runner's whole blobs by name, with their inode (a blob sent again is a new file)."""
    return {p.name: p.stat().st_ino for p in (agent.data_dir / "blobs").iterdir() if p.is_file()}


def _start(cli_home: Path, project: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*APP_MODULE, "headless", "run", *args],
        cwd=project,
        env=lanpool_env(cli_home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _jobs(cli) -> list[dict]:
    return json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout)[0]["jobs"]


def test_ctrl_c_mid_upload_aborts_the_job_at_once_it_is_removable_and_a_rerun_sends_the_rest(
    tmp_path, controller_home, cli, make_project
):
    agent = start_agent(tmp_path / "agent", controller_home, name="solo")
    try:
        cli("headless", "runners", "add", agent.address, check=True)
        project = make_project(UPLOAD)
        (project / "data").mkdir()
        for k in range(FILES):
            (project / "data" / f"part{k}.bin").write_bytes(os.urandom(FILE_MB << 20))
        before = _blobs(agent)
        run = _start(controller_home, project, "big")
        deadline = time.monotonic() + 60
        while _blobs(agent) < before + 3 and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(agent.proc.pid, signal.SIGSTOP)  # mid-upload, and it stays there
        try:
            assert run.poll() is None, "the upload ended before it could be interrupted"
            run.send_signal(signal.SIGINT)
            _out, err = run.communicate(timeout=90)  # Ctrl-C stops what it sent: seconds, more on a loaded machine
        finally:
            os.kill(agent.proc.pid, signal.SIGCONT)
        assert run.returncode == 130, err
        assert "Traceback" not in err and "interrupted" in err, err
        [job] = _jobs(cli)
        assert job["status"] == "ABORTED" and "interrupted before it reached a runner" in job["error"], job
        kept = _inodes(agent)
        sent = len(kept) - before
        assert 0 < sent < FILES, sent  # whole blobs stay in the runner's cache
        # Every state can be removed: the interrupted run goes.
        cli("headless", "rm", job["job"], check=True)
        again = cli("headless", "run", "big", cwd=project, timeout=120)
        assert again.returncode == 0, again.stderr
        assert f"{FILES}" in again.stdout, again.stdout
        after = _inodes(agent)
        assert len(after) - before >= FILES
        assert all(after[name] == inode for name, inode in kept.items())  # none of them sent again
    finally:
        agent.stop()


def test_ctrl_c_during_a_chain_lists_the_steps_not_started_and_stop_then_rm_work(
    tmp_path, controller_home, cli, make_project
):
    agent = start_agent(tmp_path / "agent", controller_home, name="solo")
    try:
        cli("headless", "runners", "add", agent.address, check=True)
        project = make_project(CHAIN)
        run = _start(controller_home, project, "second")
        first = wait_stored_job(
            controller_home, lambda j: j["workflow"] == "first" and j["status"] == "RUNNING", "the first step RUNNING"
        )
        cli.follow_until(first["id"], "first-started", timeout=60)
        run.send_signal(signal.SIGINT)
        _out, err = run.communicate(timeout=90)  # Ctrl-C stops what it sent: seconds, more on a loaded machine
        assert run.returncode == 130 and "Traceback" not in err, err
        jobs = {j["workflow"]: j for j in _jobs(cli)}
        assert jobs["second"]["status"] == "ABORTED", jobs
        assert jobs["second"]["error"] == "not started: the run was interrupted", jobs
        assert jobs["first"]["status"] in ("RUNNING", "SUBMITTED"), jobs  # it runs on: the runner has it
        name = json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout)[0]["run"]
        cli("headless", "stop", name, check=True)
        stopped = {j["workflow"]: j["status"] for j in _jobs(cli)}
        assert stopped == {"first": "STOPPED", "second": "ABORTED"}, stopped
        cli("headless", "rm", name, check=True)
        assert json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout) == []
    finally:
        agent.stop()


def test_a_job_left_submitted_by_a_killed_run_is_stopped_and_removed(tmp_path, controller_home, cli):
    """A `run` killed outright (no Ctrl-C handling) can leave a job SUBMITTED that its runner never
    took: `stop` asks the runner, hears it has no such job, and ends it ABORTED; `rm` then works."""
    from lanpool.app.store import Store

    agent = start_agent(tmp_path / "agent", controller_home, name="solo")
    try:
        cli("headless", "runners", "add", agent.address, check=True)
        store = Store(controller_home / "lanpool.db")
        try:
            store.create_run("cut-off-1", "big", str(tmp_path), None, {})
            store.create_job(
                "0123456789ab", "cut-off-1", "big", {"name": "solo", "host": agent.host, "port": agent.port}, {}
            )
        finally:
            store.close()
        assert _jobs(cli)[0]["status"] == "SUBMITTED"
        stopped = cli("headless", "stop", "cut-off-1")
        assert stopped.returncode == 0, stopped.stderr
        [job] = _jobs(cli)
        assert job["status"] == "ABORTED" and "never reached a runner" in job["error"], job
        cli("headless", "rm", "cut-off-1", check=True)
        assert json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout) == []
    finally:
        agent.stop()
