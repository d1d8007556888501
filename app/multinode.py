"""Multi-node jobs: one job on N runners at once (gang placement), wired for
torch.distributed / Lightning, followed as one stream, failed as one.

Env on every node: MASTER_ADDR (node 0's address as this controller reaches
it), MASTER_PORT (a free port picked by node 0's agent), NODE_RANK, and the
LANPOOL_* names of DESIGN.md. LOCAL_RANK, WORLD_SIZE and TORCHELASTIC_RUN_ID are
never set: Lightning hangs or ignores them (FINDINGS.md).
"""

import asyncio
import json
import logging
import secrets
import shutil
import time
from pathlib import Path

import asyncssh

from app.artifact_files import ArtifactsRefused, archive_limit, checked_declared, ensure_room, extract_archive
from app.errors import LanpoolError, RunnerError, RunnerProtocolError, UsageError
from app.runner_client import RunnerSession
from app.store import JobRow
from app.workflows.resolve import ResolvedJob
from protocol import JobState, JobStatus, LogChunk, SubmitJob

log = logging.getLogger(__name__)

REFUSED_LINE = "artifacts refused"  # starts the stored line saying why a job's artifacts were not taken


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


class OwnOutput:
    """What a runner may write while followed for node `node` of job `job_id`: that
    node's log lines and that job's status, nothing else.

    Lines for another job, or for another node (agents leave `node` at 0: a runner
    knows its part only as "mine"), are dropped, with one warning per follow. A
    status for another job ends the follow: the runner is not answering the question.
    """

    def __init__(self, job_id: str, node: int, where: str) -> None:
        self.job_id = job_id
        self.node = node
        self.where = where
        self.dropped = 0

    def take(self, batch: list) -> tuple[list[tuple], JobStatus | None]:
        """Store rows (job_id, node, seq, n_lines, stream, data) of the batch's own chunks,
        and its final status (None if the batch does not end with one)."""
        rows = []
        for m in batch:
            if not isinstance(m, LogChunk):
                continue
            if m.job_id != self.job_id or m.node not in (0, self.node):
                if not self.dropped:
                    log.warning("%s sent log lines for job %r node %d while followed for job %s node %d: "
                                "dropped (a runner writes only its own job's log)", self.where, m.job_id[:64],
                                m.node, self.job_id, self.node)
                self.dropped += 1
                continue
            rows.append((self.job_id, self.node, m.seq, m.n_lines, m.stream, m.data))
        final = batch[-1] if batch and isinstance(batch[-1], JobStatus) else None
        if final is not None and final.job_id != self.job_id:
            raise RunnerProtocolError(f"{self.where} sent the status of job {final.job_id[:64]!r} while followed "
                                      f"for job {self.job_id}")
        return rows, final


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
            if accepted.job_id != job_id or status.job_id != job_id:
                raise RunnerProtocolError(f"runner {runners[node]['name']} answered for job {status.job_id!r} "
                                          f"when sent job {job_id}")
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


async def _follow_node(ctl, job_id: str, node: int, session: RunnerSession, sink, *, start: int | None = None,
                       follow: bool = True, shown: bool = True) -> JobStatus:
    """Store node `node`'s log from `start` (default: where the store ends) and pass it to
    `sink` tagged `[node K]` (when `shown`); returns its final status (with follow=False:
    its status now)."""
    from_seq = ctl.store.log_end(job_id, node) if start is None else start
    own = OwnOutput(job_id, node, session.where)
    async for batch in session.attach(job_id, from_seq, follow=follow):
        rows, final = own.take(batch)
        if rows:
            ctl.store.add_log_chunks(rows)
            if sink and shown:
                for row in rows:
                    sink(job_id, row[4], row[5] if row[4] == "met" else prefix_node(node, row[5]))
        if final is not None and (not follow or JobState(final.state).is_terminal()):
            return final
    raise RunnerError(f"node {node}: the log stream ended before the job")


