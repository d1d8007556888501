"""The controller API: what `app headless` and the TUI both call.

It owns the store and the controller key, turns workflows into jobs on
runners, follows their logs into the store, and pulls artifacts back.
"""

import asyncio
import dataclasses
import io
import json
import logging
import secrets
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from app.artifact_files import ArtifactsRefused, checked_path, copy_file
from app.errors import (
    HostKeyMismatch,
    LanpoolError,
    NotFoundError,
    RunnerError,
    RunnerProtocolError,
    RunnerRefused,
    UsageError,
)
from app.home import ControllerHome
from app.host_keys import UnreadableHostKey, pinned_key
from app.keys import load_or_create_client_key
from app.names import new_run_name
from app.overview import MetricsReader
from app.runner_client import RunnerSession
from app.multinode import REFUSED_LINE, OwnOutput, follow_gang, prefix_node, pull_node_artifacts, run_gang, stop_gang
from app.planning import Plan, PlannedJob, make_plan
from app.pool import RunnerState, refresh_pool
from app.scheduler import Need, place
from app.snapshot import Snapshot, build_snapshot
from app.store import ARTIFACTS_REFUSED, JobRow, Store
from app.workflows import Project, load_workflows
from app.workflows.resolve import ResolvedJob, resolve
from protocol import JobState, JobStatus, SubmitJob, wire

log = logging.getLogger(__name__)

DISCOVERY_WAIT_S = 1.5  # mDNS browse when no runner is known yet
QUEUE_POLL_S = 2.0  # how often a queued job looks for room again
RECONNECT_S = 2.0  # how often a followed job's offline runner is tried again

# Called with (job_id, stream, data) for each chunk of new log lines.
LogSink = Callable[[str, str, bytes], None]


@dataclass(frozen=True)
class Submitted:
    run_name: str
    job_id: str
    runner: str
    status: JobStatus


@dataclass
class RunOutcome:
    run_name: str
    submitted: list[Submitted] = field(default_factory=list)
    jobs: list[JobRow] = field(default_factory=list)  # jobs that ran, in order, final state

    @property
    def last(self) -> JobRow | None:
        return self.jobs[-1] if self.jobs else None


def parse_address(spec: str, default_port: int) -> tuple[str, int]:
    """HOST, HOST:PORT, an IPv6 address, or [IPV6]:PORT; the port is 1-65535."""
    text = spec.strip()
    shown = repr(text[:100])
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise UsageError(f"bad runner address {shown}: use HOST, HOST:PORT or [IPV6]:PORT")
        port = rest[1:] if rest else None
    elif text.count(":") > 1:  # a bare IPv6 address has no port
        host, port = text, None
    else:
        host, sep, port = text.partition(":")
        port = port if sep else None
    if not host or any(c.isspace() or not c.isprintable() for c in host):
        raise UsageError(f"bad runner address {shown}: use HOST or HOST:PORT")
    if port is None:
        return host, default_port
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        raise UsageError(f"bad runner address {shown}: the port must be a number from 1 to 65535")
    return host, int(port)


