"""Submitting a job to its runners: the blobs each lacks, then SubmitJob to every node
(node k = session k), node 0 first so the others learn its MASTER_PORT (a detached
gang's nodes, which learn it at Go, all at once). The job is in the store before
anything is sent, so a crash here loses nothing; a node that fails to accept stops
every node that did (none may run alone).

A gang's start waits for its last node (the rendezvous), so nothing on the way to
node N-1 waits for what need not: every node's blobs go up at once, node 0 is sent
once its own are up, and node 0's runner answers once it picked the port, before it
even stages the workspace (agent/jobs/manager.py); a node that then fails to start fails
the gang in follow.
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
    `detached` with several nodes: a detached gang, whose runners start it together (agent.gang.hub)."""
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
    store.create_job(job_id, launch.run_name, job.workflow, runners[0], spec, launch.cache_key, launch.cache_inputs)
    gang = RemoteJob(jobs, job_id, [NodeAt(k, r["name"], r["host"], r["port"]) for k, r in enumerate(runners)])
    first: JobStatus | None = None
    gang_statuses: list[JobStatus] = []  # each node's answer, in node order
    master_port = 0
    gang_specs = _gang_specs(job_id, runners, addresses) if detached and gang.size > 1 else []

    async def send(node: int, session: RunnerSession) -> tuple[JobAccepted, JobStatus]:
        env = dict(job.env) if gang.size == 1 else node_env(job, node, addresses)
        if node and not gang_specs:  # a detached gang's node 0 sends its MASTER_PORT at Go
            env["MASTER_PORT"] = str(master_port)
        # Secrets go in here only: the stored spec above keeps their placeholders.
        env = reveal(env, launch.secrets)
        if gang_specs or gang.size == 1:  # a gang sent one node at a time has its blobs up already
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
            pull=job.pull,
            resources=resources,
            executor=job.executor,
            pick_master_port=(node == 0 and gang.size > 1 and not gang_specs),
            python=job.python,
            requirements=job.requirements,
            ports=job.ports,
            masked=masked_values(launch.secrets.values()),
            max_duration_s=job.max_duration_s,
            retry_on=job.retry_on,
            retry_limit=job.retry_limit,
            retry_delay_s=job.retry_delay_s,
            after=list(after or []),
            run_key=run_key,
            gang=gang_specs[node] if gang_specs else None,
            detached=detached,
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
        return accepted, status

    def noted(node: int, accepted: JobAccepted, status: JobStatus) -> None:
        nonlocal first, master_port
        if node == 0:
            first, master_port = status, accepted.master_port
        gang._note(node, status)
        gang_statuses.append(status)
        if gang.size > 1:
            say(
                f"node {node}: runner {runners[node]['name']} ({addresses[node]})"
                + (f", MASTER_PORT {master_port}" if node == 0 else "")
            )

    try:
        if gang_specs:  # a detached gang's nodes need nothing of each other here: all sent at once
            for node, answer in enumerate(await _all_or_first_error(*(send(k, s) for k, s in enumerate(sessions)))):
                noted(node, *answer)
        elif gang.size == 1:
            noted(0, *await send(0, sessions[0]))
        else:  # node 0 first: the others learn its MASTER_PORT
            # Every node's blobs go up at once; node 0 is sent as soon as its own are there, the
            # others once theirs are and node 0 answered (nothing waits for what it need not).
            uploads = [asyncio.ensure_future(upload(s, launch.files, say)) for s in sessions]
            try:
                await uploads[0]
                noted(0, *await send(0, sessions[0]))
                await _all_or_first_error(*uploads[1:])
            finally:  # none left running unseen (a failure or Ctrl-C above ends the others)
                for pending in uploads:
                    pending.cancel()
                await asyncio.gather(*uploads, return_exceptions=True)
            for node, session in enumerate(sessions[1:], start=1):
                noted(node, *await send(node, session))
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
        where = sessions[0].where if gang.size == 1 else f"all {gang.size} nodes"
        raise RunnerError(f"could not submit to {where}: {message}") from None
    if gang.size > 1:
        waiting = [(k, n) for k, n in enumerate(gang_statuses) if n.state == JobState.QUEUED]
        if gang_specs and waiting:  # a detached gang waits in its runners' queues until all can start
            k, node_status = waiting[0]
            reason = f"gang of {gang.size}: node {k} waits" + (f" ({node_status.reason})" if node_status.reason else "")
            store.set_job_status(job_id, JobState.QUEUED, f"on {gang.size} nodes", error=reason)
        else:
            store.set_job_status(job_id, JobState.RUNNING, f"on {gang.size} nodes", started_at=time.time())
    assert first is not None
    return gang, first


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
