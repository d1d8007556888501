"""A started job watched to its end: its start, its stop signals and time limit, its
metrics tailed into the spool, and its outcome handed back to the manager.

The manager (agent.jobs.manager) owns the queue and what jobs hold; it gives the
supervisor its way to run background tasks (`spawn`, strong references kept
there), to end a job (`finish`: agent.jobs.end, then the queue moves on), and to
say that what the runner has free changed (`changed`). Nothing here imports the
manager, so the dependency points one way.
"""

import asyncio
import logging
import signal
import time
from collections.abc import Callable, Coroutine
from typing import Any

from lanpool.agent.executors import Execution, Executor, ExecutorError, Launch
from lanpool.agent.host.gpu_telemetry import telemetry
from lanpool.agent.jobs.end import ended_state, list_job_artifacts
from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.limits import human_duration
from lanpool.agent.workspace.metrics_tail import POLL_S as METRICS_POLL_S
from lanpool.agent.workspace.metrics_tail import MetricsTail
from lanpool.protocol import JobState

log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]
Finish = Callable[[Job, JobState, int | None, str], None]


class Supervisor:
    def __init__(self, grace_s: float, spawn: Spawn, finish: Finish, changed: Callable[[], None]) -> None:
        self.grace_s = grace_s
        self._spawn = spawn
        self._finish = finish
        self._changed = changed

    async def start(self, job: Job, executor: Executor, launch: Launch) -> None:
        record = job.record
        try:
            execution = await executor.start(launch, job.sink())
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
        self.running(job, execution, adopted=False)

    def running(self, job: Job, execution: Execution, adopted: bool) -> None:
        """The job runs (just started, or re-adopted after a restart): journal it and supervise it."""
        record = job.record
        job.execution = execution
        handle = execution.describe()
        record.pid, record.container_id = handle.pid, handle.container_id
        if record.state == JobState.SUBMITTED:
            record.state = JobState.RUNNING
            record.attempt_started_at = time.time()
            record.started_at = record.started_at or record.attempt_started_at  # a retry keeps the job's start
        record.save(job.dir)
        if adopted:
            job.system_line(f"lanpool: agent restarted; re-attached to {handle}")
        job.notify()
        self._changed()
        self._watch_metrics(job)
        self._spawn(telemetry().watch(job))  # the GPUs it holds, sampled into its metrics
        if record.max_duration_s > 0:
            self._spawn(self._time_limit(job, execution))
        if record.idle_s > 0:
            self._spawn(self._idle_limit(job, execution))
        # A stop (or its gang's restart) asked while it was starting, or under way at the agent's restart
        if record.stop_requested or record.restart_to > record.attempt:
            if not adopted:
                job.system_line(f"lanpool: SIGTERM, SIGKILL after {self.grace_s:g}s")
            self.terminate(job, self.grace_s)
        job.on_write_failure = lambda: self._cannot_log(job, execution)
        if job.write_failed:  # its log was refused while it started (a pip install's output)
            self._cannot_log(job, execution)
        self._spawn(self._monitor(job))
        log.info("job %s %s (%s)", record.job_id, "re-adopted" if adopted else "started", handle)

    def terminate(self, job: Job, grace: float) -> None:
        """SIGTERM now, SIGKILL after `grace` seconds unless the job has ended."""
        assert job.execution is not None
        job.execution.send_signal(signal.SIGTERM)
        self._spawn(self._kill_after(job, job.execution, grace))

    def _cannot_log(self, job: Job, execution: Execution) -> None:
        """Its log cannot take its output (a full disk): stopped, so that it neither runs on unseen
        nor keeps filling the disk; it then fails with why (agent.jobs.end.ended_state)."""
        if job.execution is execution and not job.record.terminal:
            job.system_line(f"lanpool: {job.write_failed}; SIGTERM, SIGKILL after {self.grace_s:g}s")
            self.terminate(job, self.grace_s)

    async def _kill_after(self, job: Job, execution: Execution, grace: float) -> None:
        try:  # this run's end: the job's, or a retry's (which starts a new execution)
            await asyncio.wait_for(job.wait_run_over(execution), grace)
        except TimeoutError:
            if job.execution is execution and not job.record.terminal:
                log.info("job %s: still running %gs after SIGTERM; SIGKILL", job.record.job_id, grace)
                job.system_line(f"lanpool: still running {grace:g}s after SIGTERM; SIGKILL")
                execution.send_signal(signal.SIGKILL)

    async def _idle_limit(self, job: Job, execution: Execution) -> None:
        """A dev environment's idle limit: stopped once no session (exec, shell, the dev sshd's
        logins, a forwarded connection to its ports) has been open for `idle_s`, counted from the last one's end, else from its start."""
        record = job.record
        every = min(30.0, max(0.5, record.idle_s / 4))
        while True:
            await asyncio.sleep(every)
            if job.execution is not execution or record.terminal or record.stop_requested:
                return
            since = job.idle_since or record.attempt_started_at or record.started_at or time.time()
            if job.sessions == 0 and time.time() - since >= record.idle_s:
                break
        record.idled_out = True
        self._limit_reached(job, f"idle {human_duration(record.idle_s)} with no session")

    async def _time_limit(self, job: Job, execution: Execution) -> None:
        """max_duration: counted from the start (an adopted job keeps its start), then a stop."""
        record = job.record
        started = record.attempt_started_at or record.started_at or time.time()
        await asyncio.sleep(max(0.0, started + record.max_duration_s - time.time()))
        if job.execution is not execution or record.terminal or record.stop_requested:
            return
        record.timed_out = True
        self._limit_reached(job, f"max_duration {human_duration(record.max_duration_s)} reached")

    def _limit_reached(self, job: Job, what: str) -> None:
        """A limit of the job's own (its flag set by the caller) stops it: journalled, said, SIGTERM."""
        job.record.stop_requested = True
        job.record.save(job.dir)
        job.system_line(f"lanpool: {what}; SIGTERM, SIGKILL after {self.grace_s:g}s")
        self.terminate(job, self.grace_s)

    async def _monitor(self, job: Job) -> None:
        execution = job.execution
        assert execution is not None
        try:
            outcome = await execution.wait()
        except ExecutorError as exc:
            await self._finish_after_metrics(job, JobState.FAILED, None, str(exc))
            return
        except Exception as exc:  # a bug must not leave the job RUNNING forever
            log.exception("job %s: waiting for its end failed", job.record.job_id)
            await self._finish_after_metrics(job, JobState.FAILED, None, f"the agent lost track of the job: {exc}")
            return
        state, error = ended_state(job, outcome)
        if state is not JobState.ABORTED and job.record.artifacts:
            await list_job_artifacts(job, execution)
        await self._finish_after_metrics(job, state, outcome.exit_code, error)
        await execution.remove()  # the log is spooled and the artifacts listed

    # -- metrics ---------------------------------------------------------------

    def _watch_metrics(self, job: Job) -> None:
        job.metrics = MetricsTail(job.dir / "workspace", job.record.metrics_offset)
        self._spawn(self._tail_metrics(job, job.metrics))

    async def _tail_metrics(self, job: Job, tail: MetricsTail) -> None:
        while not job.record.terminal and job.metrics is tail:  # a retry's start brings its own
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
                job.output("met", data)

    async def _finish_after_metrics(self, job: Job, state: JobState, code: int | None, error: str) -> None:
        await self._drain_metrics(job, final=True)  # the last values, before the spool closes
        self._finish(job, state, code, error)
