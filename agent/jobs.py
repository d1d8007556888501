"""The job manager: starts jobs, spools their output, stops them, keeps the journal.

Jobs belong to the agent, not to a connection: a controller that disconnects
leaves its jobs running and comes back to their spooled logs. Container jobs
also outlive the agent: a restarted agent re-adopts them (`load_journal`).
"""

import asyncio
import contextlib
import logging
import math
import os
import re
import signal
import socket
import stat
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agent.artifacts import check_artifact_path, pack_artifacts
from agent.executors import Execution, Executor, ExecutorChoice, ExecutorError, Launch
from agent.gpus import GpuAllocator, GpuError, gpu_env
from agent.home import AgentHome
from agent.journal import JobRecord
from agent.metrics_tail import METRICS_REL, MetricsTail, metrics_env
from agent.metrics_tail import POLL_S as METRICS_POLL_S
from agent.spool import LogSpool
from agent.workspace_files import remove_entry
from protocol import ErrorCode, JobState, JobStatus, SubmitJob
from protocol.errors import clip

log = logging.getLogger(__name__)

_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SIZE = re.compile(r"^([0-9]{1,16})([bkmg]?)$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}
# What one job may ask for: far above any machine, low enough that no sum or
# int() of them overflows, and refused at submit rather than at start.
MAX_GPUS = 1024
MAX_CPUS = 65536
MAX_MEMORY_MB = 2**30  # 1 PiB
MAX_SHM_BYTES = 2**50
DEFAULT_GRACE_S = 10.0
_ERROR_CHARS = 2000  # of a job's recorded error (JobStatus.error)
PULL_POLICIES = ("never", "missing", "always")
# A submit answers once the job has started, or after this long (an image
# still being pulled): the job then shows SUBMITTED, with pull progress in its log.
START_WAIT_S = 20.0


class JobError(Exception):
    """A request about a job that cannot be honoured; carries a protocol error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Job:
    record: JobRecord
    dir: Path
    spool: LogSpool
    execution: Execution | None = None
    starting: asyncio.Task | None = None  # until started: pulling the image, creating the container
    metrics: MetricsTail | None = None
    metrics_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Replaced after each set(): waiters take the current one, then re-check.
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def status(self) -> JobStatus:
        return self.record.to_status(self.spool.next_seq)


@dataclass(frozen=True)
class JobResources:
    """SubmitJob.resources, checked: what the job needs."""

    gpus: int | None = None  # None: not asked (a process job then sees every GPU, as before)
    memory_mb: int | None = None
    cpus: float | None = None
    shm_size: str | None = None

    @classmethod
    def parse(cls, res: dict) -> "JobResources":
        """Raises JobError (one line naming the key) for anything but a finite number in range:
        "nan", "inf", "1e309" or -1 never reach the bookkeeping, where int(nan) would fail."""

        def number(key: str, kind: type, limit: int, positive: bool = False):
            value = res.get(key)
            if value is None:
                return None
            try:
                num = None if isinstance(value, bool) else kind(value)
            except (ValueError, TypeError, OverflowError):
                num = None
            if num is None or not math.isfinite(num) or num < 0 or (positive and num == 0) or num > limit:
                least = "more than 0" if positive else "0 or more"
                raise JobError(ErrorCode.BAD_REQUEST, f"resources.{key}: {clip(repr(value), 40)} is not a valid "
                                                      f"number: give a finite number, {least}, at most {limit}")
            return num

        shm = res.get("shm_size")
        if shm is not None:
            m = _SIZE.match(str(shm).strip())
            if not m or int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()] > MAX_SHM_BYTES:
                raise JobError(ErrorCode.BAD_REQUEST, f"resources.shm_size: {clip(repr(shm), 40)} is not a size "
                                                      f"like 8g or 512m (at most {MAX_SHM_BYTES >> 30}g)")
            shm = m.group(0)
        return cls(number("gpu", int, MAX_GPUS), number("memory_mb", int, MAX_MEMORY_MB, True),
                   number("cpu", float, MAX_CPUS, True), shm)


class JobManager:
    def __init__(self, home: AgentHome, executors: ExecutorChoice | Executor, grace_s: float = DEFAULT_GRACE_S,
                 gpus: GpuAllocator | None = None) -> None:
        self.home = home
        if not isinstance(executors, ExecutorChoice):
            executors = ExecutorChoice("process", executors)
        self.executors = executors
        self.grace_s = grace_s
        self.gpus = gpus or GpuAllocator([])
        self.jobs: dict[str, Job] = {}
        self._tasks: set[asyncio.Task] = set()  # strong refs to background tasks
        # Called when a job starts or ends (what the runner has free changed).
        self.listeners: list[Callable[[], None]] = []

    def usage(self) -> dict[str, int]:
        """What running jobs hold now: GPUs free, CPUs and memory reserved, job count."""
        running = [j.record for j in self.jobs.values() if not j.record.terminal]
        # Records are checked at submit, but a journal written by an older agent may hold
        # anything (cpus NaN): this feeds every Hello, so it must never raise.
        return {
            "gpus_free": len(self.gpus.free),
            "cpus_reserved": math.ceil(sum(_reserved(r.cpus, MAX_CPUS) for r in running)),
            "memory_reserved_mb": int(sum(_reserved(r.memory_mb, MAX_MEMORY_MB) for r in running)),
            "running": len(running),
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

        A container job is re-adopted: its log continues from where the spool
        stopped, and one that ended meanwhile gets its result recorded. A
        process job cannot be (its pipes died with the agent): its process
        group is killed rather than left running unseen, and the job is LOST.
        """
        to_adopt = []
        for job_dir in sorted(self.home.jobs.iterdir()):
            if not (job_dir / "job.json").exists():
                continue
            record = JobRecord.load(job_dir)
            writable = not record.terminal
            job = Job(record, job_dir, LogSpool(job_dir / "log.spool", writable=writable))
            self.jobs[record.job_id] = job
            if record.terminal:
                continue
            if record.executor == "docker":
                to_adopt.append(job)
                continue
            if record.pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(record.pid, signal.SIGKILL)
            self._lose(job, "the agent restarted while the job ran; the job was ended")
        for job in to_adopt:
            await self._adopt(job)
        await self._remove_leftover_containers()

    # -- requests --------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise JobError(ErrorCode.UNKNOWN_JOB, f"no job {job_id!r} on this runner")
        return job

    async def submit(self, req: SubmitJob) -> Job:
        if not _JOB_ID.match(req.job_id):
            raise JobError(ErrorCode.BAD_REQUEST, f"invalid job id {req.job_id!r}")
        if req.job_id in self.jobs:
            raise JobError(ErrorCode.JOB_EXISTS, f"job {req.job_id!r} already exists on this runner")
        if not req.commands:
            raise JobError(ErrorCode.BAD_REQUEST, "the job has no commands")
        _check_exec_text(req)
        for path in req.artifacts:
            problem = check_artifact_path(path)
            if problem:
                raise JobError(ErrorCode.BAD_REQUEST, problem)
        if req.pull not in PULL_POLICIES:
            raise JobError(ErrorCode.BAD_REQUEST, f"pull {req.pull!r}: use one of {', '.join(PULL_POLICIES)}")
        try:
            executor, note = self.executors.choose(req.image, req.executor)
        except ExecutorError as exc:
            raise JobError(ErrorCode.BAD_REQUEST, str(exc)) from None
        resources = JobResources.parse(req.resources)
        in_container = executor.name == "docker"
        try:
            gpus = self.gpus.allocate(req.job_id, resources.gpus or 0)
        except GpuError as exc:
            raise JobError(ErrorCode.BAD_REQUEST, str(exc)) from None
        job_dir = self.home.job_dir(req.job_id)
        workspace = job_dir / "workspace"
        try:
            workspace.mkdir(parents=True)
        except OSError:
            self.gpus.release(req.job_id)
            raise
        record = JobRecord(
            job_id=req.job_id, run_name=req.run_name, workflow=req.workflow,
            commands=list(req.commands), env=dict(req.env), artifacts=list(req.artifacts),
            working_dir=req.working_dir, submitted_at=time.time(),
            executor=executor.name, image=req.image if in_container else "", gpus=gpus,
            cpus=resources.cpus or 0.0, memory_mb=resources.memory_mb or 0,
        )
        job = Job(record, job_dir, LogSpool(job_dir / "log.spool"))
        self.jobs[req.job_id] = job
        record.save(job_dir)
        if note:
            self._system_line(job, note)
        try:
            if req.snapshot:
                await asyncio.to_thread(_extract, self.home, req.snapshot, (self.home.snapshots,), workspace, True)
            for tar in req.inputs:
                await asyncio.to_thread(_extract, self.home, tar, (self.home.artifacts, self.home.inputs), workspace,
                                        False)
            working_dir = (workspace / req.working_dir).resolve()
            if not working_dir.is_relative_to(workspace.resolve()) or not working_dir.is_dir():
                raise JobError(ErrorCode.BAD_REQUEST, f"working_dir {req.working_dir!r} is not a directory in the workspace")
        except (JobError, OSError, tarfile.TarError) as exc:
            message = exc.message if isinstance(exc, JobError) else f"could not start the job: {exc}"
            self._finish(job, JobState.FAILED, None, message)
            return job
        (workspace / METRICS_REL).parent.mkdir(parents=True, exist_ok=True)
        env = {**metrics_env(workspace, in_container), **req.env,
               "LANPOOL_RUN_NAME": req.run_name, "LANPOOL_JOB_ID": req.job_id}
        if req.pick_master_port:
            record.master_port = _free_port()
            env["MASTER_PORT"] = str(record.master_port)
            record.save(job_dir)
        env.update(_socket_ifname_env(env))
        if resources.gpus is not None or in_container:  # a process that did not ask sees every GPU, as before
            env.update(gpu_env(gpus, in_container))
        launch = Launch(
            req.job_id, list(req.commands), workspace, working_dir, env, run_name=req.run_name,
            image=record.image, pull=req.pull, gpus=tuple(gpus),
            memory_mb=resources.memory_mb, cpus=resources.cpus, shm_size=resources.shm_size,
        )
        job.starting = self._spawn(self._start(job, executor, launch))
        await asyncio.wait([job.starting], timeout=START_WAIT_S)
        return job

    def stop(self, job_id: str, abort: bool, grace_s: float | None) -> Job:
        job = self.get(job_id)
        if job.record.terminal:
            return job
        job.record.stop_requested = True
        job.record.abort_requested = job.record.abort_requested or abort
        job.record.save(job.dir)
        verb = "abort" if abort else "stop"
        if job.execution is None:
            # Not started yet. A container job may be pulling its image: that
            # is given up. A process starts at once: `_start` then signals it.
            self._system_line(job, f"lanpool: {verb} requested before the job started")
            if job.starting is not None and job.record.executor == "docker":
                job.starting.cancel()
            return job
        grace = self.grace_s if grace_s is None else max(0.0, grace_s)
        self._system_line(job, f"lanpool: {verb} requested; SIGTERM, SIGKILL after {grace:g}s")
        job.execution.send_signal(signal.SIGTERM)
        self._spawn(self._kill_after(job, grace))
        return job

    async def shutdown(self, grace_s: float) -> None:
        """Agent exit: process jobs are stopped (they cannot be re-adopted);
        container jobs keep running, and the next start re-adopts them."""
        running = [j for j in self.jobs.values() if not j.record.terminal and j.execution]
        processes = [j for j in running if j.record.executor != "docker"]
        for job in processes:
            self.stop(job.record.job_id, abort=False, grace_s=grace_s)
        if processes:
            await asyncio.wait([asyncio.ensure_future(self.wait_terminal(j)) for j in processes], timeout=grace_s + 10)
        for job in running:
            if job.record.executor == "docker" and not job.record.terminal:
                log.info("job %s keeps running in container %s", job.record.job_id, job.record.container_id[:12])
                await job.execution.detach()

    async def wait_terminal(self, job: Job) -> None:
        while not job.record.terminal:
            await job.changed.wait()

    # -- internals -------------------------------------------------------------

    def _output(self, job: Job, stream: str, data: bytes) -> None:
        if job.record.terminal:  # a late line (from a pull thread) after the spool was closed
            return
        job.spool.append(stream, data)
        job.notify()

    def _sink(self, job: Job):
        def sink(stream: str, data: bytes, cut: bool = False) -> None:
            record = job.record
            if cut and not record.terminal:
                # Noted before the record is written (see JobRecord.log_cuts);
                # the previous one's record was written, so it counts for sure.
                _settle_last_cut(record, job.spool.size)
                record.last_cut = [stream, job.spool.size]
                record.save(job.dir)
            self._output(job, stream, data)

        return sink

    def _system_line(self, job: Job, text: str) -> None:
        self._output(job, "sys", text.encode(errors="replace") + b"\n")

    async def _start(self, job: Job, executor: Executor, launch: Launch) -> None:
        record = job.record
        try:
            execution = await executor.start(launch, self._sink(job))
        except asyncio.CancelledError:
            if not record.stop_requested:
                raise  # the agent is exiting: the journal keeps the job for the next start
            state = JobState.ABORTED if record.abort_requested else JobState.STOPPED
            self._finish(job, state, None, "stopped before the job started")
            return
        except (ExecutorError, OSError) as exc:
            message = str(exc) if isinstance(exc, ExecutorError) else f"could not start the job: {exc}"
            self._finish(job, JobState.FAILED, None, message)
            return
        finally:
            job.starting = None
        job.execution = execution
        record.pid = execution.pid
        record.container_id = getattr(execution, "container_id", "")
        record.state = JobState.RUNNING
        record.started_at = time.time()
        record.save(job.dir)
        job.notify()
        self._changed()
        self._watch_metrics(job)
        if record.stop_requested:  # asked while it was starting
            self._system_line(job, f"lanpool: SIGTERM, SIGKILL after {self.grace_s:g}s")
            execution.send_signal(signal.SIGTERM)
            self._spawn(self._kill_after(job, self.grace_s))
        self._spawn(self._monitor(job))
        log.info("job %s started (%s)", record.job_id,
                 f"container {record.container_id[:12]}" if record.container_id else f"pid {record.pid}")

    async def _adopt(self, job: Job) -> None:
        """Take a container job back after a restart (see load_journal)."""
        record = job.record
        docker = self.executors.docker
        if docker is None:
            self._lose(job, "the agent restarted without a Docker engine; the job's container was not re-adopted")
            return
        _settle_last_cut(record, job.spool.size)
        delivered = await asyncio.to_thread(_spooled_bytes, job.spool, record.log_cuts)
        try:
            execution = await docker.adopt(record.job_id, self._sink(job), delivered)
        except ExecutorError as exc:
            self._lose(job, f"the agent restarted and could not re-adopt the job's container: {exc}")
            return
        if execution is None:
            self._lose(job, "the agent restarted before the job's container started"
                       if record.state == JobState.SUBMITTED else "the agent restarted and the job's container was gone")
            return
        job.execution = execution
        self.gpus.claim(record.job_id, record.gpus)
        if record.state == JobState.SUBMITTED:
            record.state = JobState.RUNNING
            record.started_at = time.time()
        record.container_id = execution.container_id
        record.save(job.dir)
        self._system_line(job, f"lanpool: agent restarted; re-attached to container {execution.container_id[:12]}")
        self._watch_metrics(job)  # from the last offset the journal saved: a few values may repeat
        if record.stop_requested:  # a stop was under way: carry it through
            execution.send_signal(signal.SIGTERM)
            self._spawn(self._kill_after(job, self.grace_s))
        self._spawn(self._monitor(job))
        log.info("job %s re-adopted (container %s)", record.job_id, execution.container_id[:12])

    async def _remove_leftover_containers(self) -> None:
        """Remove this agent's containers whose job is over or unknown: logs and artifacts are safe."""
        docker = self.executors.docker
        if docker is None:
            return
        active = {job_id for job_id, job in self.jobs.items() if not job.record.terminal}
        try:
            removed = await docker.remove_leftovers(active)
        except ExecutorError as exc:
            log.warning("cannot clean up old containers: %s", exc)
            return
        if removed:
            log.info("removed %d leftover container(s)", len(removed))

    async def _kill_after(self, job: Job, grace: float) -> None:
        try:
            await asyncio.wait_for(self.wait_terminal(job), grace)
        except TimeoutError:
            if job.execution is not None and not job.record.terminal:
                self._system_line(job, f"lanpool: still running {grace:g}s after SIGTERM; SIGKILL")
                job.execution.send_signal(signal.SIGKILL)

    async def _monitor(self, job: Job) -> None:
        assert job.execution is not None
        record = job.record
        try:
            code = await job.execution.wait()
        except ExecutorError as exc:
            await self._finish_after_metrics(job, JobState.FAILED, None, str(exc))
            return
        except Exception as exc:  # a bug must not leave the job RUNNING forever
            log.exception("job %s: waiting for its end failed", record.job_id)
            await self._finish_after_metrics(job, JobState.FAILED, None, f"the agent lost track of the job: {exc}")
            return
        if record.abort_requested:
            state = JobState.ABORTED
        elif record.stop_requested:
            state = JobState.STOPPED
        else:
            state = JobState.DONE if code == 0 else JobState.FAILED
        error = "" if code == 0 or state is not JobState.FAILED else f"exited with code {code}"
        if code != 0 and getattr(job.execution, "oom_killed", False):
            limit = getattr(job.execution, "memory_limit", 0)
            error = "killed: out of memory" + (f" (limit {limit / 2**20:g} MiB)" if limit else "")
            self._system_line(job, f"lanpool: {error}")
        if state is not JobState.ABORTED and record.artifacts:
            await self._pack(job)
        await self._finish_after_metrics(job, state, code, error)
        remove = getattr(job.execution, "remove", None)
        if remove is not None:  # the log is spooled and the artifacts packed: the container can go
            await remove()

    async def _pack(self, job: Job) -> None:
        dest = self.home.artifacts / f"{job.record.job_id}.tar"
        try:
            files, warnings = await asyncio.to_thread(
                pack_artifacts, job.dir / "workspace", job.record.artifacts, dest
            )
        except OSError as exc:
            self._system_line(job, f"lanpool: packing artifacts failed: {exc}")
            return
        for warning in warnings:
            self._system_line(job, f"lanpool: {warning}")
        job.record.artifacts_archive = dest.relative_to(self.home.transfer).as_posix()
        job.record.artifact_files = [{"path": f.path, "size": f.size} for f in files]

    def _watch_metrics(self, job: Job) -> None:
        job.metrics = MetricsTail(job.dir / "workspace", job.record.metrics_offset)
        self._spawn(self._tail_metrics(job))

    async def _tail_metrics(self, job: Job) -> None:
        while not job.record.terminal:
            await self._drain_metrics(job)
            await asyncio.sleep(METRICS_POLL_S)

    async def _drain_metrics(self, job: Job, final: bool = False) -> None:
        """Spool the job's new metric lines. The file is the job's: read in a thread
        (see MetricsTail), so nothing it does can stall the event loop."""
        async with job.metrics_lock:  # the poll and the final read: each line spooled once
            if job.metrics is None or job.record.terminal:
                return
            data = await asyncio.to_thread(job.metrics.read, final)
            if data and not job.record.terminal:
                job.record.metrics_offset = job.metrics.offset
                self._output(job, "met", data)

    async def _finish_after_metrics(self, job: Job, state: JobState, code: int | None, error: str) -> None:
        await self._drain_metrics(job, final=True)  # the last values, before the spool closes
        self._finish(job, state, code, error)

    def _finish(self, job: Job, state: JobState, code: int | None, error: str) -> None:
        record = job.record
        error = clip(error, _ERROR_CHARS)  # may quote a tar member's name or a peer's value: bounded
        if error and state is JobState.FAILED and not code:
            self._system_line(job, f"lanpool: {error}")
        elif error and state in (JobState.STOPPED, JobState.ABORTED) and code is None:
            self._system_line(job, f"lanpool: {error}")
        record.state = state
        record.exit_code = code
        record.error = error
        record.finished_at = time.time()
        record.save(job.dir)
        job.spool.close()
        self.gpus.release(record.job_id)
        job.notify()
        self._changed()
        log.info("job %s %s (exit %s)", record.job_id, state, code)

    def _lose(self, job: Job, error: str) -> None:
        self._system_line(job, f"lanpool: {error}")
        self._finish(job, JobState.LOST, None, error)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _settle_last_cut(record: JobRecord, spool_size: int) -> None:
    """Count the latest cut if its record reached the spool, then forget it."""
    if record.last_cut:
        stream, offset = record.last_cut
        if offset < spool_size:
            record.log_cuts[stream] = record.log_cuts.get(stream, 0) + 1
        record.last_cut = []


def _spooled_bytes(spool: LogSpool, cuts: dict[str, int]) -> dict[str, int]:
    """Bytes of each job stream the spool holds, as the job printed them (the `cuts` newlines taken off)."""
    counts = {"out": 0, "err": 0}
    seq = 0
    while records := spool.read(seq, 4 * 1024 * 1024):
        for rec in records:
            if rec.stream in counts:
                counts[rec.stream] += len(rec.data)
            seq = rec.seq + rec.n_lines
    return {stream: n - cuts.get(stream, 0) for stream, n in counts.items()}


def _free_port() -> int:
    """A TCP port free now, for torch.distributed's rendezvous on this node."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


def _socket_ifname_env(env: dict[str, str]) -> dict[str, str]:
    """GLOO/NCCL_SOCKET_IFNAME: the interface that carries this node's LAN address."""
    addr = env.get("LANPOOL_NODE_ADDR")
    if not addr:
        return {}
    import ifaddr

    for adapter in ifaddr.get_adapters():
        if any(ip.ip == addr for ip in adapter.ips):
            return {k: env.get(k) or adapter.nice_name for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}
    return {}


def _reserved(value, limit: float) -> float:
    """A recorded reservation as a number the bookkeeping can add: 0 unless finite, positive, capped."""
    try:
        num = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return min(num, limit) if math.isfinite(num) and num > 0 else 0.0


def _check_exec_text(req: SubmitJob) -> None:
    """Refuse at submit what exec() and the environment cannot carry, instead of a job
    that fails obscurely when it starts (a NUL byte, an env name with '=')."""
    for i, command in enumerate(req.commands):
        if "\0" in command:
            raise JobError(ErrorCode.BAD_REQUEST, f"commands[{i}] holds a NUL character")
    for key, value in req.env.items():
        if not key or "=" in key or "\0" in key:
            raise JobError(ErrorCode.BAD_REQUEST, f"env name {clip(repr(key), 40)} is not a valid variable name")
        if "\0" in value:
            raise JobError(ErrorCode.BAD_REQUEST, f"env {clip(repr(key), 40)} holds a NUL character")


def _extract(home: AgentHome, tar_path: str, allowed: tuple[Path, ...], workspace: Path, links: bool) -> None:
    """Unpack an uploaded tar (snapshot or input) that must sit in one of the `allowed` dirs.

    The tar is untrusted (an input may be another runner's artifacts): a plain
    tar only (mode "r:": no compression to inflate 100 KB into gigabytes);
    regular files and directories, no hard links, devices, FIFOs or sparse
    files, so what is written is at most the tar's own size; symlinks only
    with `links` (a snapshot keeps the repo's links), created after every
    file (nothing of the tar is written through one), and each must resolve
    inside the workspace once all exist.
    """
    src = (home.transfer / tar_path).resolve()
    missing = JobError(ErrorCode.BAD_REQUEST, f"{clip(repr(tar_path))} was not uploaded to this runner")
    if not any(src.is_relative_to(d.resolve()) for d in allowed):
        raise missing
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise missing from None
    with os.fdopen(fd, "rb") as fh:
        tar_size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise missing
        with tarfile.open(fileobj=fh, mode="r:") as tar:
            files, symlinks, total = [], [], 0
            for member in tar:  # headers only: nothing is written before every member is checked
                if member.isdir() or (member.isreg() and not member.issparse()):
                    total += member.size
                    if total > tar_size:
                        raise tarfile.TarError(f"{tar_path}: members claim more bytes than the tar holds")
                    files.append(member)
                elif member.issym() and links:
                    symlinks.append(member)
                else:
                    raise JobError(ErrorCode.BAD_REQUEST, f"{clip(repr(tar_path))}: {clip(repr(member.name))} is "
                                                          f"{_member_kind(member)}: only files and directories"
                                                          f"{' (and links inside the workspace)' if links else ''} "
                                                          "are unpacked")
            tar.extractall(workspace, members=files, filter="data")  # 'data' refuses paths leaving the dir
            tar.extractall(workspace, members=symlinks, filter="data")
    root = workspace.resolve()
    # Checked with all links in place, so a chain of links (each fine alone) cannot lead out either.
    leaving = [m.name for m in symlinks if not (workspace / m.name).resolve().is_relative_to(root)]
    for name in leaving:
        remove_entry(workspace, name)  # nothing later may follow it (its parents are not followed either)
    if leaving:
        raise JobError(ErrorCode.BAD_REQUEST, f"{clip(repr(tar_path))}: link {clip(repr(leaving[0]))} "
                                              "leads out of the workspace")


def _member_kind(member: tarfile.TarInfo) -> str:
    if member.islnk():
        return "a hard link"
    if member.issym():
        return "a symlink"
    if member.issparse():
        return "a sparse file"
    if member.isfifo():
        return "a FIFO"
    if member.isdev():
        return "a device"
    return f"of tar type {member.type!r}"
