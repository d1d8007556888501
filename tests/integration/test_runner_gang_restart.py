"""A detached gang's member whose agent restarts after Go: a container member,
which outlives its agent, is re-adopted and re-joins node 0's agent, and the gang goes on;
a process member, which its agent stops on the way out, fails the gang on every node with a
reason naming the node and the restart - never a gang left running with a node missing.
Real agents, real SSH on loopback, no controller alive.
The part with real agents and the CLI (integration); the rest: tests/system/test_runner_gang_restart.py."""

import asyncio

from tests.harness import start_agent
from tests.integration.test_runner_gang import _member
from tests.runner_jobs import GANG_ENV, open_session, submit_detached, wait_end, wait_state


async def _both_running(r0, r1, gang_id: str) -> None:
    for agent, rank in ((r0, 0), (r1, 1)):
        async with await open_session(agent) as s:
            await wait_state(s, f"{gang_id}-{rank}", {"RUNNING"}, 30)


def test_a_running_process_member_whose_agent_restarts_fails_the_gang_naming_the_node(tmp_path, controller_home):
    data1 = tmp_path / "agent1"
    r0 = start_agent(tmp_path / "agent0", controller_home, name="r0", extra_env=GANG_ENV)
    r1 = start_agent(data1, controller_home, name="r1", extra_env=GANG_ENV)
    try:

        async def submit():
            await submit_detached(r0, _member(r0, "gp", 0, "sleep 60; echo node0 done", 1.0))
            await submit_detached(r1, _member(r0, "gp", 1, "sleep 60; echo node1 done", 1.0))
            await _both_running(r0, r1, "gp")

        asyncio.run(submit())
        r1.stop()  # a process cannot outlive its agent: it is stopped on the way out
        r1 = start_agent(data1, controller_home, name="r1", extra_env=GANG_ENV)

        async def after_restart():
            # Well before the 60 s sleep ends: node 0 does not run on with a node missing.
            (s0, log0), (s1, log1) = await wait_end(r0, "gp-0", 30), await wait_end(r1, "gp-1", 30)
            assert s0.state != "DONE" and s1.state != "DONE", (s0.state, s1.state)
            assert "node 1 was lost" in log0, log0
            assert "its agent shut down" in log0 or "its agent gone" in log0, log0
            assert "node0 done" not in log0 and "node1 done" not in log1

        asyncio.run(after_restart())
    finally:
        r0.stop()
        r1.stop()
