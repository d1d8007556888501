"""Submitting a job to its runners: the blobs each lacks, then SubmitJob to every node
(node k = session k), all at once. The job is in the store before anything is sent, so
a crash here loses nothing; a node that fails to accept stops every node that did (none
may run alone).

A job on several runners is a gang whichever way it is run (followed or `-d`): its runners
start its nodes together, retry them together and stop them together (agent/gang/hub.py);
node 0's agent picks MASTER_PORT when every node is reserved. The controller only submits
and follows.
"""

import asyncio
import secrets
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import asyncssh

from lanpool.app.errors import BlobsMissing, LanpoolError, RunnerError, RunnerProtocolError
from lanpool.app.jobs.multinode import node_env
from lanpool.app.jobs.remote import JobServices, Launch, NodeAt, RemoteJob, Say
from lanpool.app.runners.client import RunnerSession
from lanpool.app.secret_store import masked_values, reveal
from lanpool.app.store import Store
from lanpool.app.transfer.uploads import upload
from lanpool.protocol import GangSpec, JobAccepted, JobState, JobStatus, SubmitJob

T = TypeVar("T")


async def submit_job(
    jobs: JobServices,
    launch: Launch,
    sessions: list[RunnerSession],
    addresses: list[str],
    say: Say,
    after: list[str] | None = None,
    run_key: str = "",
    detached: bool = False,
) -> tuple[RemoteJob, JobStatus]:
    """Submit the job to every session (node k = sessions[k]); returns it and node 0's status.
    The job is in the store before it is sent, so a crash here loses nothing. `after` and
    `run_key`: a detached DAG's step, started by its runner once those jobs are DONE (agent.jobs.dag).
    Several sessions: a gang, whose runners start it together (agent.gang.hub)."""
    job, job_id, store = launch.job, launch.job_id, jobs.store
    runners = [store.known_runner(s.hello.name) for s in sessions]
    # One session for several nodes: a Slurm runner runs them all as one allocation (app/runs/slurm_placement.py).
    resources = {**job.resources, "nodes": job.nodes} if len(sessions) == 1 and job.nodes > 1 else job.resources
    spec = {
        "commands": job.commands,
        "env": job.env,
        "artifacts": job.artifacts,
        "image": job.image,
        "python": job.python,
        "requirements": job.requirements,
        "ports": job.ports,
        "working_dir": job.working_dir,
        "snapshot": launch.snapshot_digest,
        "resources": resources,
        "nodes": len(sessions),
        "runners": [r["name"] for r in runners],
    }
    if after:
        spec["after"] = after
    if job.passed_env:  # the names: the values go to the runners only
        spec["passed_env"] = job.passed_env
    if job.port_count:
        spec["port_count"] = job.port_count
    store.create_job(job_id, launch.run_name, job.workflow, runners[0], spec, launch.cache_key, launch.cache_inputs)
    gang = RemoteJob(jobs, job_id, [NodeAt(k, r["name"], r["host"], r["port"]) for k, r in enumerate(runners)])
    gang_specs = _gang_specs(job_id, runners, addresses) if gang.parts > 1 else []
    accepted_by: set[int] = set()  # the nodes whose runner has the job

    async def send(node: int, session: RunnerSession) -> tuple[JobAccepted, JobStatus]:
        env = dict(job.env) if gang.parts == 1 else node_env(job, node, addresses)
        # Secrets go in here only: the stored spec above keeps their placeholders. A passed
        # `- NAME` never overrides lanpool's own (a gang's MASTER_ADDR, RANK, ...).
        env = {**launch.passed, **reveal(env, launch.secrets)}
        await upload(session, launch.files, say)
        if not detached:  # the log is followed next: its channel opens while the runner starts the job
            session.open_channel_soon()
        request = SubmitJob(
            job_id=job_id,
            run_name=launch.run_name,
            workflow=job.workflow,
            commands=job.commands,
            env=env,
            artifacts=(job.artifacts if node == 0 else []) + job.artifacts_all_nodes,
            files=launch.files.entries,
            working_dir=job.working_dir,
            image=job.image,
            image_implicit=job.image_implicit,
            hold_base=job.hold_base,
            pull=job.pull,
            resources=resources,
            executor=job.executor,
            python=job.python,
            requirements=job.requirements,
            ports=job.ports,
            port_count=job.port_count,
            masked=masked_values([*launch.secrets.values(), *launch.passed.values()]),
            max_duration_s=job.max_duration_s,
            retry_on=job.retry_on,
            retry_limit=job.retry_limit,
            retry_delay_s=job.retry_delay_s,
            after=list(after or []),
            run_key=run_key,
            gang=gang_specs[node] if gang_specs else None,
            detached=detached,
            priority=job.priority,
            idle_s=job.idle_s,
        )
        try:
            accepted, status = await session.submit_accepted(request)
        except BlobsMissing as exc:
            # A blob was evicted, or found damaged and removed, since the runner said it had it:
            # the runner kept nothing of the job; its HaveBlobs now lists what to send again.
            say(f"{exc.message.removesuffix(' (send it again)')}: sending it again")
            await upload(session, launch.files, say)
            accepted, status = await session.submit_accepted(request)
        if accepted.job_id != job_id or status.job_id != job_id:
            raise RunnerProtocolError(
                f"runner {runners[node]['name']} answered for job {status.job_id!r} when sent job {job_id}"
            )
        accepted_by.add(node)
        gang._note(node, status)
        return accepted, status

    try:  # the nodes need nothing of each other here: all sent at once
        answers = await _all_or_first_error(*(send(k, s) for k, s in enumerate(sessions)))
        statuses = [status for _, status in answers]
        if job.port_count:  # the ports node 0's runner picked: what `ports` and `run` forward
            # As many as were asked, at most: a runner's answer is never a reason to open more listeners here.
            store.set_job_ports(job_id, sorted(set(answers[0][0].ports))[: len(job.ports) + job.port_count])
        for node in range(gang.parts if gang.parts > 1 else 0):
            say(f"node {node}: runner {runners[node]['name']} ({addresses[node]})")
    except (LanpoolError, OSError, asyncssh.Error) as exc:
        message = getattr(exc, "message", None) or str(exc)
        for session in sessions:  # whatever started must not run alone
            try:
                await session.stop(job_id, abort=True, grace_s=None)
            except LanpoolError:
                pass
        # synced: nothing more will come from the runners for this job
        store.set_job_status(
            job_id, JobState.FAILED, f"submit failed: {message}", error=message, finished_at=time.time(), synced=1
        )
        where = sessions[0].where if gang.parts == 1 else f"all {gang.parts} nodes"
        raise RunnerError(f"could not submit to {where}: {message}") from None
    except asyncio.CancelledError:  # Ctrl-C: what no runner has is marked at once, none left half-sent
        await _interrupted(store, job_id, sessions, accepted_by)
        raise
    if gang.parts > 1:
        waiting = [(k, n) for k, n in enumerate(statuses) if n.state == JobState.QUEUED]
        if waiting:  # a gang waits in its runners' queues until all can start
            k, node_status = waiting[0]
            reason = f"gang of {gang.parts}: node {k} waits" + (
                f" ({node_status.reason})" if node_status.reason else ""
            )
            store.set_job_status(job_id, JobState.QUEUED, f"on {gang.parts} nodes", error=reason)
        else:
            store.set_job_status(job_id, JobState.RUNNING, f"on {gang.parts} nodes", started_at=time.time())
    return gang, statuses[0]


