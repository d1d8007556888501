"""Detached gangs: the members of a multi-node job wait in their runners' queues
and start together, coordinated by node 0's agent (agent/gang/hub.py), with no controller alive;
two gangs over the same runners both finish; a failing member stops the others. Attacks: a
wrong token, a gang connection asking for anything but its barrier, a wrong node-0 host key.
Real agents, real SSH on loopback; "no controller alive" = every controller session closed.
The part with real agents and the CLI (integration); the rest: tests/system/test_runner_gang.py."""

import asyncio
import dataclasses
import json
import time

import asyncssh
import pytest

from lanpool.protocol import GANG_SUBSYSTEM, GANG_USER_PREFIX, SUBSYSTEM, GangSpec, SubmitJob
from tests.harness import start_agent
from tests.runner_jobs import (
    GANG_ENV,
    gang_runners,
    host_key,
    job_log,
    jobs_by,
    open_session,
    submit_detached,
    wait_end,
)

TOKEN = "t" * 32


runners = gang_runners  # the fixture (tests/runner_jobs.py), under the name these tests use


def _member(
    agent0, gang_id: str, rank: int, command: str, order: float, token: str = TOKEN, key: str = ""
) -> SubmitJob:
    spec = GangSpec(gang_id, 2, rank, agent0.address, key or host_key(agent0), token, order)
    return SubmitJob(f"{gang_id}-{rank}", "r", "w", [command], resources={"cpu": 2}, gang=spec)


def test_a_detached_gang_starts_together_only_when_every_runner_has_room(runners):
    r0, r1 = runners

    async def go():
        await submit_detached(r1, SubmitJob("busy", "r", "w", ["sleep 2"], resources={"cpu": 2}))
        cmd = 'echo "port=$MASTER_PORT"'
        first = await submit_detached(r0, _member(r0, "g1", 0, cmd, 1.0))
        second = await submit_detached(r1, _member(r0, "g1", 1, cmd, 1.0))
        assert first.state == "QUEUED" and "reserved" in first.reason, (first.state, first.reason)
        assert second.state == "QUEUED", second.state
        busy, _ = await wait_end(r1, "busy")
        (s0, log0), (s1, log1) = await wait_end(r0, "g1-0"), await wait_end(r1, "g1-1")
        assert s0.state == s1.state == "DONE", (s0.error, s1.error)
        assert s0.started_at >= busy.finished_at - 0.5 and s1.started_at >= busy.finished_at - 0.5
        assert abs(s0.started_at - s1.started_at) < 3, (s0.started_at, s1.started_at)
        port0, port1 = log0.split("port=")[1].split()[0], log1.split("port=")[1].split()[0]
        assert port0 == port1 and int(port0) > 0, (log0, log1)

    asyncio.run(go())


def test_two_gangs_over_the_same_two_runners_both_finish(runners):
    r0, r1 = runners

    async def go():
        # Submitted crosswise: r1 sees gang B first, r0 gang A first, as two controllers may.
        await submit_detached(r0, _member(r0, "ga", 0, "sleep 1", 1.0))
        await submit_detached(r1, _member(r1, "gb", 0, "sleep 1", 2.0))
        await submit_detached(r1, _member(r0, "ga", 1, "sleep 1", 1.0))
        await submit_detached(r0, _member(r1, "gb", 1, "sleep 1", 2.0))
        ends = [await wait_end(r0, "ga-0", 90), await wait_end(r1, "ga-1", 90), await wait_end(r1, "gb-0", 90)]
        ends.append(await wait_end(r0, "gb-1", 90))
        assert [s.state for s, _ in ends] == ["DONE"] * 4, [s.error for s, _ in ends]
        ga, gb = (ends[0][0], ends[1][0]), (ends[2][0], ends[3][0])
        assert abs(ga[0].started_at - ga[1].started_at) < 3 and abs(gb[0].started_at - gb[1].started_at) < 3
        # One runner never ran both gangs at once (each member asks for all of its CPUs).
        assert ga[0].finished_at <= gb[1].started_at + 0.5 or gb[1].finished_at <= ga[0].started_at + 0.5

    asyncio.run(go())


def test_a_failing_member_stops_the_others(runners):
    r0, r1 = runners

    async def go():
        await submit_detached(r0, _member(r0, "gf", 0, "sleep 60", 1.0))
        await submit_detached(r1, _member(r0, "gf", 1, "sleep 1; exit 3", 1.0))
        (s1, _), (s0, log0) = await wait_end(r1, "gf-1", 30), await wait_end(r0, "gf-0", 30)
        assert s1.state == "FAILED"
        assert s0.state == "STOPPED" and "node 1 failed" in log0, (s0.state, log0)

    asyncio.run(go())


async def _gang_connect(agent, gang_id: str, token: str) -> asyncssh.SSHClientConnection:
    return await asyncssh.connect(
        agent.host,
        agent.port,
        username=GANG_USER_PREFIX + gang_id,
        password=token,
        known_hosts=([asyncssh.import_public_key(host_key(agent))], [], []),
        client_keys=None,
        agent_path=None,
        config=None,
    )


