"""The controller's side of a gang's submit (app/jobs/submit.py): every node is sent at
once as a member of one gang (its runners start it: agent/gang/hub.py); a node whose
upload or submit fails stops every node that was sent (none may run alone). A real
SQLite store; the runners are stand-ins that record what they are sent."""

import asyncio
import types

import pytest

import lanpool.app.jobs.submit as submit_module
from lanpool.app.errors import RunnerError
from lanpool.app.jobs.remote import JobServices, Launch
from lanpool.app.jobs.submit import submit_job
from lanpool.app.store import Store
from lanpool.app.transfer.uploads import WorkspaceFiles
from lanpool.protocol import JobAccepted, JobState, JobStatus, SubmitJob


class Runner:
    """A runner session that answers every SubmitJob at once and records what it got."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.hello = types.SimpleNamespace(name=name)
        self.where = f"runner {name}"
        self.log = log
        self.sent: list[SubmitJob] = []
        self.stopped: list[tuple[str, bool]] = []

    def open_channel_soon(self) -> None:
        pass

    async def submit_accepted(self, req: SubmitJob) -> tuple[JobAccepted, JobStatus]:
        self.log.append(f"submit {self.hello.name}")
        self.sent.append(req)
        return JobAccepted(req.job_id, "/w"), JobStatus(req.job_id, JobState.RUNNING.value)

    async def stop(self, job_id: str, abort: bool, grace_s: float | None) -> JobStatus:
        self.stopped.append((job_id, abort))
        return JobStatus(job_id, JobState.ABORTED.value)


def _job() -> types.SimpleNamespace:
    return types.SimpleNamespace(
        commands=["train"],
        env={},
        artifacts=[],
        artifacts_all_nodes=[],
        image=None,
        pull="missing",
        python=None,
        requirements=None,
        ports=[],
        port_count=0,
        passed_env=[],
        working_dir=".",
        resources={},
        nodes=2,
        workflow="w",
        executor=None,
        max_duration_s=0,
        retry_on=[],
        retry_limit=0,
        retry_delay_s=0,
        image_implicit=False,
        hold_base=True,
        priority=0,
        idle_s=0.0,
    )


@pytest.fixture
def gang(tmp_path):
    store = Store(tmp_path / "lanpool.db")
    store.create_run("r1", "w", str(tmp_path), None, {})
    log: list[str] = []
    runners = [Runner(f"n{k}", log) for k in range(2)]
    for k, r in enumerate(runners):
        store.upsert_runner(r.hello.name, "127.0.0.1", 7000 + k, "ssh-ed25519 AAAA", trusted=True)
    jobs = JobServices(store, lambda: None, None, lambda _r, _a: None)  # type: ignore[arg-type]
    launch = Launch("j1", "r1", _job(), WorkspaceFiles())  # type: ignore[arg-type]
    return types.SimpleNamespace(store=store, runners=runners, log=log, jobs=jobs, launch=launch)


def _submit(g):
    return submit_job(g.jobs, g.launch, g.runners, ["127.0.0.1", "127.0.0.1"], lambda _t: None)


def test_every_node_is_sent_as_a_gang_member_without_waiting_for_node0(gang, monkeypatch):
    """Followed or detached, the runners start the gang (agent/gang/hub.py): each node gets its
    rank, one token and node 0's agent as coordinator; none waits for another's answer."""

    async def upload(session, files, say):
        gang.log.append(f"upload {session.hello.name}")
        if session.hello.name == "n0":  # node 0's upload ends only once node 1 was sent
            while "submit n1" not in gang.log:
                await asyncio.sleep(0.01)
        return 0

    monkeypatch.setattr(submit_module, "upload", upload)
    _remote, first = asyncio.run(asyncio.wait_for(_submit(gang), 10))
    assert gang.log.index("submit n1") < gang.log.index("submit n0")
    n0, n1 = (r.sent[0] for r in gang.runners)
    assert n0.gang is not None and n1.gang is not None
    assert (n0.gang.gang_rank, n1.gang.gang_rank) == (0, 1) and n0.gang.gang_token == n1.gang.gang_token
    assert n0.gang.coordinator == n1.gang.coordinator == "127.0.0.1:7000" and not n0.detached
    assert "MASTER_PORT" not in n1.env and n1.env["NODE_RANK"] == "1"  # node 0's agent sends it at Go
    assert gang.store.job("j1").state is JobState.RUNNING and first.state == JobState.RUNNING.value


def test_a_node_whose_upload_fails_after_node0_was_sent_stops_node0(gang, monkeypatch):
    async def upload(session, files, say):
        if session.hello.name == "n1":
            while "submit n0" not in gang.log:
                await asyncio.sleep(0.01)
            raise OSError("disk full on n1")
        return 0

    monkeypatch.setattr(submit_module, "upload", upload)
    with pytest.raises(RunnerError, match="could not submit to all 2 nodes: disk full on n1"):
        asyncio.run(asyncio.wait_for(_submit(gang), 10))
    assert gang.runners[0].sent and not gang.runners[1].sent  # node 1 never started
    assert ("j1", True) in gang.runners[0].stopped  # node 0 does not run alone
    row = gang.store.job("j1")
    assert row.state is JobState.FAILED and "disk full on n1" in (row.error or "")


def test_node0s_failed_upload_leaves_no_node_running(gang, monkeypatch):
    async def upload(session, files, say):
        if session.hello.name == "n0":
            raise OSError("n0 unreachable")
        await asyncio.sleep(0.2)  # still going when node 0's fails: ended, not left running
        return 0

    monkeypatch.setattr(submit_module, "upload", upload)
    with pytest.raises(RunnerError, match="n0 unreachable"):
        asyncio.run(asyncio.wait_for(_submit(gang), 10))
    assert not gang.runners[0].sent
    assert all(("j1", True) in r.stopped for r in gang.runners if r.sent)  # node 1, if sent, is stopped
    assert gang.store.job("j1").state is JobState.FAILED