async def _interrupted(store: Store, job_id: str, sessions: list[RunnerSession], accepted_by: set[int]) -> None:
    """A submit cut short: a job no runner took ends ABORTED now (never SUBMITTED for good); a gang
    some of whose nodes were sent has those stopped (none may wait alone). A job every node has
    runs there: `stop` reaches it."""
    if len(accepted_by) == len(sessions):
        return
    why = "interrupted before it reached a runner" if not accepted_by else "interrupted while its nodes were sent"
    store.set_job_status(job_id, JobState.ABORTED, why, error=why, finished_at=time.time(), synced=1)
    for node in sorted(accepted_by):
        try:
            await asyncio.wait_for(sessions[node].stop(job_id, abort=True, grace_s=None), 5)
        except (LanpoolError, TimeoutError):
            pass


async def _all_or_first_error(*steps: Awaitable[T]) -> list[T]:
    """Every step run at once and each let finish (none is left running unseen); the first error raised."""
    answers = await asyncio.gather(*steps, return_exceptions=True)
    for failed in (a for a in answers if isinstance(a, BaseException)):
        raise failed
    return [a for a in answers if not isinstance(a, BaseException)]


def _gang_specs(job_id: str, runners: list[dict[str, Any]], addresses: list[str]) -> list[GangSpec]:
    """Each node's part of a detached gang: node 0's agent (as this controller reaches it, with
    the host key pinned here) coordinates, the others meet it there with a token drawn now."""
    token, order = secrets.token_urlsafe(32), time.time()
    host = addresses[0]
    coordinator = f"[{host}]:{runners[0]['port']}" if ":" in host else f"{host}:{runners[0]['port']}"
    return [
        GangSpec(job_id, len(runners), rank, coordinator, str(runners[0]["host_key"]), token, order)
        for rank in range(len(runners))
    ]
