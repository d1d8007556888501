"""A job is not started while its workspace is still being staged, even when the queue
is pumped meanwhile (another job ending does that).

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


def _node0(job_id: str, working_dir: str = ".") -> SubmitJob:
    return SubmitJob(
        job_id=job_id,
        run_name="r",
        workflow="w",
        commands=["cat data.txt"],  # fails if started before its workspace is whole
        files=[FileEntry("data.txt", SHA, len(DATA))],
        working_dir=working_dir,
    )


async def _ended(manager: JobManager, job_id: str) -> Job:
    job = manager.jobs[job_id]
    await asyncio.wait_for(manager.wait_terminal(job), 30)
    return job


def test_a_plain_job_is_not_started_by_a_pump_while_it_stages(held_staging):
    # The race this closed for every job, not only a gang's node 0: another job ending pumps
    # the queue while this one's files are still being placed.
    async def scenario(root: Path) -> None:
        manager = await _manager(root)
        submitting = asyncio.ensure_future(manager.submit(_node0("single"), None))
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
