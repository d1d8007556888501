"""Retries of a gang are the gang's (agent/gang/hub.py): when one node's run ends into a
retry, every node stops and the whole gang starts again together, as attempt N; a node
lost for good with `lost` in the retry restarts the others the same way. Attacks: a
member's word naming an absurd or earlier attempt changes nothing. Real agents, real SSH
on loopback, no controller alive (every controller session closed)."""

import asyncio
import dataclasses
import json
import signal

import asyncssh
import pytest

from lanpool.protocol import GANG_SUBSYSTEM, GANG_USER_PREFIX, GangSpec, SubmitJob
from tests.harness import start_agent
from tests.runner_jobs import (
    GANG_ENV,
    gang_runners,
    host_key,
    job_log,
    open_session,
    submit_detached,
    wait_end,
    wait_state,
)

TOKEN = "t" * 32
runners = gang_runners  # the fixture (tests/runner_jobs.py), under the name these tests use

# Fails its first run only: the workspace (and the marker in it) is kept across a retry.
FAIL_ONCE = "if [ ! -e tried ]; then touch tried; echo first-run; sleep 1; exit 3; fi; echo second-run"
RUNS_ON = 'echo "start port=$MASTER_PORT"; sleep 4; echo finished'


def _member(
    agent0, gang_id: str, rank: int, command: str, retry_on: tuple[str, ...] = ("failure",), delay: float = 0.0
) -> SubmitJob:
    spec = GangSpec(gang_id, 2, rank, agent0.address, host_key(agent0), TOKEN, 1.0)
    return SubmitJob(
        f"{gang_id}-{rank}",
        "r",
        "w",
        [command],
        resources={"cpu": 2},
        gang=spec,
        retry_on=list(retry_on),
        retry_limit=2,
        retry_delay_s=delay,
    )


def _ports(log: str) -> list[str]:
    return [part.split()[0] for part in log.split("port=")[1:]]


def test_a_member_that_fails_once_restarts_the_whole_gang_and_it_ends_done(runners):
    r0, r1 = runners

    async def go():
        await submit_detached(r0, _member(r0, "gm", 0, RUNS_ON))
        await submit_detached(r1, _member(r0, "gm", 1, FAIL_ONCE))
        (s0, log0), (s1, log1) = await wait_end(r0, "gm-0", 90), await wait_end(r1, "gm-1", 90)
        assert s0.state == s1.state == "DONE", (s0.error, s1.error, log0, log1)
        assert s0.attempt == s1.attempt == 1, (s0.attempt, s1.attempt)
        # Node 0 was running when node 1 failed: it was stopped and started again with it.
        assert log0.count("start port=") == 2 and "node 1" in log0 and "its gang starts again" in log0, log0
        assert log0.count("finished") == 1, log0
        assert "first-run" in log1 and "second-run" in log1, log1
        # The job's start is its first attempt's: before node 1's first run ended, long before the end.
        assert s0.finished_at - s0.started_at > 5, (s0.started_at, s0.finished_at)

    asyncio.run(go())


def test_node0_that_fails_once_restarts_the_member_too(runners):
    r0, r1 = runners

    async def go():
        await submit_detached(r0, _member(r0, "gz", 0, FAIL_ONCE))
        await submit_detached(r1, _member(r0, "gz", 1, RUNS_ON))
        (s0, log0), (s1, log1) = await wait_end(r0, "gz-0", 90), await wait_end(r1, "gz-1", 90)
        assert s0.state == s1.state == "DONE", (s0.error, s1.error, log0, log1)
        assert s1.attempt == 1 and len(_ports(log1)) == 2 and "node 0" in log1, log1
        assert "first-run" in log0 and "second-run" in log0, log0

    asyncio.run(go())


def test_a_gang_out_of_retries_fails_as_one(runners):
    r0, r1 = runners

    async def go():
        await submit_detached(r0, _member(r0, "gx", 0, "sleep 60"))
        await submit_detached(r1, _member(r0, "gx", 1, "sleep 1; exit 3"))
        (s1, log1), (s0, log0) = await wait_end(r1, "gx-1", 90), await wait_end(r0, "gx-0", 90)
        assert s1.state == "FAILED" and s1.attempt == 2, (s1.state, s1.attempt, log1)
        assert s0.state == "STOPPED" and s0.attempt == 2 and "node 1 failed" in log0, (s0.state, log0)

    asyncio.run(go())


