"""The job manager: starts jobs, supervises them to their end, stops them, keeps the journal.

Jobs belong to the agent, not to a connection: a controller that disconnects
leaves its jobs running and comes back to their spooled logs. Jobs whose
executor outlives the agent (containers) also survive a restart: the next
start re-adopts them (`load_journal`).

The request is checked in agent.jobs.admission, the workspace staged in
agent.workspace.staging, the environment built in agent.jobs.env, the journal read back in
agent.jobs.recovery; a started job is watched to its end in agent.jobs.supervision and
its end written in agent.jobs.end. This module holds the jobs themselves: their
journal at start-up, submit, the queue and what its jobs hold, stop and exit.
"""

import asyncio
import dataclasses
import logging
import math
import shutil
import tarfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from lanpool.agent.errors import JobError
from lanpool.agent.executors import Executor, ExecutorChoice, ExecutorError
from lanpool.agent.gang.line import gang_line
from lanpool.agent.gang.token import forget_token, keep_token
from lanpool.agent.home import AgentHome
from lanpool.agent.host.gpus import GpuAllocator, GpuError
from lanpool.agent.jobs.admission import DEFAULT_MAX_QUEUED, admit
from lanpool.agent.jobs.dag import blocked, stage_dependencies
from lanpool.agent.jobs.end import settle
from lanpool.agent.jobs.env import with_picked_ports
from lanpool.agent.jobs.job import Job, masked_env
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.jobs.kept_secrets import KeptSecrets, SecretKeeper
from lanpool.agent.jobs.launch import launch_of, read_request, save_request
from lanpool.agent.jobs.owner import Owner, owns
from lanpool.agent.jobs.queue import Amount, Waiting, capacity_of, holds, in_use, need_of, plan, replace_files
from lanpool.agent.jobs.recovery import adoption_of, read_journal, remove_leftovers
from lanpool.agent.jobs.supervision import Supervisor
from lanpool.agent.jobs.turns import Holder, InLine, holders_text, take_turns, who
from lanpool.agent.workspace.blobs import BlobCache
from lanpool.agent.workspace.spool import LogSpool
from lanpool.agent.workspace.staging import check_room, stage_workspace
from lanpool.protocol import ErrorCode, JobState, SubmitJob
from lanpool.protocol.errors import ProtocolError

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = 10.0
# A submit answers once the job has started, or after this long (an image still being pulled:
# it then shows SUBMITTED, pull progress in its log). A detached one (`run -d`) answers once staged.
START_WAIT_S = 20.0
HELD_BY_CHARS = 250  # Hello's resource values are at most 256 characters (protocol.schema)