async def _follow_gang(ctl, job_id: str, sessions: list[RunnerSession], runners: list[dict], sink, say,
                       starts: dict[int, int] | None = None, only_node: int | None = None) -> JobRow:
    """Follow every node to its end; the first to fail stops the others. Then bring back
    the artifacts and record the job's final status."""
    starts = starts or {}
    tasks = {asyncio.ensure_future(_follow_node(ctl, job_id, k, s, sink, start=starts.get(k),
                                                shown=only_node in (None, k))): k
             for k, s in enumerate(sessions)}
    finals: dict[int, JobStatus | None] = {}
    failure = ""
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                node = tasks[task]
                try:
                    status = task.result()
                except RunnerProtocolError as exc:  # it answered, with something unusable
                    status, cause = None, exc.message
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
    finally:
        for task in pending:  # interrupted (Ctrl-C): the nodes keep running on their runners
            task.cancel()
    return await _finish_gang(ctl, job_id, sessions, finals, failure)


async def _finish_gang(ctl, job_id: str, sessions: list[RunnerSession], finals: dict[int, JobStatus | None],
                       failure: str) -> JobRow:
    """All nodes ended: artifacts (node 0's, and each other node's under node-K/), final status."""
    refused = await pull_node_artifacts(ctl, job_id,
                                        [(k, sessions[k], s) for k, s in sorted(finals.items()) if s is not None])
    failure = failure or refused  # what the job declared did not arrive
    codes = [s.exit_code for s in finals.values() if s is not None and s.exit_code]
    state = JobState.FAILED if failure else JobState.DONE
    ended = [s for s in finals.values() if s is None or s.state != JobState.DONE]
    if failure and ended and all(s is not None and s.state in (JobState.STOPPED, JobState.ABORTED) for s in ended):
        # Every node that did not finish was stopped on request (`stop`), none failed.
        state = JobState.ABORTED if any(s.state == JobState.ABORTED for s in ended) else JobState.STOPPED
    ctl.store.set_job_status(job_id, state, failure, error=failure or None,
                             exit_code=(codes[0] if codes else (1 if failure else 0)),
                             finished_at=time.time(), synced=1)
    return ctl.store.job(job_id)


async def stop_gang(ctl, job_id: str, abort: bool, grace_s: float | None) -> list[str]:
    """Ask every node's runner to stop its part of the job, all at once; returns the
    problems (a node whose runner cannot be reached is left to the failure handling)."""
    async def one(row: dict) -> str:
        try:
            async with await ctl.connect(row["host"], row["port"]) as session:
                await session.stop(job_id, abort, grace_s)
            return ""
        except LanpoolError as exc:
            return f"node {row['node']} ({row['runner']}): {exc.message}"

    return [p for p in await asyncio.gather(*(one(r) for r in ctl.store.nodes(job_id))) if p]


def node_prefix(node: int) -> str:
    """Where node K's artifacts go in the job's artifact dir: node 0's at the top, node K's under node-K/."""
    return "" if node == 0 else f"node-{node}/"


