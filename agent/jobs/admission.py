"""What a submit checks before a job exists on this runner, and the record it starts with.

The manager (agent.jobs.manager) calls `admit` first: a request refused here leaves
nothing behind (no job dir, no journal entry). A detached gang member's token
is the one secret of the request a restarted agent still needs (agent.gang.token).
"""

import time

from lanpool.agent.errors import JobError
from lanpool.agent.executors import Executor, ExecutorChoice, ExecutorError
from lanpool.agent.jobs.dag import check_after, key_hash
from lanpool.agent.jobs.job import Job, masked_env
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.jobs.limits import check_limits
from lanpool.agent.jobs.owner import Owner
from lanpool.agent.jobs.queue import Amount, gang_fields, never_fits
from lanpool.agent.jobs.request import check_job_id, check_request, parse_resources
from lanpool.protocol import ErrorCode, FileEntry, JobState, SubmitJob

DEFAULT_MAX_QUEUED = 100  # jobs of one controller waiting in this runner's queue (`--max-queued-per-controller`)
# Of the disk holding the jobs: what one controller's unfinished jobs may have staged there
# (`--max-staged-per-controller`, default), so that another still finds room.
DEFAULT_STAGED_SHARE = 0.5


def staged_size(files: list[FileEntry]) -> int:
    """Bytes a workspace of `files` takes once staged: every path a copy, links nothing."""
    return sum(entry.size for entry in files if not entry.link and entry.size > 0)


def admit(
    req: SubmitJob,
    jobs: dict[str, Job],
    executors: ExecutorChoice,
    capacity: Amount,
    owner: Owner | None,
    max_queued: int = DEFAULT_MAX_QUEUED,
    max_staged: int | None = None,
    max_gpus: int | None = None,
) -> tuple[JobRecord, Executor, str]:
    """The QUEUED record of a new job of `owner`, its executor and a note about that choice (or "");
    JobError when the request is malformed, names a job that exists, can never fit this runner,
    would put more than `max_queued` of its controller's jobs in the queue, or more than
    `max_staged` bytes in the workspaces of its controller's unfinished jobs."""
    check_job_id(req.job_id)
    if req.job_id in jobs:
        raise JobError(ErrorCode.JOB_EXISTS, f"job {req.job_id!r} already exists on this runner")
    check_request(req)
    if owner is not None:  # one controller cannot fill a shared runner's queue (and journal) for everyone
        queued = sum(
            1 for j in jobs.values() if j.record.state == JobState.QUEUED and j.record.owner == owner.fingerprint
        )
        if queued >= max_queued:
            raise JobError(
                ErrorCode.BAD_REQUEST,
                f"{queued} of your jobs already wait in this runner's queue (at most {max_queued}, its "
                "`--max-queued-per-owner`): submit again once some have started, or stop some",
            )
    staged = staged_size(req.files)
    if owner is not None and max_staged is not None:  # nor fill its disk with workspaces waiting to run
        held = sum(
            j.record.staged_bytes
            for j in jobs.values()
            if not j.record.terminal and j.record.owner == owner.fingerprint
        )
        if held + staged > max_staged:
            raise JobError(
                ErrorCode.BAD_REQUEST,
                f"this job stages {_size(staged)} and your unfinished jobs here already hold {_size(held)}: at "
                f"most {_size(max_staged)} per controller (this runner's `--max-staged-per-controller`): submit "
                "again once some have ended, stop some, or send less",
            )
    check_limits(req)
    check_after(req, jobs, owner)
    gang = gang_fields(req)
    try:
        executor, note = executors.choose(req.image, req.executor, req.python, req.image_implicit)
    except ExecutorError as exc:
        raise JobError(ErrorCode.BAD_REQUEST, str(exc)) from None
    outside = next((p for p in req.artifacts if p.startswith("/")), None)
    if outside is not None and not executor.in_container:  # only a container's paths are copied out
        raise JobError(
            ErrorCode.BAD_REQUEST,
            f"artifact {outside!r} is outside the workspace and this runner would run the job as a process "
            "(only a container job's absolute paths are copied out): give the workflow an `image:` and a "
            "runner with Docker, or write it under the workspace",
        )
    resources = parse_resources(req.resources)
    need = Amount(resources.cpu or 0.0, resources.memory_mb or 0, resources.gpu or 0)
    problem = never_fits(need, capacity)
    if problem:
        raise JobError(ErrorCode.BAD_REQUEST, problem)
    if owner is not None and max_gpus is not None and need.gpus > max_gpus:  # it could never start here
        raise JobError(
            ErrorCode.BAD_REQUEST,
            f"the job needs {need.gpus} GPU and one controller may hold at most {max_gpus} on this runner "
            "(its `--max-gpus-per-owner`): ask for fewer, or use another runner",
        )
    record = JobRecord(
        job_id=req.job_id,
        run_name=req.run_name,
        workflow=req.workflow,
        commands=list(req.commands),
        env=masked_env(dict(req.env), req.masked),  # the real values only in memory and the job's env
        artifacts=list(req.artifacts),
        owner=owner.fingerprint if owner else "",
        owner_label=owner.label if owner else "",
        working_dir=req.working_dir,
        submitted_at=time.time(),
        state=JobState.QUEUED,
        executor=executor.name,
        image=req.image if executor.in_container else "",
        cpus=resources.cpu or 0.0,
        memory_mb=resources.memory_mb or 0,
        ports=sorted(set(req.ports)),
        gpu_count=resources.gpu or 0,
        priority=req.priority,
        queued_seq=1 + max((j.record.queued_seq for j in jobs.values()), default=0),
        max_duration_s=req.max_duration_s,
        idle_s=req.idle_s,
        retry_on=list(req.retry_on),
        retry_limit=req.retry_limit,
        retry_delay_s=req.retry_delay_s,
        after=list(req.after),
        run_key_hash=key_hash(req.run_key),
        staged_bytes=staged,
        **gang,
    )
    return record, executor, note


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