class Controller:
    DEFAULT_PORT = wire.DEFAULT_PORT

    def __init__(self, home: ControllerHome | None = None) -> None:
        self.home = home or ControllerHome.default()
        self.home.create()
        self.store = Store(self.home.db)
        self._key: asyncssh.SSHKey | None = None
        # One pull per job at a time: the TUI may follow a job while stopping it.
        self._pull_locks: dict[str, asyncio.Lock] = {}

    @property
    def client_key(self) -> asyncssh.SSHKey:
        if self._key is None:
            self._key = load_or_create_client_key(self.home.key)
        return self._key

    @property
    def public_key_file(self) -> Path:
        _ = self.client_key
        return Path(str(self.home.key) + ".pub")

    def close(self) -> None:
        self.store.close()

    # -- runners -------------------------------------------------------------------

    async def connect(self, host: str, port: int, *, trust: bool = False) -> RunnerSession:
        """Open a session with the runner at host:port, checked against its pinned host key.

        Only a runner this controller trusts is connected to (app/pool.py). `trust` is the
        user's own act of naming this address (`runners add`, `run --runner HOST:PORT`): the
        key seen now is pinned, unless a trusted runner there has one, and the runner is
        trusted from then on."""
        known = self.store.runner_by_address(host, port)
        if known is not None and not known.get("trusted"):
            known = None  # an mDNS hint pins nothing and trusts nothing
        if known is None and not trust:
            raise RunnerError(f"no runner this controller trusts is at {host}:{port}: "
                              f"`app headless runners add {host}:{port}` trusts what answers there, "
                              "or pair it (`app headless runners pair NAME CODE`)")
        session = await RunnerSession.open(host, port, self.client_key, pinned_key(known) if known else None)
        try:
            assert session.hello is not None
            name = session.hello.name
            named = self.store.runner(name)
            if named is not None and named.get("trusted") and pinned_key(named) != session.host_key:
                raise RunnerError(
                    f"runner {name!r} at {host}:{port} has a different host key than the one pinned for that "
                    f"name: if it was reinstalled, `app headless runners remove {name}` first")
            if trust or known["name"] != name:
                self.store.upsert_runner(name, host, port, session.host_key, trusted=True)
            if known is not None and known["name"] != name:
                # Its pinned key answered under a new name: the same machine, renamed.
                self.store.remove_runner(known["name"])
        except BaseException:
            session.close()
            raise
        return session

    async def add_runner(self, host: str, port: int) -> str:
        """`runners add HOST[:PORT]`: trust what answers there, pinning its host key; its name."""
        async with await self.connect(host, port, trust=True) as session:
            return session.hello.name

    def names_an_address(self, spec: str | None) -> bool:
        """Whether `--runner SPEC` is an address (HOST[:PORT]) rather than a known runner's name."""
        return bool(spec) and self.store.runner(spec) is None

    async def connect_job(self, job: JobRow) -> RunnerSession:
        return await self.connect(job.host, job.port)

    async def choose_runner(self, spec: str | None, need: Need, run_name: str, job_id: str, workflow: str,
                            say: Callable[[str], None]) -> tuple[str, int]:
        """Where the run goes: `spec` if it is an address, else the best-fitting runner of the
        pool (`spec` pins a known name). While nothing fits, the job is QUEUED and we wait."""
        if self.names_an_address(spec):
            return parse_address(spec, self.DEFAULT_PORT)  # by address: the user's act, pinned by connect
        return (await self.choose_runners(spec, need, 1, run_name, job_id, workflow, say))[0]

    async def choose_runners(self, spec: str | None, need: Need, nodes: int, run_name: str, job_id: str,
                             workflow: str, say: Callable[[str], None]) -> list[tuple[str, int]]:
        """`nodes` distinct runners with room, all at once (gang placement), node 0 first."""
        last = ""
        told: set[str] = set()
        try:
            while True:
                views = await refresh_pool(self, wait_s=0 if self.store.runners() else DISCOVERY_WAIT_S)
                for view in views:
                    if view.problem and view.name == spec:
                        raise UnreadableHostKey(view.problem)
                    if view.problem and view.problem not in told:  # once, not every poll
                        say(view.problem)
                        told.add(view.problem)
                decision = place(need, [v.capacity() for v in views], nodes=nodes, pinned=spec)
                if decision.runners:
                    rows = [self.store.runner(name) for name in decision.runners]
                    return [(row["host"], row["port"]) for row in rows]
                if decision.rejected:
                    raise UsageError(f"cannot run {workflow}: {decision.rejected}")
                if decision.queued != last:
                    say(f"queued: {decision.queued} (Ctrl-C cancels)")
                    self.store.queue_job(job_id, run_name, workflow, decision.queued)
                    last = decision.queued
                await asyncio.sleep(QUEUE_POLL_S)
        except (asyncio.CancelledError, KeyboardInterrupt):
            if last:
                self.store.set_job_status(job_id, JobState.ABORTED, "cancelled while queued",
                                          finished_at=time.time(), synced=1)
            raise

    # -- runs ----------------------------------------------------------------------------

    def load_project(self, root: Path) -> Project:
        return load_workflows(root)

    def plan(self, project: Project, workflow_name: str, overrides: dict[str, str] | None = None,
             no_cache: bool = False, reuse: bool = False) -> Plan:
        """What a run would do: each job of the DAG, run or reused, and why."""
        project.get(workflow_name)
        return make_plan(project, self.store, self.home, workflow_name, overrides or {}, no_cache, reuse)

    async def run(self, project: Project, workflow_name: str, runner_spec: str | None = None,
                  overrides: dict[str, str] | None = None, *, sink: LogSink | None = None,
                  say: Callable[[str], None] | None = None, on_submitted: Callable[[Submitted], None] | None = None,
                  follow: bool = True, no_cache: bool = False, reuse: bool = False, tag: str | None = None,
                  nodes: int | None = None, resume: str | None = None) -> RunOutcome:
        """Run a workflow's plan on one runner: reused jobs are skipped, the others run in
        order, each on the same connection, each getting its dependencies' artifacts.

        With follow=False the single job to run is submitted and left running.
        """
        overrides = overrides or {}
        say = say or (lambda _text: None)
        if resume is not None and not resume.strip():
            raise UsageError("--resume needs a run name, a job id or WORKFLOW:TAG")
        cli_resume = self._resume_from(resume) if resume else None
        plan = self.plan(project, workflow_name, overrides, no_cache, reuse)
        resumes = self._resumes_of(project, plan, workflow_name, cli_resume)
        multinode = [p for p in plan.to_run if p.job.nodes > 1 or (nodes and nodes > 1 and p.workflow == workflow_name)]
        if not follow and multinode:
            raise UsageError("--detach does not take multi-node jobs: the controller watches all nodes together")
        if not follow and len(plan.to_run) > 1:
            names = ", ".join(j.workflow for j in plan.to_run)
            raise UsageError(f"--detach runs one job, and this plan runs {len(plan.to_run)} ({names}): "
                             "run without --detach, or run the dependencies first")
        outcome = RunOutcome(run_name=new_run_name(self.store.run_name_taken))
        job_ids = {p.workflow: secrets.token_hex(6) for p in plan.to_run}
        previous = self.store.create_run(outcome.run_name, workflow_name, str(project.root), tag,
                                         plan.jobs[-1].job.variables)
        if previous:
            say(f"tag {tag!r} moved from run {previous} to run {outcome.run_name}")
        if not plan.to_run:
            for planned in plan.jobs:
                say(f"{planned.workflow}: reusing job {planned.reuse.id} ({planned.reason})")
            return outcome
        need = _largest_need([p.job.resources for p in plan.to_run])
        first = plan.to_run[0]
        host, port = await self.choose_runner(runner_spec, need, outcome.run_name, job_ids[first.workflow],
                                              first.workflow, say)
        snapshot = await asyncio.to_thread(build_snapshot, project.root)
        async with await self.connect(host, port, trust=self.names_an_address(runner_spec)) as session:
            done: dict[str, JobRow] = {}
            for planned in plan.jobs:
                if planned.action == "reuse":
                    assert planned.reuse is not None
                    say(f"{planned.workflow}: reusing job {planned.reuse.id} ({planned.reason})")
                    done[planned.workflow] = planned.reuse
                    continue
                job_id = job_ids[planned.workflow]
                job = resolve(project, planned.workflow, overrides, {"run_name": outcome.run_name, "job_id": job_id})
                if nodes and planned.workflow == workflow_name:
                    job = dataclasses.replace(job, nodes=nodes)
                if planned.workflow in resumes:
                    resume_job, resume_ckpt = resumes[planned.workflow]
                    # Same explicit path on every node: never "last" without shared storage.
                    job = dataclasses.replace(job, env={**job.env, "LANPOOL_RESUME_CKPT": resume_ckpt})
                    planned.tagged.append(resume_job)  # its artifacts are placed like a dependency's
                    say(f"{planned.workflow}: resuming from {resume_ckpt} of job {resume_job.id}"
                        f" (run {resume_job.run_name})")
                if job.nodes > 1:
                    row = await self._run_multinode(project, planned, job, job_id, outcome, runner_spec, snapshot,
                                                    done, sink, say)
                    outcome.jobs.append(row)
                    done[planned.workflow] = row
                    if row.state is not JobState.DONE:
                        break
                    continue
                inputs = [await self._input_on(session, done[d]) for d in planned.deps]
                inputs += [await self._input_on(session, t) for t in planned.tagged]
                submitted = await self._submit_on(session, outcome.run_name, job_id, job, snapshot,
                                                  [i for i in inputs if i], planned)
                outcome.submitted.append(submitted)
                if on_submitted:
                    on_submitted(submitted)
                if not follow:
                    return outcome
                row = await self._follow_to_end(job_id, sink, say, session)
                outcome.jobs.append(row)
                done[planned.workflow] = row
                if row.state is not JobState.DONE:
                    rest = [j.workflow for j in plan.jobs[plan.jobs.index(planned) + 1:]]
                    if rest:
                        say(f"{planned.workflow} ended {row.status}: not running {', '.join(rest)}")
                    break
        return outcome

    async def _run_multinode(self, project, planned, job, job_id, outcome, runner_spec, snapshot, done, sink,
                             say) -> JobRow:
        """A `nodes: N` job: N runners at once, each its own session; see app/multinode.py."""
        hosts = await self.choose_runners(runner_spec if self.store.runner(runner_spec or "") else None,
                                          Need.of(job.resources), job.nodes, outcome.run_name, job_id,
                                          planned.workflow, say)
        sessions = []
        try:
            for host, port in hosts:
                sessions.append(await self.connect(host, port))

            async def inputs_of(session):
                found = [await self._input_on(session, done[d]) for d in planned.deps]
                found += [await self._input_on(session, t) for t in planned.tagged]
                return [i for i in found if i]

            return await run_gang(self, job, job_id, outcome.run_name, planned, sessions, [h for h, _ in hosts],
                                  snapshot, inputs_of, sink, say)
        finally:
            for session in sessions:
                session.close()

    def _resumes_of(self, project: Project, plan: Plan, workflow_name: str,
                    cli_resume: tuple[JobRow, str] | None) -> dict[str, tuple[JobRow, str]]:
        """workflow -> (job, checkpoint) for each job to run that resumes: `--resume` for the
        requested workflow (it wins over its `resume-from`), `resume-from` for any workflow."""
        out = {}
        for planned in plan.to_run:
            if cli_resume is not None and planned.workflow == workflow_name:
                out[planned.workflow] = cli_resume
                continue
            ref = planned.job.resume_from
            if not ref:
                continue
            wf = project.get(planned.workflow)
            try:
                out[planned.workflow] = self._resume_from(ref)
            except LanpoolError as exc:  # same exit code, but saying which file line named it
                where = f"{wf.file}:{wf.line_of('resume-from')}: " if wf.file else ""
                raise type(exc)(f"{where}workflow {wf.name!r}: resume-from {ref!r}: {exc.message}") from None
        return out

    def _resume_from(self, ref: str) -> tuple[JobRow, str]:
        """The job to resume from (a run name, job id or WORKFLOW:TAG) and its checkpoint
        (a path in the workspace)."""
        if ":" in ref:
            workflow, _, tag = ref.partition(":")
            job = self.store.tagged_job(tag, workflow) if workflow and tag else None
            if job is None:
                raise NotFoundError(f"no run tagged {tag!r} has a finished {workflow!r} job "
                                    f"(WORKFLOW:TAG names a run made with `run {workflow or 'WORKFLOW'} --tag TAG`)")
        else:
            job = self.store.resolve_jobs(ref)[-1]
        ckpts = [(p, s) for p, s in self.store.artifacts(job.id) if p.endswith(".ckpt")]
        # Node 0's (global rank 0 writes checkpoints) before other nodes' copies (node-K/...).
        ckpts = [c for c in ckpts if not _other_node_path(c[0])] or ckpts
        if not ckpts:
            raise UsageError(f"job {job.id} brought back no .ckpt file to resume from "
                             "(`app headless artifacts list` shows what it has)")
        local = self.home.job_artifacts(job.id)
        # The newest checkpoint the job wrote (snapshots rotate; the latest is what resumes).
        path = max(ckpts, key=lambda c: (local / c[0]).stat().st_mtime if (local / c[0]).exists() else 0)[0]
        if not (local / path).exists():
            raise UsageError(f"the artifacts of job {job.id} are not in the local store any more")
        return job, path

    async def _input_on(self, session: RunnerSession, dep: JobRow) -> str | None:
        """Where the runner finds `dep`'s artifacts: its own copy if the job ran there, else an upload."""
        if not self.store.artifacts(dep.id):
            return None
        if dep.runner == session.hello.name and await session.exists(f"artifacts/{dep.id}.tar"):
            return f"artifacts/{dep.id}.tar"
        remote = f"inputs/{dep.id}.tar"
        if not await session.exists(remote):
            data = await asyncio.to_thread(_pack_dir, self.home.job_artifacts(dep.id))
            await session.upload(data, remote)
        return remote

    async def _submit_on(self, session: RunnerSession, run_name: str, job_id: str, job: ResolvedJob,
                         snapshot: Snapshot, inputs: list[str], planned: PlannedJob) -> Submitted:
        """The job is in the store before it is sent, so a crash here loses nothing."""
        runner = self.store.runner(session.hello.name)
        spec = {"commands": job.commands, "env": job.env, "artifacts": job.artifacts, "image": job.image,
                "working_dir": job.working_dir, "snapshot": snapshot.sha256, "inputs": inputs,
                "resources": job.resources, "nodes": job.nodes}
        self.store.create_job(job_id, run_name, job.workflow, runner, spec, planned.key, planned.inputs)
        try:
            remote = f"snapshots/{snapshot.name}"
            await session.upload(snapshot.data, remote)
            status = await session.submit(SubmitJob(
                job_id=job_id, run_name=run_name, workflow=job.workflow, commands=job.commands,
                env=job.env, artifacts=job.artifacts, snapshot=remote, working_dir=job.working_dir,
                inputs=inputs, image=job.image, pull=job.pull, resources=job.resources, executor=job.executor,
            ))
        except (LanpoolError, OSError, asyncssh.Error) as exc:
            message = getattr(exc, "message", None) or str(exc)
            # synced: nothing more will come from the runner for this job
            self.store.set_job_status(job_id, JobState.FAILED, f"submit failed: {message}", error=message,
                                      finished_at=time.time(), synced=1)
            raise RunnerError(f"could not submit to {session.where}: {message}") from None
        self._record_status(job_id, status)
        return Submitted(run_name, job_id, runner["name"], status)

    def node_count(self, job_id: str) -> int:
        """How many nodes the job runs on (1 for a single-node job)."""
        job = self.store.job(job_id)
        return max(len(self.store.nodes(job_id)), int(json.loads(job.spec or "{}").get("nodes") or 1))

    async def follow(self, job_id: str, sink: LogSink | None = None, follow: bool = True,
                     say: Callable[[str], None] | None = None, node: int | None = None,
                     from_store: bool = True, start: int | None = None) -> JobRow:
        """Bring the job's log into the store from where it stopped, and its final status.

        `from_store=False`: the sink gets only new lines (the TUI reads the stored tail itself),
        from `start` (a single-node job's line number; default: where the store ends now).
        With `follow`, waits until the job ends; a controller killed meanwhile
        resumes here later and loses nothing (the store knows its last line).
        A runner that goes away while followed is waited for, then re-attached.
        """
        job = self.store.job(job_id)
        multi = len(self.store.nodes(job_id)) > 1 or int(json.loads(job.spec or "{}").get("nodes") or 1) > 1
        # Each node's log resumes where the store ended when we looked: lines another
        # process stores meanwhile come again from the runner (and are stored once).
        starts = {k: self.store.log_end(job_id, k) for k in range(len(self.store.nodes(job_id)))} if multi else {}
        # Same for one node: the sink gets every line once, whoever stores them.
        start = self.store.log_end(job_id) if start is None else start
        n_nodes = self.node_count(job_id)
        if node is not None and not 0 <= node < n_nodes:
            raise UsageError(f"job {job_id} runs on {n_nodes} node(s): --node takes 0"
                             + (f" to {n_nodes - 1}" if n_nodes > 1 else "") + f", not {node}")
        if sink and from_store:  # what is already stored first, then the rest from the runner
            for chunk_node, seq, stream, data in self.store.log_chunks(job_id):
                if node is not None and chunk_node != node:
                    continue
                if seq >= (starts.get(chunk_node, 0) if multi else start):
                    continue
                sink(job_id, stream, prefix_node(chunk_node, data) if multi and stream != "met" else data)
        if job.synced:
            return job
        if multi:
            return await follow_gang(self, job_id, sink, say or (lambda _t: None), follow=follow, node=node,
                                     starts=starts if sink else None)
        if follow:
            return await self._follow_to_end(job_id, sink, say or (lambda _t: None), start=start)
        async with await self.connect_job(job) as session:
            return await self._follow_on(session, job_id, sink, follow, [start])

    async def _follow_to_end(self, job_id: str, sink: LogSink | None, say: Callable[[str], None],
                             session: RunnerSession | None = None, start: int | None = None) -> JobRow:
        """Follow until the job ends, riding out runner outages (OFFLINE, then re-attach)."""
        offline_since = None
        position = [self.store.log_end(job_id) if start is None else start]  # the next line the sink needs
        while True:
            try:
                if session is not None:
                    return await self._follow_on(session, job_id, sink, True, position)
                async with await self.connect_job(self.store.job(job_id)) as fresh:
                    if offline_since is not None:
                        say(f"runner {fresh.hello.name} is back after {time.time() - offline_since:.0f}s: re-attached")
                        self.store.set_runner(fresh.hello.name, state=RunnerState.LIVE, last_ok=time.time())
                    return await self._follow_on(fresh, job_id, sink, True, position)
            except (RunnerRefused, HostKeyMismatch, NotFoundError):
                raise
            except RunnerProtocolError as exc:
                # The runner answered with something unusable: reconnecting gets the same answer.
                state = self.store.job(job_id).status
                raise RunnerProtocolError(f"{exc.message}; stopped following job {job_id} (left {state} "
                                          "here)") from None
            except RunnerError as exc:
                session = None
                job = self.store.job(job_id)
                if offline_since is None:
                    offline_since = time.time()
                    self.store.set_runner(job.runner, state=RunnerState.OFFLINE)
                    say(f"runner {job.runner} went offline ({exc.message}); waiting for it to come back "
                        "(the job may still run there; Ctrl-C detaches)")
                await asyncio.sleep(RECONNECT_S)

    async def _follow_on(self, session: RunnerSession, job_id: str, sink: LogSink | None, follow: bool,
                         position: list[int] | None = None) -> JobRow:
        """Attach from `position[0]` (kept up to date, for a re-attach) or where the store ends."""
        position = position if position is not None else [self.store.log_end(job_id)]
        own = OwnOutput(job_id, 0, session.where)  # a runner writes only this job's lines and status
        async for batch in session.attach(job_id, position[0], follow=follow):
            rows, final = own.take(batch)
            if rows:
                position[0] = max(position[0], max(r[2] + r[3] for r in rows))
                self.store.add_log_chunks(rows)
                if sink:
                    for row in rows:
                        sink(job_id, row[4], row[5])
            if final is not None:
                self._record_status(job_id, final)
                if JobState(final.state).is_terminal():
                    await self._pull_artifacts(session, job_id, final)
                    self.store.update_job(job_id, synced=1)
        return self.store.job(job_id)

    async def stop(self, job_id: str, abort: bool = False, grace_s: float | None = None) -> JobRow:
        job = self.store.job(job_id)
        if job.state.is_terminal():
            return job
        if len(self.store.nodes(job_id)) > 1:  # every node at once; the job ends STOPPED/ABORTED as one
            for problem in await stop_gang(self, job_id, abort, grace_s):
                log.warning("could not stop %s", problem)
            return await self.follow(job_id)
        async with await self.connect_job(job) as session:
            status = await session.stop(job_id, abort, grace_s)
            self._record_status(job_id, status)
        return await self.follow(job_id)

    async def refresh(self, jobs: list[JobRow], timeout_s: float = 5.0) -> None:
        """Bring non-terminal jobs up to date from their runners; unreachable ones stay as they are."""
        pending = [j for j in jobs if not j.synced and j.state is not JobState.QUEUED]

        async def one(job: JobRow) -> None:
            try:
                await asyncio.wait_for(self.follow(job.id, follow=False), timeout_s)
            except (LanpoolError, TimeoutError) as exc:
                log.info("could not refresh %s: %s", job.id, exc)
                if isinstance(exc, TimeoutError) or type(exc) is RunnerError:
                    self.store.set_runner(job.runner, state=RunnerState.OFFLINE)

        await asyncio.gather(*(one(j) for j in pending))

    def metrics(self, job_id: str) -> list[dict]:
        """Metric points of a job (its "met" log stream): step, name, value, time."""
        reader = MetricsReader(job_id)  # the one parser of metric lines (the TUI reads the same way)
        reader.update(self.store)
        return reader.points

    # -- artifacts --------------------------------------------------------------------------

    async def download_artifacts(self, job_id: str, output: Path,
                                 progress: Callable[[int, int], None] | None = None) -> list[tuple[str, int]]:
        """Copy a job's artifacts to `output`; `progress(done_bytes, total_bytes)` after each file."""
        job = self.store.job(job_id)
        if not job.artifacts_pulled:
            if not job.state.is_terminal():
                raise UsageError(f"job {job_id} is still {job.status}: artifacts come back when it ends")
            await self.follow(job_id, follow=False)
            job = self.store.job(job_id)
        if job.artifacts_pulled == ARTIFACTS_REFUSED:
            why = next((d for _at, _s, d in reversed(self.store.job_events(job_id)) if d.startswith(REFUSED_LINE)),
                       REFUSED_LINE)
            raise ArtifactsRefused(f"job {job_id}: {why}; nothing to download")
        files = self.store.artifacts(job_id)
        if not files:
            raise NotFoundError(f"job {job_id} has no artifacts")
        src = self.home.job_artifacts(job_id)
        try:
            output.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create the output directory {output}: {exc.strerror}") from None
        total, done = sum(n for _, n in files), 0
        for path, n in files:
            # Stored paths came from a runner: each is checked again, and nothing is read or
            # written through a symlink below the store's or the output's directory.
            parts = checked_path(path)
            try:
                await asyncio.to_thread(copy_file, src, parts, output)  # checkpoints can be GBs
            except OSError as exc:
                raise LanpoolError(f"copying {path} to {output} failed: {exc.strerror or exc}") from None
            done += n
            if progress:
                progress(done, total)
        return files

    async def _pull_artifacts(self, session: RunnerSession, job_id: str, status: JobStatus) -> None:
        """Bring back the job's artifacts (the one node's of a gang of one; app/multinode.py).
        Refused ones fail a DONE job, with the reason: what it declared did not arrive."""
        if not status.artifacts_archive:
            return
        async with self._pull_locks.setdefault(job_id, asyncio.Lock()):
            refused = await pull_node_artifacts(self, job_id, [(0, session, status)])
        if refused:
            job = self.store.job(job_id)
            self.store.set_job_status(job_id, JobState.FAILED if job.state is JobState.DONE else job.state,
                                      refused, error=job.error or refused)

    def _record_status(self, job_id: str, status: JobStatus) -> None:
        if status.job_id != job_id:  # a runner writes only the state of the job it was asked about
            raise RunnerProtocolError(f"a runner answered with the status of job {status.job_id!r} "
                                      f"for job {job_id}: not recorded")
        if not JobState(status.state).is_terminal() and self.store.job(job_id).state.is_terminal():
            # A stale "still running" (e.g. stop's immediate reply, processed late) arriving
            # after a follower recorded the end: the end stands. Checking the state, not only
            # `synced`, closes the window between recording the end and pulling artifacts.
            return
        fields = {"exit_code": status.exit_code, "started_at": status.started_at,
                  "finished_at": status.finished_at, "artifacts_archive": status.artifacts_archive or None}
        if status.error:
            fields["error"] = status.error
        self.store.set_job_status(job_id, status.state, **fields)


def _other_node_path(path: str) -> bool:
    """An artifact brought back from node K > 0 of a multi-node job (`nodes: all`)."""
    head = path.split("/", 1)[0]
    return head.startswith("node-") and head[5:].isdigit() and "/" in path


def _largest_need(resources: list[dict]) -> Need:
    """One runner takes the whole run: it must have room for the largest of its jobs."""
    needs = [Need.of(r) for r in resources]
    return Need(max(n.gpu for n in needs), max(n.cpu for n in needs), max(n.memory_mb for n in needs))


def _pack_dir(root: Path) -> bytes:
    """A tar of a job's local artifacts, paths relative to its workspace."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False)
    return buf.getvalue()

