"""The job manager: starts jobs, spools their output, stops them, keeps the journal.

Jobs belong to the agent, not to a connection: a controller that disconnects
leaves its jobs running and comes back to their spooled logs.
"""

import asyncio
import contextlib
import logging
import os
import re
import signal
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.artifacts import check_artifact_path, pack_artifacts
from agent.executors import Execution, Executor, Launch
from agent.home import AgentHome
from agent.journal import JobRecord
from agent.spool import LogSpool
from protocol import ErrorCode, JobState, JobStatus, SubmitJob

log = logging.getLogger(__name__)

_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_GRACE_S = 10.0


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
    # Replaced after each set(): waiters take the current one, then re-check.
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def status(self) -> JobStatus:
        return self.record.to_status(self.spool.next_seq)


class JobManager:
    def __init__(self, home: AgentHome, executor: Executor, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.home = home
        self.executor = executor
        self.grace_s = grace_s
        self.jobs: dict[str, Job] = {}
        self._tasks: set[asyncio.Task] = set()  # strong refs to background tasks

    # -- start-up ------------------------------------------------------------

    def load_journal(self) -> None:
        """Load every job on disk; jobs that were running when the agent died are LOST.

        A process job cannot be re-adopted (its pipes died with the agent), so
        its process group is killed rather than left running unseen.
        """
        for job_dir in sorted(self.home.jobs.iterdir()):
            if not (job_dir / "job.json").exists():
                continue
            record = JobRecord.load(job_dir)
            writable = not record.terminal
            job = Job(record, job_dir, LogSpool(job_dir / "log.spool", writable=writable))
            if not record.terminal:
                if record.pid:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(record.pid, signal.SIGKILL)
                record.state = JobState.LOST
                record.error = "the agent restarted while the job ran; the job was ended"
                record.finished_at = time.time()
                record.save(job_dir)
                job.spool.append("sys", b"lanpool: agent restarted; job ended\n")
                job.spool.close()
            self.jobs[record.job_id] = job

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
        for path in req.artifacts:
            problem = check_artifact_path(path)
            if problem:
                raise JobError(ErrorCode.BAD_REQUEST, problem)
        job_dir = self.home.job_dir(req.job_id)
        workspace = job_dir / "workspace"
        workspace.mkdir(parents=True)
        record = JobRecord(
            job_id=req.job_id, run_name=req.run_name, workflow=req.workflow,
            commands=list(req.commands), env=dict(req.env), artifacts=list(req.artifacts),
            working_dir=req.working_dir, submitted_at=time.time(),
        )
        job = Job(record, job_dir, LogSpool(job_dir / "log.spool"))
        self.jobs[req.job_id] = job
        record.save(job_dir)
        try:
            if req.snapshot:
                await asyncio.to_thread(_extract, self.home, req.snapshot, (self.home.snapshots,), workspace)
            for tar in req.inputs:
                await asyncio.to_thread(_extract, self.home, tar, (self.home.artifacts, self.home.inputs), workspace)
            working_dir = (workspace / req.working_dir).resolve()
            if not working_dir.is_relative_to(workspace.resolve()) or not working_dir.is_dir():
                raise JobError(ErrorCode.BAD_REQUEST, f"working_dir {req.working_dir!r} is not a directory in the workspace")
            env = {**req.env, "LANPOOL_RUN_NAME": req.run_name, "LANPOOL_JOB_ID": req.job_id}
            launch = Launch(req.job_id, list(req.commands), workspace, working_dir, env)
            job.execution = await self.executor.start(launch, lambda stream, data: self._output(job, stream, data))
        except (JobError, OSError, tarfile.TarError) as exc:
            message = exc.message if isinstance(exc, JobError) else f"could not start the job: {exc}"
            self._finish(job, JobState.FAILED, None, message)
            return job
        record.pid = job.execution.pid
        record.state = JobState.RUNNING
        record.started_at = time.time()
        record.save(job_dir)
        job.notify()
        self._spawn(self._monitor(job))
        log.info("job %s started (pid %s)", req.job_id, record.pid)
        return job

    def stop(self, job_id: str, abort: bool, grace_s: float | None) -> Job:
        job = self.get(job_id)
        if job.record.terminal or job.execution is None:
            return job
        job.record.stop_requested = True
        job.record.abort_requested = job.record.abort_requested or abort
        job.record.save(job.dir)
        grace = self.grace_s if grace_s is None else max(0.0, grace_s)
        self._system_line(job, f"lanpool: {'abort' if abort else 'stop'} requested; SIGTERM, SIGKILL after {grace:g}s")
        job.execution.send_signal(signal.SIGTERM)
        self._spawn(self._kill_after(job, grace))
        return job

    async def shutdown(self, grace_s: float) -> None:
        """Agent exit: running jobs are stopped (they cannot be re-adopted)."""
        running = [j for j in self.jobs.values() if not j.record.terminal and j.execution]
        for job in running:
            self.stop(job.record.job_id, abort=False, grace_s=grace_s)
        if running:
            await asyncio.wait([asyncio.ensure_future(self.wait_terminal(j)) for j in running], timeout=grace_s + 10)

    async def wait_terminal(self, job: Job) -> None:
        while not job.record.terminal:
            await job.changed.wait()

    # -- internals -------------------------------------------------------------

    def _output(self, job: Job, stream: str, data: bytes) -> None:
        job.spool.append(stream, data)
        job.notify()

    def _system_line(self, job: Job, text: str) -> None:
        self._output(job, "sys", text.encode(errors="replace") + b"\n")

    async def _kill_after(self, job: Job, grace: float) -> None:
        try:
            await asyncio.wait_for(self.wait_terminal(job), grace)
        except TimeoutError:
            if job.execution is not None and not job.record.terminal:
                self._system_line(job, f"lanpool: still running {grace:g}s after SIGTERM; SIGKILL")
                job.execution.send_signal(signal.SIGKILL)

    async def _monitor(self, job: Job) -> None:
        assert job.execution is not None
        code = await job.execution.wait()
        record = job.record
        if record.abort_requested:
            state = JobState.ABORTED
        elif record.stop_requested:
            state = JobState.STOPPED
        else:
            state = JobState.DONE if code == 0 else JobState.FAILED
        if state is not JobState.ABORTED and record.artifacts:
            await self._pack(job)
        self._finish(job, state, code, "" if code == 0 or state is not JobState.FAILED else f"exited with code {code}")

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

    def _finish(self, job: Job, state: JobState, code: int | None, error: str) -> None:
        record = job.record
        if error and state is JobState.FAILED and not code:
            self._system_line(job, f"lanpool: {error}")
        record.state = state
        record.exit_code = code
        record.error = error
        record.finished_at = time.time()
        record.save(job.dir)
        job.spool.close()
        job.notify()
        log.info("job %s %s (exit %s)", record.job_id, state, code)

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _extract(home: AgentHome, tar_path: str, allowed: tuple[Path, ...], workspace: Path) -> None:
    """Unpack an uploaded tar (snapshot or input) that must sit in one of the `allowed` dirs."""
    src = (home.transfer / tar_path).resolve()
    if not any(src.is_relative_to(d.resolve()) for d in allowed) or not src.is_file():
        raise JobError(ErrorCode.BAD_REQUEST, f"{tar_path!r} was not uploaded to this runner")
    with tarfile.open(src) as tar:
        tar.extractall(workspace, filter="data")  # 'data' refuses links/paths leaving the dir
