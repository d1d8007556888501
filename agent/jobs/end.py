"""The end of a job's run: how it ended read as a state, its artifacts listed, and its
record settled, either as ended or, when its retry policy says so, back in the queue.

Only the job's own record and log are written here; what the job held (GPUs) and
what starts next are the manager's (agent.jobs.manager), which calls `settle` from its
`_finish`.
"""

import asyncio
import logging
import time
from pathlib import Path

from lanpool.agent.executors import Execution, Outcome
from lanpool.agent.executors.base import CopiesOut
from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.limits import human_duration, retries
from lanpool.agent.jobs.usage import record_usage
from lanpool.agent.workspace.artifacts import list_artifacts
from lanpool.protocol import JobState
from lanpool.protocol.errors import clip

log = logging.getLogger(__name__)

_ERROR_CHARS = 2000  # of a job's recorded error (JobStatus.error)


def ended_state(job: Job, outcome: Outcome) -> tuple[JobState, str]:
    """The state and error of a run that ended: a stop asked for wins over the exit code,
    and a time limit or the kernel's OOM killer is named rather than a bare exit code."""
    record = job.record
    code = outcome.exit_code
    if record.abort_requested:
        state = JobState.ABORTED
    elif record.stop_requested:
        state = JobState.STOPPED
    else:
        state = JobState.DONE if code == 0 else JobState.FAILED
    error = "" if code == 0 or state is not JobState.FAILED else f"exited with code {code}"
    if job.lost_at_shutdown and state is JobState.FAILED:  # ended by its agent's exit, not by itself
        state, error = JobState.LOST, "its agent shut down"
    if record.timed_out:
        error = f"stopped: max_duration {human_duration(record.max_duration_s)} reached"
    elif record.idled_out:
        error = f"stopped: idle {human_duration(record.idle_s)} with no session"
    elif outcome.ended_by and state is JobState.FAILED:
        error = f"stopped: {outcome.ended_by} reached"
    if outcome.oom_error():
        error = outcome.oom_error()
        job.system_line(f"lanpool: {error}")
    if job.write_failed and state in (JobState.DONE, JobState.FAILED):  # its log lost output: not a success
        state, error = JobState.FAILED, job.write_failed
    return state, error


async def list_job_artifacts(job: Job, execution: Execution | None = None) -> None:
    """List the artifact files (no copy: GetArtifacts streams them from the workspace), once a
    container job's absolute artifacts are copied out of its container into the workspace."""
    absolute = [p for p in job.record.artifacts if p.startswith("/")]
    if absolute and isinstance(execution, CopiesOut):
        for line in await execution.copy_out(absolute, job.dir / "workspace"):
            job.system_line(f"lanpool: {line}")
    try:
        files, warnings = await asyncio.to_thread(list_artifacts, job.dir / "workspace", job.record.artifacts)
    except OSError as exc:
        job.system_line(f"lanpool: listing artifacts failed: {exc}")
        return
    for warning in warnings:
        job.system_line(f"lanpool: {warning}")
    job.record.artifact_files = [{"path": f.path, "size": f.size} for f in files]


def settle(job: Job, state: JobState, code: int | None, error: str, ledger: Path | None = None) -> None:
    """Write the run's end into the job's record and log: its final state, or, when its
    retry policy takes this end, its return to the queue. A job that ran and ended gets its
    line in the usage `ledger` (agent.jobs.usage) too."""
    job.flush_output()  # its output is over: what masking held back at a cut (agent.jobs.masking)
    record = job.record
    error = clip(error, _ERROR_CHARS)  # may quote a tar member's name or a peer's value: bounded
    gang_restart = record.restart_to > record.attempt and not record.stop_requested  # its gang starts again
    if gang_restart or retries(record, state):
        _requeue(job, state, error)
        return
    # A failure without an exit code, or a stop before the job ran, is said in the log too:
    # nothing the job printed explains it.
    if error and state is JobState.FAILED and not code:
        job.system_line(f"lanpool: {error}")
    elif error and state in (JobState.STOPPED, JobState.ABORTED) and code is None:
        job.system_line(f"lanpool: {error}")
    record.state = state
    record.exit_code = code
    record.error = error
    record.finished_at = time.time()
    if ledger is not None:  # before the record: a crash between them settles it again, counted once
        record_usage(ledger, record)
    record.save(job.dir)
    job.spool.close()
    log.info("job %s %s (exit %s)", record.job_id, state, code)


def _requeue(job: Job, state: JobState, error: str) -> None:
    """A retry: the job waits out its delay in the queue (keeping its place), then starts
    again in the same workspace, from its newest checkpoint (agent.jobs.launch)."""
    record = job.record
    gang_restart = record.restart_to > record.attempt
    record.attempt = max(record.attempt + 1, record.restart_to)
    record.restart_to = 0
    why = "its gang starts again" if gang_restart else error or str(state).lower()
    job.system_line(f"lanpool: {why}; retry {record.attempt} of {record.retry_limit} in {record.retry_delay_s:g}s")
    record.last_end = why
    record.state = JobState.QUEUED
    record.not_before = time.time() + record.retry_delay_s
    record.exit_code, record.pid, record.container_id, record.attempt_started_at = None, None, "", None
    record.gpus = []
    job.execution = None  # the run is over (Job.wait_run_over); the next start brings its own
    record.save(job.dir)
    job.write_failed = ""  # the next run's log starts afresh (when the disk has room again)
    job.metrics = None  # the old tail stops (its offset is journalled); the next start brings its own
    log.info("job %s %s: retry %d of %d", record.job_id, state, record.attempt, record.retry_limit)
