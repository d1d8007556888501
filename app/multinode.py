"""Multi-node jobs: one job on N runners at once (gang placement), wired for
torch.distributed / Lightning, followed as one stream, failed as one.

Env on every node: MASTER_ADDR (node 0's address as this controller reaches
it), MASTER_PORT (a free port picked by node 0's agent), NODE_RANK, and the
LANPOOL_* names of DESIGN.md. LOCAL_RANK, WORLD_SIZE and TORCHELASTIC_RUN_ID are
never set: Lightning hangs or ignores them (FINDINGS.md).
"""

import asyncio
import time

import asyncssh

from app.errors import LanpoolError, RunnerError
from app.runner_client import RunnerSession
from app.store import JobRow
from app.workflows.resolve import ResolvedJob
from protocol import JobState, JobStatus, LogChunk, SubmitJob


def node_env(job: ResolvedJob, node: int, addresses: list[str]) -> dict[str, str]:
    env = {
        "MASTER_ADDR": addresses[0],
        "NODE_RANK": str(node),
        "LANPOOL_NODE_RANK": str(node),
        "LANPOOL_NUM_NODES": str(len(addresses)),
        "LANPOOL_NODES_IPS": ",".join(addresses),
        "LANPOOL_GPUS_PER_NODE": str(job.resources.get("gpu", 0)),
        "LANPOOL_MASTER_ADDR": addresses[0],
        "LANPOOL_NODE_ADDR": addresses[node],
    }
    if len(set(addresses)) < len(addresses):
        # Several nodes share a machine: one thread each, or training crawls (FINDINGS.md).
        env["OMP_NUM_THREADS"] = "1"
    return {**env, **{k: v for k, v in job.env.items()}}


def prefix_node(node: int, data: bytes) -> bytes:
    tag = f"[node {node}] ".encode()
    return b"".join(tag + line for line in data.splitlines(keepends=True))


async def run_gang(ctl, job: ResolvedJob, job_id: str, run_name: str, planned, sessions: list[RunnerSession],
                   addresses: list[str], snapshot, inputs_of, sink, say) -> JobRow:
    """Submit `job` to every session (node k = sessions[k]) and follow it to the end."""
    runners = [ctl.store.runner(s.hello.name) for s in sessions]
    spec = {"commands": job.commands, "env": job.env, "artifacts": job.artifacts, "image": job.image,
            "nodes": job.nodes, "runners": [r["name"] for r in runners], "snapshot": snapshot.sha256}
    ctl.store.create_job(job_id, run_name, job.workflow, runners[0], spec, planned.key, planned.inputs)
    master_port = 0
    try:
        for node, session in enumerate(sessions):
            env = node_env(job, node, addresses)
            if node:
                env["MASTER_PORT"] = str(master_port)
            remote = f"snapshots/{snapshot.name}"
            await session.upload(snapshot.data, remote)
            artifacts = job.artifacts if node == 0 else []
            accepted, status = await session.submit_accepted(SubmitJob(
                job_id=job_id, run_name=run_name, workflow=job.workflow, commands=job.commands, env=env,
                artifacts=artifacts + job.artifacts_all_nodes, snapshot=remote, working_dir=job.working_dir,
                inputs=await inputs_of(session), image=job.image, pull=job.pull, resources=job.resources,
                executor=job.executor, pick_master_port=(node == 0)))
            if node == 0:
                master_port = accepted.master_port
            ctl.store.set_node(job_id, node, runners[node], status.state, status.exit_code, status.error)
            say(f"node {node}: runner {runners[node]['name']} ({addresses[node]})"
                + (f", MASTER_PORT {master_port}" if node == 0 else ""))
    except (LanpoolError, OSError, asyncssh.Error) as exc:
        message = getattr(exc, "message", None) or str(exc)
        for node, session in enumerate(sessions):  # whatever started must not run alone
            try:
                await session.stop(job_id, abort=True, grace_s=None)
            except LanpoolError:
                pass
        ctl.store.set_job_status(job_id, JobState.FAILED, f"submit failed: {message}", error=message,
                                 finished_at=time.time(), synced=1)
        raise RunnerError(f"could not start all {len(sessions)} nodes: {message}") from None
    ctl.store.set_job_status(job_id, JobState.RUNNING, f"on {len(sessions)} nodes", started_at=time.time())
    return await _follow_gang(ctl, job_id, sessions, runners, sink, say)


async def _follow_node(ctl, job_id: str, node: int, session: RunnerSession, sink) -> JobStatus:
    async for batch in session.attach(job_id, ctl.store.log_end(job_id, node), follow=True):
        rows = [(m.job_id, node, m.seq, m.n_lines, m.stream, m.data) for m in batch if isinstance(m, LogChunk)]
        if rows:
            ctl.store.add_log_chunks(rows)
            if sink:
                for row in rows:
                    sink(job_id, row[4], row[5] if row[4] == "met" else prefix_node(node, row[5]))
        if isinstance(batch[-1], JobStatus) and JobState(batch[-1].state).is_terminal():
            return batch[-1]
    raise RunnerError(f"node {node}: the log stream ended before the job")


async def _follow_gang(ctl, job_id: str, sessions: list[RunnerSession], runners: list[dict], sink, say) -> JobRow:
    tasks = {asyncio.ensure_future(_follow_node(ctl, job_id, k, s, sink)): k for k, s in enumerate(sessions)}
    finals: dict[int, JobStatus | None] = {}
    failure = ""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            node = tasks[task]
            try:
                status = task.result()
            except LanpoolError as exc:
                status, cause = None, f"runner {runners[node]['name']} lost: {exc.message}"
            else:
                cause = "" if status.state == JobState.DONE else (
                    status.error or f"{status.state.lower()} with exit code {status.exit_code}")
            finals[node] = status
            ctl.store.set_node(job_id, node, runners[node], status.state if status else JobState.LOST,
                               status.exit_code if status else None, cause)
            if cause and not failure:
                failure = f"node {node} ({runners[node]['name']}): {cause}"
                say(f"{failure}; stopping the other nodes")
                for other in pending:
                    k = tasks[other]
                    try:
                        await sessions[k].stop(job_id, abort=False, grace_s=None)
                    except LanpoolError as exc:
                        say(f"could not stop node {k}: {exc.message}")
    first = finals.get(0)
    if first is not None and not failure:
        await ctl._pull_artifacts(sessions[0], job_id, first)
    elif first is not None and first.artifacts_archive:
        await ctl._pull_artifacts(sessions[0], job_id, first)
    codes = [s.exit_code for s in finals.values() if s is not None and s.exit_code]
    state = JobState.FAILED if failure else JobState.DONE
    ctl.store.set_job_status(job_id, state, failure, error=failure or None,
                             exit_code=(codes[0] if codes else (1 if failure else 0)),
                             finished_at=time.time(), synced=1)
    return ctl.store.job(job_id)
