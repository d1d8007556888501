"""Detached gangs: the members of a multi-node job wait in their runners' queues
and start together, coordinated by node 0's agent (agent/gang/hub.py), with no controller alive;
two gangs over the same runners both finish; a failing member stops the others. Attacks: a
wrong token, a gang connection asking for anything but its barrier, a wrong node-0 host key.
Real agents, real SSH on loopback; "no controller alive" = every controller session closed.
The part with Docker, Slurm or namespaces (system); the rest: tests/integration/test_runner_gang.py."""

import asyncio
import dataclasses

from tests.harness import start_agent
from tests.integration.test_runner_gang import _member
from tests.runner_jobs import (
    GANG_ENV,
    open_session,
    submit_detached,
    wait_end,
    wait_state,
)


def test_a_running_member_rejoins_node0_whose_agent_restarted(tmp_path, controller_home, docker_client, busybox_image):
    """Node 0 runs in a container, which outlives its agent: the running member loses node 0's
    agent, tries again with backoff, re-joins the restarted one, and both nodes finish."""
    from tests.docker_harness import remove_agent_containers

    env = {**GANG_ENV, "LANPOOL_GANG_LOST_S": "30"}
    data0 = tmp_path / "agent0"
    r0 = start_agent(data0, controller_home, name="r0", extra_env=env, extra_args=("--executor", "docker"))
    r1 = start_agent(tmp_path / "agent1", controller_home, name="r1", extra_env=env)
    try:

        async def submit():
            node0 = dataclasses.replace(_member(r0, "gj", 0, "sleep 12; echo node0 done", 1.0), image=busybox_image)
            await submit_detached(r0, node0)
            await submit_detached(r1, _member(r0, "gj", 1, "sleep 12; echo node1 done", 1.0))
            async with await open_session(r1) as s:
                await wait_state(s, "gj-1", {"RUNNING"}, 30)

        asyncio.run(submit())
        port = r0.port
        r0.stop()
        r0 = start_agent(
            data0, controller_home, name="r0", port=port, extra_env=env, extra_args=("--executor", "docker")
        )

        async def after_restart():
            (s1, log1), (s0, log0) = await wait_end(r1, "gj-1", 60), await wait_end(r0, "gj-0", 60)
            assert s0.state == s1.state == "DONE", (s0.error, s1.error, log1)
            assert "re-joined node 0's agent" in log1 and "node1 done" in log1, log1
            assert "node0 done" in log0, log0

        asyncio.run(after_restart())
    finally:
        r0.stop()
        r1.stop()
        remove_agent_containers(docker_client, data0)