@pytest.mark.parametrize("how", ["killed", "restarted"])
def test_a_member_whose_agent_is_lost_restarts_the_gang_when_lost_is_retried(tmp_path, controller_home, how):
    """Member 1's agent is killed (SIGKILL: nothing said, its job killed when it comes back) or
    restarted (SIGTERM: a process cannot outlive its agent): its job is LOST, node 0 does not run
    on alone, and the gang ends DONE once that agent is back."""
    data1 = tmp_path / "agent1"
    r0 = start_agent(tmp_path / "agent0", controller_home, name="r0", extra_env=GANG_ENV)
    r1 = start_agent(data1, controller_home, name="r1", extra_env=GANG_ENV)
    lost_once = "if [ ! -e tried ]; then touch tried; echo first-run; sleep 120; fi; echo second-run"
    try:

        async def submit():
            await submit_detached(r0, _member(r0, "gl", 0, RUNS_ON + "; sleep 2", ("failure", "lost")))
            await submit_detached(r1, _member(r0, "gl", 1, lost_once, ("failure", "lost")))
            for agent, rank in ((r0, 0), (r1, 1)):
                async with await open_session(agent) as s:
                    await wait_state(s, f"gl-{rank}", {"RUNNING"}, 30)

        asyncio.run(submit())
        if how == "killed":
            r1.proc.send_signal(signal.SIGKILL)
            r1.proc.wait()
        else:
            r1.stop()
        r1 = start_agent(data1, controller_home, name="r1", extra_env=GANG_ENV)

        async def after_restart():
            (s0, log0), (s1, log1) = await wait_end(r0, "gl-0", 120), await wait_end(r1, "gl-1", 120)
            assert s0.state == s1.state == "DONE", (s0.error, s1.error, log0, log1)
            assert s1.attempt >= 1 and "second-run" in log1, log1
            assert log0.count("start port=") == 2 and "its gang starts again" in log0, log0

        asyncio.run(after_restart())
    finally:
        r0.stop()
        r1.stop()


def test_a_members_word_of_an_absurd_attempt_changes_nothing(runners):
    """A member (it holds the token) says `again` with attempts out of bounds, then an earlier
    one: node 0 runs on; its Ready naming an attempt past the retry limit is refused."""
    r0, r1 = runners

    async def go():
        await submit_detached(r0, _member(r0, "ga", 0, "sleep 6; echo finished"))
        key = asyncssh.import_public_key(host_key(r0))
        async with asyncssh.connect(
            r0.host,
            r0.port,
            username=GANG_USER_PREFIX + "ga",
            password=TOKEN,
            known_hosts=([key], [], []),
            client_keys=None,
            agent_path=None,
            config=None,
        ) as conn:
            for hello in ({"ready": 1, "attempt": 99}, {"ready": 1, "attempt": -1}, {"ready": 1, "attempt": True}):
                proc = await conn.create_process(subsystem=GANG_SUBSYSTEM, encoding=None)
                proc.stdin.write(json.dumps(hello).encode() + b"\n")
                assert await asyncio.wait_for(proc.stdout.read(), 10) == b"", hello  # closed, nothing said
            proc = await conn.create_process(subsystem=GANG_SUBSYSTEM, encoding=None)
            proc.stdin.write(json.dumps({"ready": 1, "attempt": 0}).encode() + b"\n")
            go_line = json.loads(await asyncio.wait_for(proc.stdout.readline(), 15))
            assert isinstance(go_line.get("go"), int), go_line
            for word in ({"again": 50}, {"again": 0}, {"again": "1"}, {"again": 1.5}):
                proc.stdin.write(json.dumps(word).encode() + b"\n")
            async with await open_session(r0) as s:
                status = await wait_state(s, "ga-0", {"DONE", "FAILED", "STOPPED"}, 30)
                log = await job_log(s, "ga-0")
            assert status.state == "DONE" and status.attempt == 0 and "again" not in log, (status, log)

    asyncio.run(go())


