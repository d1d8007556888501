"""Talking to a runner the way a controller does, for the tests that drive its jobs directly
(test_runner_queue, _dag, _gang*, test_tui_gang, test_docker_executor, test_slurm_executor):
a session with the controller's key, submit and go away, wait for a state, read a job's log,
restart an agent on its data dir. Real agents (tests/harness.py), real SSH on loopback."""

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncssh
import pytest

from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.app.runners.client import RunnerSession
from lanpool.protocol import SubmitJob
from tests.harness import AgentProc, start_agent

ALL_CPUS = {"LANPOOL_FAKE_CPUS": "2"}  # "all of the runner" is 2 CPUs on every machine
ENDED = {"DONE", "FAILED", "STOPPED", "LOST", "ABORTED"}


@pytest.fixture
def runner(tmp_path, controller_home):
    """One agent whose "all of the runner" is ALL_CPUS (import it into a test module to use it)."""
    a = start_agent(tmp_path / "agent", controller_home, extra_env=ALL_CPUS)
    yield a
    a.stop()


# A gang's barrier and lost member, in seconds a test can wait for (agent/gang/hub.py).
GANG_ENV = {**ALL_CPUS, "LANPOOL_GANG_RESERVE_S": "3", "LANPOOL_GANG_LOST_S": "3"}


@pytest.fixture
def gang_runners(tmp_path, controller_home):
    """Two agents, r0 and r1, for a gang of two (import it into a test module to use it)."""
    agents = [start_agent(tmp_path / f"agent{k}", controller_home, name=f"r{k}", extra_env=GANG_ENV) for k in range(2)]
    yield agents
    for a in agents:
        a.stop()


def host_key(agent: AgentProc) -> str:
    """The agent's host key, as a controller pins it."""
    return (agent.data_dir / "host_key.pub").read_text().strip()


def client_key() -> asyncssh.SSHKey:
    return load_or_create_client_key(ControllerHome.default().key)


async def open_session(agent) -> RunnerSession:
    return await RunnerSession.open(agent.host, agent.port, client_key(), None)


async def wait_state(session: RunnerSession, job_id: str, states: set[str], timeout: float = 30):
    deadline = time.time() + timeout
    while True:
        status = await session.status(job_id)
        if status.state in states:
            return status
        assert time.time() < deadline, f"{job_id} still {status.state}"
        await asyncio.sleep(0.1)


async def job_log(session: RunnerSession, job_id: str) -> str:
    out = []
    async for batch in session.attach(job_id, 0, follow=False):
        out += [m.data.decode() for m in batch if getattr(m, "data", None) is not None]
    return "".join(out)


async def submit_detached(agent, req: SubmitJob):
    async with await open_session(agent) as s:  # the session closes: no controller follows the job
        return await s.submit(req)


async def wait_end(agent, job_id: str, timeout: float = 60):
    """The job's final status and its whole log, from a session of its own."""
    async with await open_session(agent) as s:
        status = await wait_state(s, job_id, ENDED, timeout)
        return status, await job_log(s, job_id)


def across_restart(
    data: Path,
    controller_home: Path,
    before: Callable[[AgentProc], Awaitable[None]],
    after: Callable[[AgentProc], Awaitable[None]],
) -> None:
    """`before` against an agent on `data`, then `after` against a new agent on the same data
    dir: what the runner kept on disk is all that carries over. Each agent is stopped whatever
    the outcome."""
    a = start_agent(data, controller_home, extra_env=ALL_CPUS)
    try:
        asyncio.run(before(a))
    finally:
        a.stop()
    b = start_agent(data, controller_home, extra_env=ALL_CPUS)
    try:
        asyncio.run(after(b))
    finally:
        b.stop()


def jobs_by(cli, key: str = "job") -> dict[str, dict]:
    """`headless status --json`'s jobs of every run, by job id (or by `key`, e.g. "workflow")."""
    runs = json.loads(cli("headless", "status", "--json", check=True).stdout)
    return {j[key]: j for r in runs for j in r["jobs"]}
