"""A disk that fills while jobs run, attacked through a real agent whose data dir is a small
tmpfs: the job whose output cannot be written fails, saying why; a job that waits quietly
runs on to its end; the agent keeps answering, refuses new work in one line, records the ends
it could not write the usual way, and a fresh agent starts on the full disk.

Mounting needs root: elsewhere these tests skip. The tmpfs is 600 MiB, not less: a submit
must find the 512 MiB that staging keeps free (agent/workspace/blobs.py DISK_MARGIN)."""

import asyncio
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from lanpool.app.errors import LanpoolError
from lanpool.protocol import SubmitJob
from tests.harness import AgentProc, lanpool_env, spawn_agent, start_agent
from tests.runner_jobs import ENDED, job_log, open_session, wait_state

pytestmark = pytest.mark.timeout(300)

FULL = "no space left on device while writing its log"


@pytest.fixture
def small_disk(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs as the agent's data dir needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)
    if os.path.ismount(mount):  # an agent still holding a file: lazily, so the test run goes on
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _job(job_id: str, *commands: str) -> SubmitJob:
    return SubmitJob(job_id=job_id, run_name="r", workflow="w", commands=list(commands), detached=True)


def _fill(path: Path) -> None:
    """Write until the disk refuses a byte more."""
    with open(path, "wb", buffering=0) as f:
        block = b"\0" * (1 << 20)
        try:
            while True:
                f.write(block)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0")
        except OSError:
            pass


def _started(data: Path, env: dict[str, str], log_path: Path) -> AgentProc:
    """An agent on `data` that may be unable to write agent.json: its port from its first line."""
    agent = spawn_agent(data, env, log_path=log_path)
    deadline = time.monotonic() + 60
    while not (found := re.search(r"listening on 127\.0\.0\.1:(\d+)", agent.log_tail(100_000))):
        assert agent.proc.poll() is None, f"the agent exited {agent.proc.returncode}:\n{agent.log_tail()}"
        assert time.monotonic() < deadline, f"not listening:\n{agent.log_tail()}"
        time.sleep(0.1)
    agent.port = int(found.group(1))
    return agent


def test_a_job_that_fills_the_disk_fails_alone_and_the_agent_stays_up(small_disk, tmp_path, controller_home):
    data = small_disk
    agent = start_agent(data, controller_home)
    try:

        async def fill_then_recover() -> dict[str, str]:
            async with await open_session(agent) as s:
                # Quiet while the disk is full: it must run on to its end.
                await s.submit(
                    _job("bystander", "echo started", "while [ ! -e go ]; do sleep 0.1; done", "echo finished")
                )
                await wait_state(s, "bystander", {"RUNNING"})
                # Fills the disk through its workspace, then prints into a log that has no room left.
                await s.submit(_job("filler", "head -c 2G /dev/zero > big || true", "yes 'after the disk filled'"))
                filler = await wait_state(s, "filler", ENDED, timeout=120)
                assert filler.state == "FAILED" and filler.error == FULL, filler
                assert (await s.status("bystander")).state == "RUNNING"
                # A full disk takes no new job: one line, nothing left behind.
                with pytest.raises(LanpoolError) as refused:
                    await s.submit(_job("too-late", "true"))
                assert "to spare" in refused.value.message and "\n" not in refused.value.message
                assert not (data / "jobs" / "too-late").exists()
                # Its log reads back whole, up to where the disk ended it.
                # Which of its lines found room is the disk's to say: whole ones, none torn.
                for line in (await job_log(s, "filler")).splitlines():
                    assert line in ("after the disk filled", f"lanpool: {FULL}; SIGTERM, SIGKILL after 3s") or (
                        line.startswith("head: error writing") and line.endswith("No space left on device")
                    ), line

                (data / "jobs" / "filler" / "workspace" / "big").unlink()  # the runner's owner frees space
                (data / "jobs" / "bystander" / "workspace" / "go").touch()
                bystander = await wait_state(s, "bystander", ENDED)
                assert bystander.state == "DONE", bystander
                assert "started\nfinished\n" in await job_log(s, "bystander")

                # A flood of output fills the disk through the job's own log, the spool itself.
                await s.submit(_job("flood", "yes 'a flood of lines'"))
                flood = await wait_state(s, "flood", ENDED, timeout=120)
                assert flood.state == "FAILED" and flood.error == FULL, flood
                lines = []
                async for batch in s.attach("flood", max(0, flood.log_lines - 5), follow=False):
                    lines += [m.data.decode() for m in batch if getattr(m, "data", None) is not None]
                assert "".join(lines).splitlines()[0] == "a flood of lines"  # whole records up to the end
                return {j: (await s.status(j)).state for j in ("filler", "bystander", "flood")}

        states = asyncio.run(fill_then_recover())
        assert agent.proc.poll() is None, agent.log_tail()
        assert f"job filler: {FULL}" in agent.log_tail(100_000)
    finally:
        agent.stop()
    assert agent.proc.returncode == 0, agent.log_tail()

    # A fresh agent on the disk filled to the last byte: it starts, says what it could not write,
    # and the journal holds the ends written while the disk was full.
    _fill(data / "ballast")
    fresh = _started(data, lanpool_env(controller_home), tmp_path / "fresh.log")
    try:

        async def journal() -> dict[str, str]:
            async with await open_session(fresh) as s:
                return {j: (await s.status(j)).state for j in states}

        assert asyncio.run(journal()) == states == {"filler": "FAILED", "bystander": "DONE", "flood": "FAILED"}
        assert "cannot write" in fresh.log_tail() and "agent.json" in fresh.log_tail()
    finally:
        fresh.stop()