def test_a_wrong_token_or_unknown_gang_is_refused_and_a_token_opens_only_its_barrier(runners):
    r0, r1 = runners

    async def go():
        await submit_detached(r0, _member(r0, "gx", 0, "sleep 30", 1.0))
        with pytest.raises(asyncssh.PermissionDenied):
            await _gang_connect(r0, "gx", "w" * 32)
        with pytest.raises(asyncssh.PermissionDenied):
            await _gang_connect(r0, "nosuchgang", TOKEN)
        async with await _gang_connect(r0, "gx", TOKEN) as conn:
            with pytest.raises(asyncssh.ChannelOpenError):  # no lanpool subsystem: no submit, logs, files
                await conn.create_process(subsystem=SUBSYSTEM, encoding=None)
            with pytest.raises(asyncssh.ChannelOpenError):
                await conn.create_process("lanpool-exec gx-0 -- id", encoding=None)
            with pytest.raises(asyncssh.ChannelOpenError):
                await conn.create_connection(asyncssh.SSHTCPSession, "127.0.0.1", r0.port)
            barrier = await conn.create_process(subsystem=GANG_SUBSYSTEM, encoding=None)
            barrier.close()
        # A controller's key cannot log in as a gang member (password only), nor the token as a controller.
        with pytest.raises((asyncssh.PermissionDenied, asyncssh.DisconnectError)):
            await asyncssh.connect(
                r0.host, r0.port, username="lanpool", password=TOKEN, known_hosts=None, client_keys=None, config=None
            )
        async with await open_session(r0) as s:
            await s.stop("gx-0", abort=True, grace_s=None)
        assert "wrong token" in r0.log_tail(20000) and "unknown gang" in r0.log_tail(20000)

    asyncio.run(go())


def test_a_member_refuses_a_node0_whose_host_key_does_not_match(runners):
    r0, r1 = runners

    async def go():
        await submit_detached(r0, _member(r0, "gk", 0, "echo node0 ran", 1.0))
        # r1's own host key, not r0's: a man in the middle's key as far as the member knows.
        await submit_detached(r1, _member(r0, "gk", 1, "echo node1 ran", 1.0, key=host_key(r1)))
        await asyncio.sleep(6)  # past the reservation time: the member gave up and backs off
        async with await open_session(r1) as s:
            status = await s.status("gk-1")
            log = await job_log(s, "gk-1")
            assert status.state == "QUEUED" and status.started_at is None, status.state
            assert "cannot reach node 0's agent" in log and "node1 ran" not in log, log
            await s.stop("gk-1", abort=True, grace_s=None)
        async with await open_session(r0) as s:
            assert (await s.status("gk-0")).started_at is None
            await s.stop("gk-0", abort=True, grace_s=None)

    asyncio.run(go())


def test_run_detached_submits_a_two_node_job_to_busy_runners_and_returns(tmp_path, controller_home, cli):
    agents = [start_agent(tmp_path / f"n{k}", controller_home, name=f"node-{k}", extra_env=GANG_ENV) for k in range(2)]
    try:
        for a in agents:
            cli("headless", "runners", "add", a.address, check=True)
        project = tmp_path / "repo"
        (project / ".lanpool").mkdir(parents=True)
        (project / ".lanpool" / "workflows.yaml").write_text(
            "workflows:\n  - name: pair\n    nodes: 2\n    resources: {cpu: 2}\n    commands:\n"
            '      - echo "rank $NODE_RANK of $LANPOOL_NUM_NODES at $MASTER_ADDR:$MASTER_PORT"\n'
        )
        asyncio.run(submit_detached(agents[1], SubmitJob("busy", "r", "w", ["sleep 4"], resources={"cpu": 2})))
        t0 = time.monotonic()
        res = cli("headless", "run", "pair", "-d", "--json", cwd=project, timeout=60)
        took = time.monotonic() - t0
        assert res.returncode == 0, res.stderr
        assert took < 15, took  # it returned while node-1 was still busy: the runners hold the gang
        out = json.loads(res.stdout)
        job_id = out["jobs"][0]["job_id"]

        async def go():
            busy, _ = await wait_end(agents[1], "busy")
            ends = [await wait_end(a, job_id, 60) for a in agents]
            assert min(s.started_at for s, _ in ends) >= busy.finished_at - 0.5  # node 0 waited for node 1
            assert [s.state for s, _ in ends] == ["DONE", "DONE"], [s.error for s, _ in ends]
            (_, log0), (_, log1) = ends
            assert "rank 0 of 2 at 127.0.0.1:" in log0 and "rank 1 of 2 at 127.0.0.1:" in log1
            assert log0.split(":")[-1].strip() == log1.split(":")[-1].strip()  # one MASTER_PORT

        asyncio.run(go())
    finally:
        for a in agents:
            a.stop()


