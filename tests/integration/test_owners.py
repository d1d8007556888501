"""Jobs have owners: on a runner two controllers are paired with (a team's shared GPU box),
each reaches only its own jobs. To the other, a job does not exist: status, logs, stop,
artifacts, exec and shells, its ports and DAG links all answer as for an id never seen.
Real agent, real SSH on loopback, two real controller keys."""

import asyncio
import json
import socket
import time

import asyncssh
import pytest

from lanpool.app.errors import LanpoolError
from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.app.runners.client import RunnerSession
from lanpool.protocol import ArtifactRange, Error, SubmitJob
from lanpool.protocol.wire import exec_command
from tests.harness import authorize_key, controller_key, lanpool_env
from tests.runner_jobs import open_session, submit_detached, wait_end, wait_state

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def other(tmp_path, agent) -> asyncssh.SSHKey:
    """A second controller paired with the same runner: a home and a key of its own."""
    home = tmp_path / "other-controller"
    env = lanpool_env(home)
    authorize_key(controller_key(env), agent.data_dir, env)
    return load_or_create_client_key(ControllerHome(home).key)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _job(job_id: str, port: int, **extra) -> SubmitJob:
    # A server that speaks first and closes at once, for each connection: what it sent must
    # still reach its owner.
    serve = (
        "python3 -c \"import socket; s=socket.create_server(('127.0.0.1', "
        f"{port})); [(c.sendall(b'from-the-job'), c.close()) for c, _ in iter(s.accept, None)]\" &"
    )
    return SubmitJob(
        job_id=job_id,
        run_name="r",
        workflow="w",
        commands=["mkdir -p out && echo result > out/result.txt", serve, "echo running-now", "sleep 60"],
        env={"TOKEN": "s3cret-value"},
        masked=["TOKEN"],
        artifacts=["out"],
        ports=[port],
        detached=True,
        **extra,
    )


async def _refusal(session: RunnerSession, job_id: str) -> str:
    """What a status of `job_id` answers, as the one line a user sees."""
    with pytest.raises(LanpoolError) as got:
        await session.status(job_id)
    return got.value.message.replace(job_id, "ID")


async def _exec(agent, key: asyncssh.SSHKey, job_id: str, argv: list[str]) -> tuple[int | None, str]:
    async with asyncssh.connect(agent.host, agent.port, client_keys=[key], known_hosts=None) as conn:
        proc = await conn.run(exec_command(job_id, argv), timeout=30)
        return proc.exit_status, f"{proc.stdout!s}{proc.stderr!s}"


async def _owner_reaches(agent, port: int) -> None:
    key = load_or_create_client_key(ControllerHome.default().key)
    for _ in range(150):
        try:
            assert await _through_port(agent, key, port) == b"from-the-job"
            return
        except asyncssh.ChannelOpenError:  # nothing answers on it yet
            await asyncio.sleep(0.2)
    raise AssertionError(f"the job's server never answered on port {port}")


async def _through_port(agent, key: asyncssh.SSHKey, port: int) -> bytes:
    async with asyncssh.connect(agent.host, agent.port, client_keys=[key], known_hosts=None) as conn:
        reader, writer = await conn.open_connection("127.0.0.1", port)
        data = await asyncio.wait_for(reader.read(100), 20)
        writer.close()
        return data


def test_another_controller_reaches_none_of_a_jobs_requests(agent, other):
    port = _free_port()
    asyncio.run(submit_detached(agent, _job("mine", port)))

    async def go() -> None:
        async with await open_session(agent) as a, await RunnerSession.open(agent.host, agent.port, other, None) as b:
            await wait_state(a, "mine", {"RUNNING"})
            # Its server listening (a loaded machine starts it after RUNNING), so that another
            # controller's forward below is refused for being another's, not for finding nothing.
            await _owner_reaches(agent, port)
            unknown = await _refusal(b, "never-submitted")
            assert "no job" in unknown
            # Every request about another controller's job answers as for an id never seen.
            assert await _refusal(b, "mine") == unknown
            with pytest.raises(LanpoolError) as stopped:
                await b.stop("mine", abort=True, grace_s=0)
            assert stopped.value.message.replace("mine", "ID") == unknown
            with pytest.raises(LanpoolError) as attached:
                async for _batch in b.attach("mine", 0, follow=False):
                    pass
            assert attached.value.message.replace("mine", "ID") == unknown
            async for batch in b.get_artifacts("mine", [ArtifactRange("out/result.txt")]):
                assert [type(m) for m in batch] == [Error] and "no job" in batch[0].message
                break  # a refusal is the stream's last batch
            code, said = await _exec(agent, other, "mine", ["env"])
            assert code == 255 and "does not exist" in said and "s3cret" not in said
            with pytest.raises((asyncssh.ChannelOpenError, OSError)):
                await _through_port(agent, other, port)
            # ...while its owner reaches all of it, and the job ran on, untouched.
            assert (await a.status("mine")).state == "RUNNING"
            code, said = await _exec(agent, load_or_create_client_key(ControllerHome.default().key), "mine", ["env"])
            assert code == 0 and "TOKEN=s3cret-value" in said
            assert await _through_port(agent, load_or_create_client_key(ControllerHome.default().key), port) == (
                b"from-the-job"
            )
            await a.stop("mine", abort=True, grace_s=0)

    asyncio.run(go())
    status, log = asyncio.run(wait_end(agent, "mine"))
    assert status.state == "ABORTED" and "running-now" in log


def test_a_dag_step_may_not_wait_for_another_controllers_job(agent, other):
    asyncio.run(submit_detached(agent, SubmitJob(job_id="first", run_name="r", workflow="w", commands=["true"])))
    step = SubmitJob(
        job_id="step", run_name="r", workflow="w", commands=["true"], after=["first"], run_key="k" * 32, detached=True
    )

    async def go() -> str:
        async with await RunnerSession.open(agent.host, agent.port, other, None) as b:
            with pytest.raises(LanpoolError) as refused:
                await b.submit(step)
            return refused.value.message

    assert "no job first on this runner" in asyncio.run(go())


def test_the_owner_and_its_label_are_kept_with_the_job(agent, controller_home):
    """The label is the key's comment in authorized_keys: what `runners pair` gave, for people."""
    authorized = agent.data_dir / "authorized_keys"
    (line,) = authorized.read_text().splitlines()
    authorized.write_text(" ".join(line.split()[:2]) + " alice@lab\n")
    asyncio.run(submit_detached(agent, SubmitJob(job_id="labelled", run_name="r", workflow="w", commands=["true"])))
    asyncio.run(wait_end(agent, "labelled"))
    record = json.loads((agent.data_dir / "jobs" / "labelled" / "job.json").read_text())
    key = load_or_create_client_key(ControllerHome.default().key)
    assert (record["owner"], record["owner_label"]) == (key.get_fingerprint("sha256"), "alice@lab")


def test_a_key_no_longer_authorized_is_refused_at_once(agent, other, tmp_path):
    """authorized_keys is read at each connection: removing a controller's line locks it out."""
    authorized = agent.data_dir / "authorized_keys"
    lines = authorized.read_text().splitlines()
    other_line = next(line for line in lines if other.export_public_key().decode().split()[1] in line)
    authorized.write_text("".join(f"{line}\n" for line in lines if line != other_line))
    started = time.monotonic()
    with pytest.raises(LanpoolError):
        asyncio.run(RunnerSession.open(agent.host, agent.port, other, None))
    assert time.monotonic() - started < 30
