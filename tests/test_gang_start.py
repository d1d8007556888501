"""A gang's start path on real agents (loopback): node 0 answers with its MASTER_PORT
without waiting for its own start (the other nodes are sent only after that answer),
and a node 0 whose start then fails still fails the whole job instead of leaving it
waiting."""

import asyncio
import hashlib
import json

from lanpool.protocol import BlobStored, FileEntry, GetStatus, JobAccepted, JobState, JobStatus, PutBlob, SubmitJob
from tests.harness import write_project
from tests.test_blob_cache import _channel

# pip refuses at once (no index, no such package), but only after its own start-up:
# a start that takes a moment and then fails.
FAILING_REQUIREMENTS = "--no-index\nlanpool-no-such-package-xyz\n"


async def _submit(agent, job_id: str, pick_master_port: bool) -> tuple[JobAccepted, JobStatus, JobStatus]:
    """The answer to a SubmitJob whose start fails in pip, and the job's status once it ended."""
    data = FAILING_REQUIREMENTS.encode()
    sha = hashlib.sha256(data).hexdigest()
    conn, chan = await _channel(agent)
    async with conn:
        chan.send(PutBlob(sha, 0, len(data), data))
        assert await chan.recv() == BlobStored(sha)
        chan.send(
            SubmitJob(
                job_id,
                "r",
                "w",
                ["echo started"],
                files=[FileEntry("req.txt", sha, len(data))],
                requirements="req.txt",
                pick_master_port=pick_master_port,
            )
        )
        accepted, answered = await chan.recv(), await chan.recv()
        assert isinstance(accepted, JobAccepted) and isinstance(answered, JobStatus)
        for _ in range(300):
            chan.send(GetStatus(job_id))
            ended = await chan.recv()
            assert isinstance(ended, JobStatus)
            if JobState(ended.state).is_terminal():
                return accepted, answered, ended
            await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} never ended")


def test_node0_of_a_gang_answers_with_its_port_before_its_start(agent):
    accepted, answered, ended = asyncio.run(_submit(agent, "gang0", pick_master_port=True))
    assert accepted.master_port > 0
    assert not JobState(answered.state).is_terminal(), answered  # answered while pip still ran
    # The start's failure is not lost by answering early: the job ends FAILED with pip's reason.
    assert ended.state == JobState.FAILED and "pip install -r req.txt failed" in ended.error


def test_a_job_that_is_no_gang_node0_still_answers_once_started(agent):
    # The control: without pick_master_port the answer waits for the start (and so says FAILED).
    accepted, answered, _ended = asyncio.run(_submit(agent, "single", pick_master_port=False))
    assert accepted.master_port == 0
    assert answered.state == JobState.FAILED and "pip install -r req.txt failed" in answered.error


def test_a_gang_whose_node0_fails_to_start_after_answering_fails_the_run(two_agents, cli, tmp_path):
    project = write_project(
        tmp_path / "project",
        """
workflows:
  - name: gang
    nodes: 2
    provider: python
    requirements: req.txt
    script: hello.py
""",
        {"req.txt": FAILING_REQUIREMENTS, "hello.py": "import os\nprint('rank', os.environ['NODE_RANK'], 'started')\n"},
    )
    res = cli("headless", "run", "gang", cwd=project, timeout=120)
    assert res.returncode != 0, res.stdout
    assert "started" not in res.stdout  # neither node ran its commands
    [latest] = json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout)
    [job] = latest["jobs"]
    assert job["status"] == "FAILED", job
