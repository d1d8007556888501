"""A process job's end, when something it started outlives it, attacked from inside real jobs on a
real agent: a child that left the job's process group (setsid) keeps the job's output open, and a
stop must still end the job (it once stayed RUNNING for as long as that child lived). Sandboxed,
the child dies with the job's PID namespace; unsandboxed it is beyond the runner's reach, and
only the job ends."""

import asyncio
import subprocess
import time

import pytest

from lanpool.protocol import SubmitJob
from tests.harness import start_agent
from tests.integration.test_job_reach import _sandbox_missing, _says
from tests.runner_jobs import open_session, wait_state

pytestmark = pytest.mark.timeout(180)

ESCAPEE = "sleep 987.25"  # a mark no other process here carries: found (and killed) by it


def _escapee_alive() -> bool:
    return subprocess.run(["pgrep", "-f", ESCAPEE], capture_output=True).returncode == 0


async def _stop_escaping_job(agent) -> float:
    """Seconds from the abort to the job's end; the job leaves a setsid child holding its output."""
    job = SubmitJob(
        job_id="j",
        run_name="r",
        workflow="w",
        commands=[f"setsid {ESCAPEE} &", "echo started", "sleep 120"],
        detached=True,
    )
    async with await open_session(agent) as s:
        await s.submit(job)
        await wait_state(s, "j", {"RUNNING"})
        deadline = time.monotonic() + 30
        while not _escapee_alive():
            assert time.monotonic() < deadline, "the job's setsid child never started"
            await asyncio.sleep(0.1)
        asked = time.monotonic()
        await s.stop("j", abort=True, grace_s=0)
        await wait_state(s, "j", {"ABORTED"}, timeout=60)
        return time.monotonic() - asked


@pytest.mark.parametrize("sandbox", ["off", "bwrap"])
def test_a_stopped_job_ends_though_its_child_left_its_group(tmp_path, controller_home, sandbox):
    if sandbox == "bwrap" and (missing := _sandbox_missing(tmp_path / "probe")):
        pytest.skip(f"no job sandbox on this machine: {missing}")
    agent = start_agent(tmp_path / "agent", controller_home, extra_args=["--job-sandbox", sandbox])
    try:
        _says(agent, "process jobs: isolation " + ("none" if sandbox == "off" else "bwrap"))
        took = asyncio.run(_stop_escaping_job(agent))
        # Bounded by the drain after the SIGKILL (5 s), not by the child's 987 s: seconds to spare.
        assert took < 45, took
        # Sandboxed, nothing of the job outlives it; unsandboxed, its setsid child does (beyond reach).
        assert _escapee_alive() is (sandbox == "off")
    finally:
        agent.stop()
        subprocess.run(["pkill", "-f", ESCAPEE])
