"""A runner shared by a team (agent/jobs/turns.py): two controllers with labels, fair turns in
the runner's queue, who holds what a waiting job needs (never what the other's job holds
inside), the per-owner GPU cap and private occupancy. Real agents, real SSH on loopback, two
real controller keys; GPUs faked at the edge (LANPOOL_FAKE_GPUS)."""

import asyncio
import json
import subprocess
from pathlib import Path

import asyncssh
import pytest

from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.app.runners.client import RunnerSession
from lanpool.protocol import SubmitJob
from lanpool.protocol.pairing import sanitize_label
from tests.harness import APP_MODULE, controller_key, lanpool_env, start_agent
from tests.runner_jobs import ENDED, client_key, open_session, wait_state

pytestmark = pytest.mark.timeout(180)


def _authorize(key_file: str, agent, label: str, env: dict[str, str]) -> str:
    """`app agent authorize KEY --label NAME` on the runner, as its admin runs it."""
    done = subprocess.run(
        [*APP_MODULE, "agent", "authorize", key_file, "--label", label, "--data-dir", str(agent.data_dir)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def _bob(tmp_path, agent, label: str = "bob") -> asyncssh.SSHKey:
    """A second controller (a home and a key of its own), authorized with a label."""
    env = lanpool_env(tmp_path / "bob-home")
    _authorize(controller_key(env), agent, label, env)
    return load_or_create_client_key(ControllerHome(tmp_path / "bob-home").key)


def _job(job_id: str, workflow: str, seconds: float, gpus: int = 1, **extra) -> SubmitJob:
    return SubmitJob(
        job_id=job_id,
        run_name=f"run-{job_id}",
        workflow=workflow,
        commands=[f"echo private-output-of-{job_id}", f"sleep {seconds}"],
        env={"SECRET_VAR": f"value-of-{job_id}"},
        resources={"gpu": gpus},
        detached=True,
        **extra,
    )


async def _submit(session: RunnerSession, *jobs: SubmitJob) -> None:
    for job in jobs:
        await session.submit(job)


def _agent_status(agent, env) -> dict:
    done = subprocess.run(
        [*APP_MODULE, "agent", "status", "--json", "--data-dir", str(agent.data_dir)],
        env=env,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout)


def test_a_second_person_gets_the_next_turn_and_sees_whose_job_holds_the_runner(tmp_path, controller_home, cli):
    agent = start_agent(tmp_path / "agent", controller_home, extra_env={"LANPOOL_FAKE_GPUS": "0"})
    try:
        env = lanpool_env(controller_home)
        assert "relabelled as 'alice'" in _authorize(controller_key(env), agent, "alice", env)
        bob_key = _bob(tmp_path, agent)
        cli("headless", "runners", "add", agent.address, check=True)

        async def scenario() -> dict[str, float]:
            async with await open_session(agent) as alice:
                # Alice queues three jobs that each need the whole runner (its one GPU).
                await _submit(alice, _job("a1", "train-a", 4), _job("a2", "train-a", 1), _job("a3", "train-a", 1))
                await wait_state(alice, "a1", {"RUNNING"})
                async with await RunnerSession.open(agent.host, agent.port, bob_key, None) as bob:
                    await _submit(bob, _job("b1", "eval-b", 1))
                    waiting = await wait_state(bob, "b1", {"QUEUED"})
                    # Occupancy, not content: alice's label, workflow, what it holds and since when.
                    assert waiting.reason.startswith("waiting for 1 GPU: 0 of 1 free; held by alice (train-a, 1 GPU, ")
                    assert "private-output" not in waiting.reason and "value-of" not in waiting.reason
                    assert waiting.position == 1  # bob's turn comes before alice's two others

                    status = _agent_status(agent, env)
                    rows = [(j["job_id"], j["state"], j["turn"], j["owner"]) for j in status["jobs"]]
                    assert rows == [
                        ("a1", "RUNNING", None, "alice"),
                        ("b1", "QUEUED", 1, "bob"),
                        ("a2", "QUEUED", 2, "alice"),
                        ("a3", "QUEUED", 3, "alice"),
                    ]
                    runners = json.loads(cli("headless", "runners", "--json", "--wait", "0", check=True).stdout)
                    assert runners[0]["held_by"].startswith("alice (train-a, 1 GPU, "), runners

                    started = {"b1": (await wait_state(bob, "b1", ENDED, 60)).started_at}
                for job_id in ("a1", "a2", "a3"):
                    started[job_id] = (await wait_state(alice, job_id, ENDED, 60)).started_at
                return started

        started = asyncio.run(scenario())
        assert sorted(started, key=lambda j: started[j]) == ["a1", "b1", "a2", "a3"], started
    finally:
        agent.stop()


def test_the_per_owner_gpu_cap_and_private_occupancy(tmp_path, controller_home):
    agent = start_agent(
        tmp_path / "agent",
        controller_home,
        extra_env={"LANPOOL_FAKE_GPUS": "0,1,2"},
        extra_args=["--max-gpus-per-owner", "1", "--private-occupancy"],
    )
    try:
        env = lanpool_env(controller_home)
        _authorize(controller_key(env), agent, "alice", env)
        bob_key = _bob(tmp_path, agent)

        async def scenario() -> None:
            async with await open_session(agent) as alice:
                await _submit(alice, _job("a1", "train-a", 30), _job("a2", "train-a", 1))
                await wait_state(alice, "a1", {"RUNNING"})
                capped = await wait_state(alice, "a2", {"QUEUED"})
                assert "one controller may hold 1 on this runner (--max-gpus-per-owner)" in capped.reason
                with pytest.raises(Exception, match="at most 1 on this runner"):
                    await alice.submit(_job("big", "train-a", 1, gpus=2))
                async with await RunnerSession.open(agent.host, agent.port, bob_key, None) as bob:
                    # A GPU is free and bob holds none: his job starts beside alice's.
                    await _submit(bob, _job("b1", "eval-b", 30), _job("b2", "eval-b", 1, gpus=1))
                    await wait_state(bob, "b1", {"RUNNING"})
                    second = await wait_state(bob, "b2", {"QUEUED"})
                    assert "--max-gpus-per-owner" in second.reason  # his own cap, not alice's jobs
                    await bob.stop("b1", True, 0)
                await alice.stop("a1", True, 0)

        asyncio.run(scenario())
    finally:
        agent.stop()


LABEL = "\x1b[31mal\x07ice\x1b[0m"


def test_private_occupancy_names_nobody_and_hostile_labels_are_cleaned(tmp_path, controller_home):
    agent = start_agent(tmp_path / "agent", controller_home, extra_env={"LANPOOL_FAKE_GPUS": "0"})
    private = None
    try:
        env = lanpool_env(controller_home)
        # A label is the admin's word: control characters and escapes are dropped at authorize.
        out = _authorize(controller_key(env), agent, LABEL, env)
        assert "\x1b" not in out
        bob_key = _bob(tmp_path, agent)

        async def reason_for_bob(runner, tag: str) -> str:
            async with await RunnerSession.open(runner.host, runner.port, client_key(), None) as alice:
                await _submit(alice, _job(f"{tag}a1", "train-a", 30))
                await wait_state(alice, f"{tag}a1", {"RUNNING"})
                async with await RunnerSession.open(runner.host, runner.port, bob_key, None) as bob:
                    await _submit(bob, _job(f"{tag}b1", "eval-b", 1))
                    waiting = await wait_state(bob, f"{tag}b1", {"QUEUED"})
                    await bob.stop(f"{tag}b1", True, 0)
                await alice.stop(f"{tag}a1", True, 0)
                await wait_state(alice, f"{tag}a1", ENDED)
            return waiting.reason

        shown = asyncio.run(reason_for_bob(agent, "open-"))
        assert "\x1b" not in shown and "\x07" not in shown
        assert f"held by {sanitize_label(LABEL)} (train-a, 1 GPU, " in shown, shown
        agent.stop()
        private = start_agent(
            tmp_path / "agent",
            controller_home,
            authorize=False,
            extra_args=["--private-occupancy"],
            extra_env={"LANPOOL_FAKE_GPUS": "0"},
        )
        hidden = asyncio.run(reason_for_bob(private, "private-"))
        assert hidden == "waiting for 1 GPU: 0 of 1 free; held by 1 job", hidden
    finally:
        agent.stop()
        if private is not None:
            private.stop()


def test_priority_orders_ones_own_waiting_jobs(tmp_path, controller_home):
    agent = start_agent(tmp_path / "agent", controller_home, extra_env={"LANPOOL_FAKE_GPUS": "0"})
    try:

        async def scenario() -> dict[str, float]:
            async with await open_session(agent) as alice:
                await _submit(alice, _job("p1", "w", 2), _job("p2", "w", 0.2), _job("p3", "w", 0.2, priority=5))
                return {j: (await wait_state(alice, j, ENDED, 60)).started_at for j in ("p1", "p2", "p3")}

        started = asyncio.run(scenario())
        assert sorted(started, key=lambda j: started[j]) == ["p1", "p3", "p2"], started
    finally:
        agent.stop()


def test_a_long_shared_queue_is_not_bounded_by_a_low_open_files_limit(tmp_path, controller_home):
    """Each waiting job keeps its log open: an agent started with a soft limit of 64 files (as a
    service may be, at 1,024) takes 100 queued jobs, having raised the limit to its hard one."""
    low = ["bash", "-c", 'ulimit -Sn 64 && exec "$0" "$@"', *APP_MODULE]
    agent = start_agent(tmp_path / "agent", controller_home, app=low, extra_env={"LANPOOL_FAKE_GPUS": "0"})
    try:

        async def scenario() -> None:
            async with await open_session(agent) as alice:
                await _submit(alice, _job("hold", "w", 60), *(_job(f"q{k}", "w", 0) for k in range(100)))
                last = await wait_state(alice, "q99", {"QUEUED"})
                assert last.position == 100, last
                await alice.stop("hold", True, 0)

        asyncio.run(scenario())
        soft = next(
            line.split()[3]
            for line in Path(f"/proc/{agent.proc.pid}/limits").read_text().splitlines()
            if line.startswith("Max open files")
        )
        assert soft == "unlimited" or int(soft) > 64, soft
    finally:
        agent.stop()
