"""A detached gang's member whose agent restarts after Go: a container member,
which outlives its agent, is re-adopted and re-joins node 0's agent, and the gang goes on;
a process member, which its agent stops on the way out, fails the gang on every node with a
reason naming the node and the restart - never a gang left running with a node missing.
Real agents, real SSH on loopback, no controller alive.
The part with Docker, Slurm or namespaces (system); the rest: tests/integration/test_runner_gang_restart.py."""

import asyncio
import dataclasses

from tests.harness import start_agent
from tests.integration.test_runner_gang import _member
from tests.integration.test_runner_gang_restart import _both_running
from tests.runner_jobs import GANG_ENV, submit_detached, wait_end


def test_a_running_container_member_whose_agent_restarts_rejoins_and_the_gang_finishes(
    tmp_path, controller_home, docker_client, busybox_image
):
    from tests.docker_harness import remove_agent_containers

    # Node 0 waits 20 s for the member to re-join, the nodes run 35 s: without the re-join, node 0 fails.
    env = {**GANG_ENV, "LANPOOL_GANG_LOST_S": "20"}
    data1 = tmp_path / "agent1"
    r0 = start_agent(tmp_path / "agent0", controller_home, name="r0", extra_env=env)
    r1 = start_agent(data1, controller_home, name="r1", extra_env=env, extra_args=("--executor", "docker"))
    try:

        async def submit():
            await submit_detached(r0, _member(r0, "ga", 0, "sleep 35; echo node0 done", 1.0))
            node1 = dataclasses.replace(_member(r0, "ga", 1, "sleep 35; echo node1 done", 1.0), image=busybox_image)
            await submit_detached(r1, node1)
            await _both_running(r0, r1, "ga")

        asyncio.run(submit())
        r1.stop()  # its container keeps running
        r1 = start_agent(data1, controller_home, name="r1", extra_env=env, extra_args=("--executor", "docker"))

        async def after_restart():
            (s1, log1), (s0, log0) = await wait_end(r1, "ga-1", 90), await wait_end(r0, "ga-0", 90)
            assert s0.state == s1.state == "DONE", (s0.error, s1.error, log0, log1)
            assert "this runner's agent restarted" in log1 and "re-joined node 0's agent" in log1, log1
            assert "node1 done" in log1 and "node0 done" in log0, (log0, log1)

        asyncio.run(after_restart())
    finally:
        r0.stop()
        r1.stop()
        remove_agent_containers(docker_client, data1)