class JobManager:
    def __init__(
        self,
        home: AgentHome,
        executors: ExecutorChoice | Executor,
        grace_s: float = DEFAULT_GRACE_S,
        gpus: GpuAllocator | None = None,
        capacity: Amount | None = None,
    ) -> None:
        self.home = home
        self.blobs = BlobCache(home.blobs)  # workspaces are built from it; channels fill it
        self.secrets = SecretKeeper(home.secrets)  # unfinished jobs' secrets, for a restart
        if not isinstance(executors, ExecutorChoice):
            executors = ExecutorChoice("process", executors)
        self.executors = executors
        self.grace_s = grace_s
        self.gpus = gpus or GpuAllocator([])
        # What this runner has in all (agent.host.resources): a job that can never fit it is refused.
        cpus, memory = capacity_of(capacity)
        self.capacity = Amount(cpus, memory, len(self.gpus.indices))
        self._wake: asyncio.TimerHandle | None = None  # the pump after a retry's delay
        self._closing = False  # the agent is exiting: nothing more starts (the journal keeps the queue)
        self.jobs: dict[str, Job] = {}
        self.max_queued = DEFAULT_MAX_QUEUED  # of one controller's jobs (agent.jobs.admission)
        self.max_staged: int | None = None  # bytes one controller's unfinished jobs staged (None: no bound)
        # Sharing (agent.jobs.turns): GPUs one controller's running jobs may hold (None: all), and
        # whether others' labels, workflows and times are hidden from a waiting job's reason.
        self.max_gpus_per_owner: int | None = None
        self._needs: dict[str, Amount] = {}  # job id -> what it asks for (self._need)
        self.private_occupancy = False
        self._tasks: set[asyncio.Task[None]] = set()  # strong refs to background tasks
        self._staging: set[str] = set()  # submitted jobs whose workspace is still being built
        # Called when a job starts or ends (what the runner has free changed).
        self.listeners: list[Callable[[], None]] = []
        self.supervisor = Supervisor(grace_s, self._spawn, self._finish, self._changed)
        # Detached gangs (agent.gang.hub): the member holding this runner's one gang reservation
        # (QUEUED, its resources held), and who is told when a reservation is taken.
        self.gang_held: str = ""
        self.on_reserved: Callable[[Job], None] | None = None
        self.on_adopted: Callable[[Job], None] | None = None
        self.on_requeued: Callable[[Job], None] | None = None  # a member's run ended into a retry

    @property
    def closing(self) -> bool:
        """The agent is exiting: a job that ends now ends because of that."""
        return self._closing

    def usage(self) -> dict[str, int]:
        """What running jobs hold now: GPUs free, CPUs and memory reserved, job count."""
        records = [j.record for j in self.jobs.values()]
        # Records are checked at submit, but a journal written by an older agent may hold
        # anything (cpus NaN): this feeds every Hello, so it must never raise (agent.jobs.queue.reserved).
        used = in_use(records)
        return {
            "gpus_free": len(self.gpus.free),
            "cpus_reserved": math.ceil(used.cpus),
            "memory_reserved_mb": used.memory_mb,
            "running": sum(1 for r in records if holds(r)),
            "queued": sum(1 for j in self.jobs.values() if j.record.state == JobState.QUEUED),
        }

    def _changed(self) -> None:
        for listener in self.listeners:
            try:
                listener()
            except Exception:  # a listener's bug must not break job bookkeeping
                log.exception("job change listener failed")

    # -- start-up ------------------------------------------------------------

    async def load_journal(self) -> None:
        """Load every job on disk and settle the ones that were running when the agent stopped.

        Each is offered to its executor: a container job is re-adopted (its log
        continues from where the spool stopped, and one that ended meanwhile
        gets its result recorded); a process job cannot be (its pipes died with
        the agent), so its process group is killed rather than left running
        unseen. A job not taken back is LOST.
        """
        for job in read_journal(self.home):
            self.jobs[job.record.job_id] = job
        self._reload_secrets()
        for job in [j for j in self.jobs.values() if holds(j.record)]:
            await self._adopt(job)
        await remove_leftovers(self.executors, {i for i, j in self.jobs.items() if not j.record.terminal})
        self._pump()  # the queue, in its journalled order

    def _reload_secrets(self) -> None:
        """Unfinished jobs mask their secrets again (a re-adopted container's next lines too);
        what a crash left of ended jobs' goes."""
        unfinished = {i for i, j in self.jobs.items() if not j.record.terminal}
        self.secrets.keep_only(unfinished)
        for job_id in unfinished:
            kept = self.secrets.read(job_id)
            if kept is not None:
                self.jobs[job_id].masks = [m.encode() for m in kept.masked]

    async def _adopt(self, job: Job) -> None:
        record = job.record
        try:
            executor = self.executors.for_journal(record.executor)
            adoption = await adoption_of(job, resumes_output=executor.outlives_agent)
            execution = await executor.adopt(adoption, job.sink())
        except ExecutorError as exc:
            self._lose(job, str(exc))
            return
        job.executor = executor
        self.gpus.claim(record.job_id, record.gpus)
        # Metrics resume from the last offset the journal saved: a few values may repeat.
        self.supervisor.running(job, execution, adopted=True)
        if record.gang_id and record.gang_rank and self.on_adopted is not None:
            self.on_adopted(job)  # a running gang member re-joins node 0's agent (agent.gang.hub)

    # -- requests --------------------------------------------------------------

    def get(self, job_id: str, owner: Owner | None) -> Job:
        """The job, if `owner` may see it (None: the runner itself); else, as for an id never
        seen, UNKNOWN_JOB (agent.jobs.owner)."""
        job = self.jobs.get(job_id)
        if job is None or not owns(owner, job.record):
            raise JobError(ErrorCode.UNKNOWN_JOB, f"no job {job_id!r} on this runner")
        return job

    async def submit(self, req: SubmitJob, owner: Owner | None) -> Job:
        req = with_picked_ports(req)  # port_count is at most 16 (protocol.schema); admit checks the sum
        record, executor, note = admit(
            req,
            self.jobs,
            self.executors,
            self.capacity,
            owner,
            self.max_queued,
            self.max_staged,
            self.max_gpus_per_owner,
        )
        check_room(req.files, self.home.jobs)
        job_dir = self.home.job_dir(req.job_id)
        workspace = job_dir / "workspace"
        workspace.mkdir(parents=True)
        job = Job(record, job_dir, LogSpool(job_dir / "log.spool"), executor=executor)
        job.masks = [m.encode() for m in req.masked]
        # The request (its files are staged below) is what starts the job later, maybe after a
        # restart; the saved copy has *** for its secrets, kept apart for a restart (agent.jobs.kept_secrets).
        job.request = req
        env = masked_env(dict(req.env), req.masked)
        save_request(job_dir, replace_files(req, env=env))
        if req.masked:
            secret_env = {k: v for k, v in req.env.items() if env[k] != v}
            try:
                self.secrets.keep(req.job_id, KeptSecrets(list(req.masked), secret_env))
            except OSError as exc:  # a full disk: it runs as asked, only a restart before its end fails it
                log.warning("job %s: its secrets could not be kept for a restart: %s", req.job_id, exc)
        if req.gang is not None and req.gang.gang_rank:  # a member's token, for a restart (agent.gang.token)
            keep_token(job_dir, req.gang.gang_token)
        self.jobs[req.job_id] = job
        record.save(job_dir)
        if note:
            job.system_line(note)
        self._staging.add(req.job_id)  # out of the queue (_pump) until its workspace is whole
        refused = await self._stage(job, req, workspace)
        if refused is not None:  # blobs to send again: as if the request never came (the controller resends)
            self._forget(job)
            raise refused
        if job.starting is not None and not req.detached:
            await asyncio.wait([job.starting], timeout=START_WAIT_S)
        return job

    async def _stage(self, job: Job, req: SubmitJob, workspace: Path) -> JobError | None:
        """The workspace from the request's files, then the queue (the job fails if they cannot be
        placed). A blob gone or damaged (MISSING_BLOBS) is returned instead: the submit is still
        answering its controller, which sends the blob again."""
        try:
            await stage_workspace(self.blobs, req, workspace)
        except (JobError, OSError, tarfile.TarError) as exc:
            message = exc.message if isinstance(exc, JobError) else f"could not start the job: {exc}"
            self._staging.discard(req.job_id)
            if isinstance(exc, JobError) and exc.code == ErrorCode.MISSING_BLOBS:
                return exc
            if not job.record.terminal:  # not stopped meanwhile
                self._finish(job, JobState.FAILED, None, message)
            return None
        self._staging.discard(req.job_id)
        self._pump()
        return None

    def _forget(self, job: Job) -> None:
        """A job refused before it was ever queued: nothing of it is kept (no dir, no journal entry)."""
        self.jobs.pop(job.record.job_id, None)
        shutil.rmtree(job.dir, ignore_errors=True)
        self.secrets.forget(job.record.job_id)
        self._changed()

    # -- the queue -------------------------------------------------------------

    def _pump(self) -> None:
        """Start what the queue says can start now (agent.jobs.queue); called whenever a job ends,
        is queued or its retry delay is over, so a hand-over is immediate."""
        if self._closing:
            return
        queued = sorted(
            (
                j
                for j in self.jobs.values()
                if j.record.state == JobState.QUEUED and j.record.job_id not in self._staging
            ),
            key=lambda j: j.record.queued_seq,
        )
        # One pass over every job: what holds resources now, and each owner's latest start (the turns').
        holding: list[JobRecord] = []
        last_start: dict[str, float] = {}
        for known in self.jobs.values():
            record = known.record
            if record.started_at is not None and record.started_at > last_start.get(record.owner, -math.inf):
                last_start[record.owner] = record.started_at
            if holds(record):
                holding.append(record)
        queued = self._in_turn(self._ready(queued), holding, last_start)
        now = time.time()
        queued = gang_line(queued, self.gang_held, now)
        if not queued:
            return
        used = in_use(holding)
        if self.gang_held:  # a reservation holds its CPUs and memory (its GPUs are allocated)
            held = need_of(self.jobs[self.gang_held].record)
            used = Amount(used.cpus + held.cpus, used.memory_mb + held.memory_mb, 0)
        free = Amount(self.capacity.cpus - used.cpus, self.capacity.memory_mb - used.memory_mb, len(self.gpus.free))
        waiting = [Waiting(j.record.job_id, self._need(j), j.record.not_before) for j in queued]
        decided = plan(waiting, free, self.capacity, now)
        for job in queued:
            position, why = decided.waiting.get(job.record.job_id, (0, None))
            reason = ""
            if job.record.not_before > now:
                why = None
                reason = f"retry {job.record.attempt} of {job.record.retry_limit} in {job.record.not_before - now:.0f}s"
                if job.record.gang_id:
                    reason = f"gang {job.record.gang_id}: not all its nodes were free; again in {job.record.not_before - now:.0f}s"
            job.position, job.reason, job.reason_of = position, reason, why
            # Who holds what it waits for, told when its status is asked (the times are then's).
            job.held_by = self._holders_text if position else None
        for job_id in decided.start:
            if self.jobs[job_id].record.gang_id:
                self._reserve(self.jobs[job_id])
            else:
                self._launch(self.jobs[job_id])
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        if decided.wake_at is not None:
            self._wake = asyncio.get_running_loop().call_later(max(0.0, decided.wake_at - now), self._pump)

    def _need(self, job: Job) -> Amount:
        """What the job asks for (its record's resources never change once admitted): counted once."""
        need = self._needs.get(job.record.job_id)
        if need is None:
            need = self._needs[job.record.job_id] = need_of(job.record)
        return need

    def _in_turn(self, queued: list[Job], holding: list[JobRecord], last_start: dict[str, float]) -> list[Job]:
        """The queue in fair turns between owners (agent.jobs.turns), without the jobs whose owner
        holds its --max-gpus-per-owner already (they wait out of line, saying so)."""
        if not queued:
            return queued
        running: dict[str, int] = {}
        gpus_held: dict[str, int] = {}
        for r in holding:
            running[r.owner] = running.get(r.owner, 0) + 1
            gpus_held[r.owner] = gpus_held.get(r.owner, 0) + need_of(r).gpus
        by_id = {j.record.job_id: j for j in queued}
        line = [InLine(j.record.job_id, j.record.owner, j.record.queued_seq, j.record.priority) for j in queued]
        ordered = [by_id[i] for i in take_turns(line, running, last_start)]
        cap = self.max_gpus_per_owner
        if cap is None:
            return ordered
        kept = []
        for job in ordered:
            owner, need = job.record.owner, self._need(job).gpus
            if owner and need and gpus_held.get(owner, 0) + need > cap:
                job.position, job.held_by, job.reason_of = 0, None, None
                job.reason = (
                    f"waiting for your jobs here to hold fewer GPUs: they hold {gpus_held.get(owner, 0)}, this one "
                    f"needs {need}, and one controller may hold {cap} on this runner (--max-gpus-per-owner)"
                )
                continue
            kept.append(job)
        return kept

    def _holders_text(self) -> str:
        """The jobs holding resources here, as a waiting job's reason names them (agent.jobs.turns)."""
        holding = [j.record for j in self.jobs.values() if holds(j.record)]
        found = [
            Holder(r.owner_label, r.owner, r.workflow, need_of(r).gpus, r.cpus, r.started_at, r.max_duration_s)
            for r in holding
        ]
        return holders_text(found, time.time(), self.private_occupancy)

    def holders_summary(self) -> str:
        """The same for a controller's `runners` (Hello: at most 256 characters)."""
        return self._holders_text()[:HELD_BY_CHARS]

    def occupancy(self) -> list[dict[str, Any]]:
        """What holds this runner now, for a controller's `runners` and `app agent status`: per
        job its owner's label, workflow, resources and start (nothing of its content)."""
        if self.private_occupancy:
            return []
        return [
            {
                "owner": who(j.record.owner_label, j.record.owner),
                "workflow": j.record.workflow,
                "gpus": need_of(j.record).gpus,
                "cpus": need_of(j.record).cpus,
                "started_at": j.record.started_at,
                "max_duration_s": j.record.max_duration_s,
            }
            for j in self.jobs.values()
            if holds(j.record)
        ]

    def _ready(self, queued: list[Job]) -> list[Job]:
        """The queued jobs whose dependencies are DONE (agent.jobs.dag); the others wait out of line
        (reason set), and those with a dependency that ended otherwise fail now, in cascade."""
        while True:
            failed = False
            ready = []
            for job in queued:
                fail, reason = blocked(job, self.jobs) if job.record.after else (False, "")
                if fail:
                    job.record.retry_on = []  # a retry cannot bring the dependency back
                    # No _finish: it held nothing, and we pump.
                    settle(job, JobState.FAILED, None, reason, self.home.usage_ledger)
                    self.secrets.forget(job.record.job_id)
                    job.notify()
                    failed = True
                elif reason:
                    job.position, job.reason = 0, reason
                else:
                    ready.append(job)
            if not failed:
                return ready
            self._changed()
            queued = [j for j in queued if j.record.state == JobState.QUEUED]

    # -- detached gangs (agent.gang.hub) -------------------------------------------

    def is_reserved(self, job: Job) -> bool:
        return bool(self.gang_held) and self.gang_held == job.record.job_id

    def _reserve(self, job: Job) -> None:
        """A gang member at the head that fits: hold its resources, and tell the gang (agent.gang.hub)."""
        try:
            job.record.gpus = self.gpus.allocate(job.record.job_id, need_of(job.record).gpus)
        except GpuError as exc:
            self._finish(job, JobState.FAILED, None, f"could not start the job: {exc}")
            return
        self.gang_held = job.record.job_id
        job.position, job.reason = 0, f"gang {job.record.gang_id}: reserved, waiting for its other nodes"
        job.notify()
        if self.on_reserved is None:
            self.fail_reserved(job, "this runner does not coordinate gangs")
            return
        self.on_reserved(job)

    def unreserve(self, job: Job, backoff_s: float) -> None:
        """Give the reservation back; the member goes back in line after `backoff_s`."""
        if not self.is_reserved(job):
            return
        self.gang_held = ""
        self.gpus.release(job.record.job_id)
        job.record.gpus = []
        job.record.not_before = time.time() + backoff_s
        job.record.save(job.dir)
        job.notify()
        self._pump()

    def start_reserved(self, job: Job, master_port: int) -> None:
        """Go: the reserved member starts now, with node 0's MASTER_PORT."""
        if not self.is_reserved(job) or job.record.terminal:
            return
        self.gang_held = ""
        job.record.master_port = master_port
        self._launch(job, held=True)

    def restart(self, job: Job, attempt: int, why: str) -> None:
        """Its gang starts again as attempt `attempt` (agent.gang.hub): a running member is stopped
        and goes back in the queue (agent.jobs.end), a reserved one lets go; one already there stays."""
        record = job.record
        if record.terminal or record.stop_requested or record.attempt >= attempt:
            return
        if self.is_reserved(job) or record.state == JobState.QUEUED:
            record.attempt = attempt
            record.save(job.dir)
            job.system_line(f"lanpool: {why}; its gang starts again (retry {attempt} of {record.retry_limit})")
            if self.is_reserved(job):
                self.unreserve(job, record.retry_delay_s)
            return
        record.restart_to = attempt
        record.save(job.dir)
        if job.execution is None:  # still starting: it stops once started (its end requeues it)
            job.system_line(f"lanpool: {why}; its gang starts again once this node has started")
            return
        job.system_line(f"lanpool: {why}; its gang starts again: SIGTERM, SIGKILL after {self.grace_s:g}s")
        self.supervisor.terminate(job, self.grace_s)

    def fail_reserved(self, job: Job, error: str) -> None:
        if not job.record.terminal:
            self._finish(job, JobState.FAILED, None, error)

    def _launch(self, job: Job, held: bool = False) -> None:
        """Take the job out of the queue: its GPUs (already held by a gang member), then its start."""
        record = job.record
        try:
            req = self.request(job)
            executor = job.executor or self.executors.for_journal(record.executor)
            gpus = record.gpus if held else self.gpus.allocate(record.job_id, need_of(record).gpus)
        except (OSError, ValueError, ProtocolError, ExecutorError, GpuError) as exc:
            self._finish(job, JobState.FAILED, None, f"could not start the job: {exc}")
            return
        record.state = JobState.SUBMITTED
        record.gpus = gpus
        record.not_before = 0.0
        record.save(job.dir)
        job.position, job.reason, job.held_by, job.reason_of = 0, "", None, None
        job.executor = executor
        if record.attempt:
            job.system_line(f"lanpool: retry {record.attempt} of {record.retry_limit}")
        job.notify()
        self._changed()
        job.starting = self._spawn(self._begin(job, executor, req))

    def request(self, job: Job) -> SubmitJob:
        """The job's request, secrets and all (ValueError when they were not kept)."""
        return job.request or self._request_after_restart(job)

    def _request_after_restart(self, job: Job) -> SubmitJob:
        """The request as saved (*** for its secrets), its secrets put back from where they were kept."""
        req = read_request(job.dir)
        if not req.masked:
            return req
        kept = self.secrets.read(job.record.job_id)
        if kept is None or len(kept.masked) != len(req.masked):
            raise ValueError("its secrets were not kept on this runner: run it again")
        return dataclasses.replace(req, env={**req.env, **kept.env}, masked=list(kept.masked))

    async def _begin(self, job: Job, executor: Executor, req: SubmitJob) -> None:
        if job.record.after:  # a DAG step: its dependencies' artifacts, from their workspaces
            try:
                copied = await asyncio.to_thread(stage_dependencies, job, self.jobs)
            except (JobError, OSError) as exc:
                why = exc.message if isinstance(exc, JobError) else str(exc)
                self._finish(job, JobState.FAILED, None, f"could not stage its dependencies' artifacts: {why}")
                return
            job.system_line(f"lanpool: {copied} artifact file(s) of {', '.join(job.record.after)} staged")
        await self.supervisor.start(job, executor, await launch_of(job, executor, req))

    def stop(self, job_id: str, abort: bool, grace_s: float | None, owner: Owner | None) -> Job:
        job = self.get(job_id, owner)
        if job.record.terminal:
            return job
        job.record.stop_requested = True
        job.record.abort_requested = job.record.abort_requested or abort
        job.record.save(job.dir)
        verb = "abort" if abort else "stop"
        if job.record.state == JobState.QUEUED:  # never started (or waiting to retry): it just leaves the queue
            self._finish(job, JobState.ABORTED if abort else JobState.STOPPED, None, "cancelled while queued")
            self._pump()
            return job
        if job.execution is None:
            # Not started yet: a start that may take long (an image pull) is given
            # up; one that cannot be cancelled signals the job once started (Supervisor.running).
            job.system_line(f"lanpool: {verb} requested before the job started")
            if job.starting is not None and job.executor is not None and job.executor.cancellable_start:
                job.starting.cancel()
            return job
        grace = self.grace_s if grace_s is None else max(0.0, grace_s)
        log.info("job %s: %s requested; SIGTERM, SIGKILL after %gs", job_id, verb, grace)
        job.system_line(f"lanpool: {verb} requested; SIGTERM, SIGKILL after {grace:g}s")
        self.supervisor.terminate(job, grace)
        return job

    async def shutdown(self, grace_s: float) -> None:
        """Agent exit: jobs whose executor cannot outlive the agent (processes) are stopped;
        the others (containers) keep running, and the next start re-adopts them."""
        self._closing = True
        if self._wake is not None:
            self._wake.cancel()
        running = [j for j in self.jobs.values() if holds(j.record) and j.execution]
        kept = [j for j in running if j.executor is not None and j.executor.outlives_agent]
        stopped = [j for j in running if j.executor is None or not j.executor.outlives_agent]
        for job in stopped:
            if "lost" in job.record.retry_on and not job.record.stop_requested:
                # Its retry takes up a job lost to an agent restart: ended LOST, back in the queue
                # (the journal keeps it), started again by the next agent. A stop would end it.
                job.lost_at_shutdown = True
                job.system_line(f"lanpool: the agent shuts down; SIGTERM, SIGKILL after {grace_s:g}s")
                self.supervisor.terminate(job, grace_s)
            else:
                self.stop(job.record.job_id, abort=False, grace_s=grace_s, owner=None)
        if stopped:
            await asyncio.wait(
                [asyncio.ensure_future(j.wait_run_over(j.execution)) for j in stopped], timeout=grace_s + 10
            )
        for job in kept:
            if job.execution is not None and not job.record.terminal:
                log.info("job %s keeps running in %s", job.record.job_id, job.execution.describe())
                await job.execution.detach()

    async def wait_terminal(self, job: Job) -> None:
        await job.wait_terminal()

    def _finish(self, job: Job, state: JobState, code: int | None, error: str) -> None:
        """The job's run ended (or never began): its record settled (agent.jobs.end), what it
        held freed, and the queue's next job started now."""
        settle(job, state, code, error, self.home.usage_ledger)
        if job.record.terminal:  # not a retry, which needs them again
            forget_token(job.dir)
            self.secrets.forget(job.record.job_id)
        elif job.record.gang_id and self.on_requeued is not None:
            self.on_requeued(job)  # the whole gang starts again (agent.gang.hub)
        self.gpus.release(job.record.job_id)
        if self.gang_held == job.record.job_id:
            self.gang_held = ""
        job.notify()
        self._changed()
        self._pump()

    def _lose(self, job: Job, error: str) -> None:
        job.system_line(f"lanpool: {error}")
        self._finish(job, JobState.LOST, None, error)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
