"""Bounds that hold a shared runner up, attacked through a real agent: one controller cannot
fill its queue (and journal) for everyone, nor its disk with the workspaces of jobs it keeps
unfinished, and a submit whose workspace cannot fit on the disk (one blob named many times,
each path a copy) is refused before anything is written. A disk that fills while jobs run:
tests/integration/test_runner_disk_full.py."""

import asyncio
import hashlib
import shutil
import subprocess

import asyncssh
import pytest

from lanpool.app.errors import LanpoolError
from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.app.runners.client import RunnerSession
from lanpool.protocol import FileEntry, PutBlob, SubmitJob
from tests.harness import APP_MODULE, authorize_key, controller_key, lanpool_env, start_agent
from tests.runner_jobs import ALL_CPUS, open_session, wait_state

pytestmark = pytest.mark.timeout(180)


def _job(job_id: str, cpu: float = 1) -> SubmitJob:
    return SubmitJob(
        job_id=job_id, run_name="r", workflow="w", commands=["sleep 60"], resources={"cpu": cpu}, detached=True
    )


def _second_controller(tmp_path, agent) -> asyncssh.SSHKey:
    """A second controller paired with the runner: a home and a key of its own."""
    home = tmp_path / "other-controller"
    env = lanpool_env(home)
    authorize_key(controller_key(env), agent.data_dir, env)
    return load_or_create_client_key(ControllerHome(home).key)


def test_one_controller_cannot_fill_the_queue(tmp_path, controller_home):
    agent = start_agent(
        tmp_path / "agent", controller_home, extra_env=ALL_CPUS, extra_args=["--max-queued-per-controller", "2"]
    )
    try:
        other = _second_controller(tmp_path, agent)

        async def go() -> str:
            async with (
                await open_session(agent) as a,
                await RunnerSession.open(agent.host, agent.port, other, None) as b,
            ):
                await a.submit(_job("holds-all", cpu=2))  # every CPU: what follows waits
                await wait_state(a, "holds-all", {"RUNNING"})
                for k in (1, 2):
                    assert (await a.submit(_job(f"q{k}"))).state == "QUEUED"
                with pytest.raises(LanpoolError) as refused:
                    await a.submit(_job("q3"))
                # The bound is per controller: another one still gets its turn in the queue.
                assert (await b.submit(_job("theirs"))).state == "QUEUED"
                for job_id in ("holds-all", "q1", "q2"):
                    await a.stop(job_id, abort=True, grace_s=0)
                await b.stop("theirs", abort=True, grace_s=0)
                return refused.value.message

        message = asyncio.run(go())
        assert "2 of your jobs already wait in this runner's queue (at most 2" in message
        assert not (agent.data_dir / "jobs" / "q3").exists()
    finally:
        agent.stop()


def test_a_workspace_that_cannot_fit_on_the_disk_is_refused_before_anything_is_written(agent):
    blob = b"x" * (4 << 20)
    sha = hashlib.sha256(blob).hexdigest()
    free = shutil.disk_usage(agent.data_dir).free
    copies = free // len(blob) + 2  # one blob, named as many times as it takes to pass the free space
    if copies > 150_000:
        pytest.skip(f"{free} bytes free: too many paths for one SubmitJob to exceed it")
    files = [FileEntry(f"d/{k}.bin", sha, len(blob)) for k in range(copies)]

    async def go() -> str:
        async with await open_session(agent) as s:
            await s.put_blobs(iter([PutBlob(sha, 0, len(blob), blob)]), 1)
            with pytest.raises(LanpoolError) as refused:
                await s.submit(SubmitJob(job_id="fill", run_name="r", workflow="w", commands=["true"], files=files))
            return refused.value.message

    message = asyncio.run(go())
    assert "the workspace needs" in message and "to spare" in message and "\n" not in message
    assert not (agent.data_dir / "jobs" / "fill").exists()
    assert agent.proc.poll() is None


def _staging(job_id: str, sha: str, size: int, copies: int, cpu: float = 1) -> SubmitJob:
    files = [FileEntry(f"d/{k}.bin", sha, size) for k in range(copies)]
    return SubmitJob(
        job_id=job_id,
        run_name="r",
        workflow="w",
        commands=["sleep 60"],
        resources={"cpu": cpu},
        files=files,
        detached=True,
    )


def test_one_controller_cannot_fill_the_disk_with_staged_workspaces(tmp_path, controller_home):
    """The bytes one controller's unfinished jobs staged are bounded; another's are not counted
    against it, and an ended job's no longer count."""
    agent = start_agent(
        tmp_path / "agent", controller_home, extra_env=ALL_CPUS, extra_args=["--max-staged-per-controller", "10M"]
    )
    blob = b"s" * (4 << 20)
    sha = hashlib.sha256(blob).hexdigest()
    try:
        other = _second_controller(tmp_path, agent)

        async def go() -> str:
            async with (
                await open_session(agent) as a,
                await RunnerSession.open(agent.host, agent.port, other, None) as b,
            ):
                for s in (a, b):
                    await s.put_blobs(iter([PutBlob(sha, 0, len(blob), blob)]), 1)
                await a.submit(_staging("holds-all", sha, len(blob), 2, cpu=2))  # 8 MiB, running
                await wait_state(a, "holds-all", {"RUNNING"})
                with pytest.raises(LanpoolError) as refused:
                    await a.submit(_staging("one-more", sha, len(blob), 1))  # 12 MiB in all
                assert (await a.submit(_staging("no-files", sha, len(blob), 0))).state == "QUEUED"
                # Per controller: another one's workspaces are its own to count.
                assert (await b.submit(_staging("theirs", sha, len(blob), 2))).state == "QUEUED"
                await a.stop("holds-all", abort=True, grace_s=0)
                await wait_state(a, "holds-all", {"ABORTED"})
                # What an ended job staged no longer counts.
                assert (await a.submit(_staging("one-more", sha, len(blob), 1))).state in {"QUEUED", "RUNNING"}
                for job_id in ("no-files", "one-more"):
                    await a.stop(job_id, abort=True, grace_s=0)
                await b.stop("theirs", abort=True, grace_s=0)
                return refused.value.message

        message = asyncio.run(go())
        assert "this job stages 4.0 MiB and your unfinished jobs here already hold 8.0 MiB" in message
        assert "at most 10.0 MiB per controller" in message and "\n" not in message
        assert agent.proc.poll() is None
    finally:
        agent.stop()


def test_a_bad_staged_bound_is_one_line(tmp_path):
    for value in ("lots", "0"):
        done = subprocess.run(
            [*APP_MODULE, "agent", "serve", "--data-dir", str(tmp_path / "a"), "--max-staged-per-controller", value],
            env=lanpool_env(tmp_path / "c"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "--max-staged-per-controller" in done.stderr and "Traceback" not in done.stderr