def test_a_restart_is_not_a_stop_the_users_stop_wins(runners):
    """A stop asked while the gang waits out its retry's delay ends it STOPPED on both runners."""
    r0, r1 = runners

    async def go():
        await submit_detached(r0, _member(r0, "gs", 0, "sleep 60", delay=60))
        await submit_detached(r1, _member(r0, "gs", 1, "sleep 2; exit 3", delay=60))
        async with await open_session(r1) as s1:
            await wait_state(s1, "gs-1", {"RUNNING"}, 30)
            after = await wait_state(s1, "gs-1", {"QUEUED"}, 30)  # its first run failed: back in line
            assert after.attempt == 1, dataclasses.asdict(after)
        async with await open_session(r0) as s0:
            before = await wait_state(s0, "gs-0", {"QUEUED"}, 30)  # stopped into the same attempt
            assert before.attempt == 1, dataclasses.asdict(before)
        for agent, rank in ((r0, 0), (r1, 1)):
            async with await open_session(agent) as s:
                await s.stop(f"gs-{rank}", abort=False, grace_s=None)
        (s0, _), (s1_, _) = await wait_end(r0, "gs-0", 60), await wait_end(r1, "gs-1", 60)
        assert s0.state == s1_.state == "STOPPED", (s0.state, s1_.state)

    asyncio.run(go())


GANG_RETRY_WORKFLOW = """
workflows:
  - name: flaky
    nodes: 2
    retry: {on: [failure], limit: 2}
    commands:
      - echo "rank $NODE_RANK start port=$MASTER_PORT"
      - if [ "$NODE_RANK" = 1 ] && [ ! -e tried ]; then touch tried; sleep 1; exit 3; fi
      - sleep 3; echo "rank $NODE_RANK finished"
"""


@pytest.mark.parametrize("detached", [False, True], ids=["followed", "detached"])
def test_run_of_a_two_node_job_whose_node1_fails_once_ends_done(two_agents, cli, make_project, detached):
    """Followed or detached, the same gang: its runners restart both nodes (node 0 too) and the
    job ends DONE; `status` counts its attempts."""
    project = make_project(GANG_RETRY_WORKFLOW)
    args = ("headless", "run", "flaky", *(["-d"] if detached else []))
    res = cli(*args, cwd=project, timeout=120)
    assert res.returncode == 0, res.stderr
    if detached:
        run = json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout)[0]["run"]
        cli("headless", "logs", "-f", run, timeout=120, check=True)
    [latest] = json.loads(cli("headless", "status", "--json", check=True).stdout)
    [job] = latest["jobs"]
    assert job["status"] == "DONE", job
    assert job["attempts"] == 2, job
    log = cli("headless", "logs", latest["run"], check=True).stdout
    assert log.count("[node 0] rank 0 start port=") == 2, log  # node 0 started again with node 1
    assert log.count("[node 1] rank 1 start port=") == 2, log
    assert log.count("finished") == 2, log  # one end per node, the second attempt's
    ports = {line.split("port=")[1] for line in log.splitlines() if "start port=" in line}
    assert len(ports) <= 2, log  # each attempt's nodes met on one MASTER_PORT


def test_a_member_that_reaches_its_time_limit_ends_the_gang(runners):
    """max_duration is the gang's too: a node stopped at its limit stops the others (none runs on
    alone), naming the node and why."""
    r0, r1 = runners

    async def go():
        await submit_detached(r0, _member(r0, "gt", 0, "sleep 60; echo node0-done"))
        timed = dataclasses.replace(_member(r0, "gt", 1, "sleep 60"), max_duration_s=2.0)
        await submit_detached(r1, timed)
        (s1, _), (s0, log0) = await wait_end(r1, "gt-1", 60), await wait_end(r0, "gt-0", 60)
        assert s1.state != "DONE" and "max_duration" in s1.error, (s1.state, s1.error)
        assert s0.state == "STOPPED" and "node 1 was stopped" in log0 and "max_duration" in log0, log0
        assert "node0-done" not in log0

    asyncio.run(go())
