"""A gang's node 0 answers with its MASTER_PORT before its workspace is staged:
the other nodes are sent sooner, but the job itself starts only once its files are
whole, a staging failure still fails it, and a stop while it stages is kept.

In-process JobManager with the real ProcessExecutor; staging is held on an event
(the real staging runs once released), so "before" and "after" are not timing."""

import asyncio
import hashlib
import tempfile
from pathlib import Path

import pytest

import lanpool.agent.jobs.manager as manager_module
from lanpool.agent.executors import ExecutorChoice, ProcessExecutor
from lanpool.agent.home import AgentHome
from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.manager import JobManager
from lanpool.protocol import FileEntry, JobState, SubmitJob

DATA = b"whole\n"
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def held_staging(monkeypatch):
    """stage_workspace waits for the returned event, then stages for real."""
    release = asyncio.Event()
    real = manager_module.stage_workspace

    async def held(*args, **kwargs):
        await release.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(manager_module, "stage_workspace", held)
    return release


async def _manager(root: Path) -> JobManager:
    home = AgentHome(root)
    home.create()
    manager = JobManager(home, ExecutorChoice("process", ProcessExecutor()))
    await manager.load_journal()
    manager.blobs.create()
    part = manager.blobs.begin(SHA, len(DATA))
    assert manager.blobs.write(part, 0, len(DATA), DATA)
    return manager


def _node0(job_id: str, working_dir: str = ".", pick: bool = True) -> SubmitJob:
    return SubmitJob(
        job_id=job_id,
        run_name="r",
        workflow="w",
        commands=["cat data.txt"],  # fails if started before its workspace is whole
        files=[FileEntry("data.txt", SHA, len(DATA))],
        working_dir=working_dir,
        pick_master_port=pick,
    )


async def _ended(manager: JobManager, job_id: str) -> Job:
    job = manager.jobs[job_id]
    await asyncio.wait_for(manager.wait_terminal(job), 30)
    return job


def test_node0_answers_before_staging_and_starts_only_once_staged(held_staging):
    async def scenario(root: Path) -> None:
        manager = await _manager(root)
        job = await asyncio.wait_for(manager.submit(_node0("gang0"), None), 5)  # answered: staging still held
        assert job.record.master_port > 0 and job.record.state == JobState.QUEUED
        # The attack: the queue is pumped meanwhile (another job ending does that); the job must not start early.
        manager._pump()
        await asyncio.sleep(0.3)
        assert job.record.state == JobState.QUEUED and job.starting is None and job.execution is None
        held_staging.set()
        ended = await _ended(manager, "gang0")
        assert ended.record.state == JobState.DONE, ended.record.error
        assert b"whole" in b"".join(r.data for r in ended.spool.read(0))
        assert ended.record.master_port == job.record.master_port  # the port it answered with is the one it got

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp)))


def test_node0_whose_staging_fails_after_answering_ends_failed(held_staging):
    async def scenario(root: Path) -> None:
        manager = await _manager(root)
        job = await manager.submit(_node0("gang0", working_dir="no-such-dir"), None)
        assert job.record.master_port > 0 and not job.record.terminal  # answered before the failure
        held_staging.set()
        ended = await _ended(manager, "gang0")
        assert ended.record.state == JobState.FAILED
        assert "working_dir 'no-such-dir' is not a directory" in ended.record.error
        assert ended.execution is None  # never started

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp)))


def test_a_job_that_is_no_gang_node0_still_answers_once_staged(held_staging):
    # The control: without pick_master_port the answer waits for the staging (and says FAILED).
    async def scenario(root: Path) -> None:
        manager = await _manager(root)
        held_staging.set()
        job = await manager.submit(_node0("single", working_dir="no-such-dir", pick=False), None)
        assert job.record.state == JobState.FAILED and job.record.master_port == 0

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp)))


def test_node0_stopped_while_staging_never_starts(held_staging):
    async def scenario(root: Path) -> None:
        manager = await _manager(root)
        await manager.submit(_node0("gang0"), None)
        manager.stop(
            "gang0", abort=True, grace_s=None, owner=None
        )  # the controller aborting a gang whose node 1 failed
        job = await _ended(manager, "gang0")
        assert job.record.state == JobState.ABORTED
        held_staging.set()
        await asyncio.sleep(0.5)  # the staging finishes now: it must neither start nor re-settle the job
        assert job.record.state == JobState.ABORTED and job.execution is None and job.starting is None
        assert not manager._staging

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp)))


def test_a_plain_job_is_not_started_by_a_pump_while_it_stages(held_staging):
    # The race this closed for every job, not only a gang's node 0: another job ending pumps
    # the queue while this one's files are still being placed.
    async def scenario(root: Path) -> None:
        manager = await _manager(root)
        submitting = asyncio.ensure_future(manager.submit(_node0("single", pick=False), None))
        await asyncio.sleep(0.3)
        job = manager.jobs["single"]
        manager._pump()
        await asyncio.sleep(0.3)
        assert job.record.state == JobState.QUEUED and job.starting is None and job.execution is None
        held_staging.set()
        await asyncio.wait_for(submitting, 10)
        ended = await _ended(manager, "single")
        assert ended.record.state == JobState.DONE, ended.record.error
        assert b"whole" in b"".join(r.data for r in ended.spool.read(0))

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp)))