def test_a_gang_spec_out_of_bounds_is_refused_at_submit(runners):
    from lanpool.app.errors import RunnerError

    r0, _ = runners

    async def go():
        def bad(**change) -> SubmitJob:
            req = _member(r0, "gz", 1, "echo x", 1.0)
            return dataclasses.replace(req, gang=dataclasses.replace(req.gang, **change))

        async with await open_session(r0) as s:
            for change, says in [
                ({"gang_rank": 2}, "rank below its size"),
                ({"gang_token": "short"}, "token"),
                ({"coordinator": "no-port"}, "HOST:PORT"),
                ({"gang_size": 1}, "gang_size"),
                ({"gang_id": "../x"}, "gang_id"),
            ]:
                with pytest.raises(RunnerError, match=says):
                    await s.submit(bad(**change))

    asyncio.run(go())


def test_a_member_whose_agent_restarts_before_go_rejoins_and_the_gang_starts_together(tmp_path, controller_home):
    """Its token is kept in the job's private dir (0600), never in request.json, the journal or
    a log, so the restarted member re-joins node 0's barrier; the token goes when the job ends."""
    r0 = start_agent(tmp_path / "agent0", controller_home, name="r0", extra_env=GANG_ENV)
    data1 = tmp_path / "agent1"
    r1 = start_agent(data1, controller_home, name="r1", extra_env=GANG_ENV)
    token = "k" * 40
    try:

        async def submit():
            await submit_detached(r0, SubmitJob("busy", "r", "w", ["sleep 8"], resources={"cpu": 2}))
            await submit_detached(r0, _member(r0, "gr", 0, 'echo "port=$MASTER_PORT"', 1.0, token=token))
            second = await submit_detached(r1, _member(r0, "gr", 1, 'echo "port=$MASTER_PORT"', 1.0, token=token))
            assert second.state == "QUEUED" and second.started_at is None, second.state

        asyncio.run(submit())
        kept = data1 / "jobs" / "gr-1" / "gang.token"
        assert kept.read_text() == token and kept.stat().st_mode & 0o777 == 0o600
        on_disk = [p for p in data1.rglob("*") if p.is_file() and p != kept and token.encode() in p.read_bytes()]
        assert not on_disk, on_disk
        r1.stop()
        r1 = start_agent(data1, controller_home, name="r1", extra_env=GANG_ENV)

        async def after_restart():
            busy, _ = await wait_end(r0, "busy")
            (s0, log0), (s1, log1) = await wait_end(r0, "gr-0", 90), await wait_end(r1, "gr-1", 90)
            assert s0.state == s1.state == "DONE", (s0.error, s1.error, log1)
            assert min(s0.started_at, s1.started_at) >= busy.finished_at - 0.5
            assert abs(s0.started_at - s1.started_at) < 3, (s0.started_at, s1.started_at)
            assert log0.split("port=")[1].split()[0] == log1.split("port=")[1].split()[0], (log0, log1)

        asyncio.run(after_restart())
        assert not kept.exists()
        assert token not in r1.log_tail(200000) and token not in r0.log_tail(200000)
    finally:
        r0.stop()
        r1.stop()


PAIR = (
    "workflows:\n  - name: pair\n    nodes: 2\n    resources: {cpu: 2}\n    commands:\n"
    '      - echo "rank $NODE_RANK must not run"\n'
)


def test_stop_on_a_detached_gang_queued_behind_a_busy_runner_cancels_every_member(tmp_path, controller_home, cli):
    agents = [start_agent(tmp_path / f"n{k}", controller_home, name=f"node-{k}", extra_env=GANG_ENV) for k in range(2)]
    try:
        for a in agents:
            cli("headless", "runners", "add", a.address, check=True)
        project = tmp_path / "repo"
        (project / ".lanpool").mkdir(parents=True)
        (project / ".lanpool" / "workflows.yaml").write_text(PAIR)
        asyncio.run(submit_detached(agents[1], SubmitJob("busy", "r", "w", ["sleep 60"], resources={"cpu": 2})))
        out = cli("headless", "run", "pair", "-d", "--json", cwd=project, timeout=60)
        assert out.returncode == 0, out.stderr
        job_id = json.loads(out.stdout)["jobs"][0]["job_id"]
        waiting = jobs_by(cli)[job_id]  # QUEUED with why, not RUNNING, while its runners hold it
        assert waiting["status"] == "QUEUED" and "gang of 2" in (waiting["error"] or ""), waiting
        stopped = cli("headless", "stop", job_id, timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        job = jobs_by(cli)[job_id]
        assert job["status"] in ("STOPPED", "ABORTED") and "cancelled while queued" in (job["error"] or ""), job

        async def on_the_runners():
            for a in agents:  # both queues are empty of it; the busy job still runs
                async with await open_session(a) as s:
                    member = await s.status(job_id)
                    assert member.state in ("STOPPED", "ABORTED") and member.started_at is None, member
                    assert "cancelled while queued" in member.error, member.error
                    assert "must not run" not in await job_log(s, job_id)
            async with await open_session(agents[1]) as s:
                assert (await s.status("busy")).state == "RUNNING"
            await asyncio.sleep(4)  # past the reservation time: nothing of the gang comes back
            for a in agents:
                async with await open_session(a) as s:
                    assert (await s.status(job_id)).state in ("STOPPED", "ABORTED")

        asyncio.run(on_the_runners())
    finally:
        for a in agents:
            a.stop()