async def pull_node_artifacts(ctl, job_id: str, finals: list[tuple[int, RunnerSession, JobStatus]]) -> str:
    """Download each node's packed artifacts into one staging dir (node K > 0 under
    node-K/), then put it in place of the job's artifact dir and list the files.

    Every archive is checked (app/artifact_files.py): one the controller will not
    take refuses the job's artifacts, recorded in the store; the line saying why is
    returned ("" when they were taken, or there were none)."""
    finals = [(k, s, st) for k, s, st in finals if st.artifacts_archive]
    if not finals or ctl.store.job(job_id).artifacts_pulled:
        return ""
    staging = ctl.home.artifacts / f"{job_id}.{secrets.token_hex(4)}.part"
    files: list[tuple[str, int]] = []
    node = finals[0][0]
    try:
        for node, session, status in finals:
            declared = checked_declared(status.artifacts)
            ensure_room(ctl.home.artifacts, declared)
            tar = Path(f"{staging}.node{node}.tar")
            try:
                await session.download(status.artifacts_archive, tar, max_bytes=archive_limit(declared))
                await asyncio.to_thread(extract_archive, tar, staging / node_prefix(node), declared)
            finally:
                tar.unlink(missing_ok=True)
            files += [(node_prefix(node) + path, size) for path, size in declared.items()]
        if ctl.store.job(job_id).artifacts_pulled:  # another follower of this job was quicker
            return ""
        dest = ctl.home.job_artifacts(job_id)
        if dest.exists():
            shutil.rmtree(dest)
        staging.mkdir(exist_ok=True)  # every file was refused or none declared: an empty dir
        staging.rename(dest)
        ctl.store.set_artifacts(job_id, files)
        return ""
    except (ArtifactsRefused, RunnerProtocolError) as exc:
        line = f"{REFUSED_LINE}: " + (f"node {node}: " if len(finals) > 1 or node else "") + exc.message
        log.warning("job %s: %s", job_id, line)
        ctl.store.refuse_artifacts(job_id)
        return line
    except OSError as exc:  # this machine's side (disk full, permissions): worth another try later
        raise LanpoolError(f"could not write the artifacts of job {job_id} under {ctl.home.artifacts}: "
                           f"{exc.strerror or exc}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


async def follow_gang(ctl, job_id: str, sink, say, *, follow: bool = True, node: int | None = None,
                      starts: dict[int, int] | None = None) -> JobRow:
    """A multi-node job started elsewhere (another controller process, or this one before
    it was stopped): attach to every node's runner and store, show and tag their logs
    from `starts` (node -> seq; default where the store ends). With follow: until every
    node ended, stopping the others when one fails like the `run` does, then bring back
    artifacts and record the final status. Without: bring the logs up to date, and
    finish the job if every node has ended."""
    job = ctl.store.job(job_id)
    expected = int(json.loads(job.spec or "{}").get("nodes") or 0)
    rows = ctl.store.nodes(job_id)
    while len(rows) < expected and not ctl.store.job(job_id).state.is_terminal() and follow:
        await asyncio.sleep(0.5)  # the run that started it is still submitting to the other nodes
        rows = ctl.store.nodes(job_id)
    if not rows or [r["node"] for r in rows] != list(range(len(rows))):
        raise RunnerError(f"job {job_id} has no complete record of its nodes: it did not start on all of them")
    runners = [{"name": r["runner"], "host": r["host"], "port": r["port"]} for r in rows]
    if node is not None and not 0 <= node < len(rows):
        raise UsageError(f"job {job_id} has nodes 0 to {len(rows) - 1}, not {node}")
    if starts is not None:  # a node whose log was not shown yet starts at its first line
        starts = {k: starts.get(k, 0) for k in range(len(rows))}
    sessions: list[RunnerSession] = []
    try:
        for r in rows:
            sessions.append(await ctl.connect(r["host"], r["port"]))
        if follow:
            return await _follow_gang(ctl, job_id, sessions, runners, sink, say, starts, node)
        finals: dict[int, JobStatus | None] = {}
        for k, session in enumerate(sessions):
            status = await _follow_node(ctl, job_id, k, session, sink, start=(starts or {}).get(k), follow=False,
                                        shown=node in (None, k))
            finals[k] = status
            if JobState(status.state).is_terminal():
                cause = "" if status.state == JobState.DONE else (
                    status.error or f"{status.state.lower()} with exit code {status.exit_code}")
                ctl.store.set_node(job_id, k, runners[k], status.state, status.exit_code, cause)
        if all(JobState(s.state).is_terminal() for s in finals.values()):
            failed = [(k, s) for k, s in finals.items() if s.state != JobState.DONE]
            failure = ""
            if failed:
                k, s = failed[0]
                failure = f"node {k} ({runners[k]['name']}): " + (
                    s.error or f"{s.state.lower()} with exit code {s.exit_code}")
            return await _finish_gang(ctl, job_id, sessions, finals, failure)
        return ctl.store.job(job_id)
    finally:
        for session in sessions:
            session.close()
