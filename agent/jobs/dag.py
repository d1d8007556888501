"""Detached DAGs on one runner: a step waits in the queue for the steps it depends on.

When every step of a run that must run fits one runner, the controller sends
the whole chain there at once and may then go away (`run -d`). Each step's
SubmitJob names the job ids it waits for (`after`); the runner's queue
(agent.jobs.manager) keeps a step out of line until all of them are DONE, then copies
their artifacts over its workspace (as the controller would have uploaded
them: a later dependency's file wins) and lets it start. A dependency that
ends any other way (FAILED, STOPPED, LOST...) fails its dependents at once,
with the reason "dependency X failed".

Trust: `after` may name only jobs already on this runner that were submitted
with the same `run_key`, a secret the controller draws per run (only its
sha256 is kept, in the journal). So a controller cannot chain its step to, or
read the artifacts of, another controller's job, and as a step can name only
jobs that exist before it does (and never itself), no cycle can be built.
Dependencies' artifacts are read like GetArtifacts reads them: from the
listed paths, through no link that leaves the workspace, regular files only.
"""

import errno
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from lanpool.agent.errors import JobError
from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.owner import Owner, owns
from lanpool.agent.jobs.request import check_job_id
from lanpool.agent.workspace.artifacts import ArtifactChanged, resolve_listed
from lanpool.agent.workspace.files import NotARegularFile, open_regular
from lanpool.agent.workspace.staging import DIR_FLAGS, NEW_FILE, copy_fd, parent_dir_fd
from lanpool.protocol import ErrorCode, JobState, SubmitJob

MAX_AFTER = 64  # dependencies of one step: a DAG of a workflow file, not a generated graph


def key_hash(run_key: str) -> str:
    return hashlib.sha256(run_key.encode()).hexdigest() if run_key else ""


def check_after(req: SubmitJob, jobs: Mapping[str, Job], owner: Owner | None) -> None:
    """Refuse a step whose dependencies are not jobs of the same run (and owner) on this runner."""
    if not req.after:
        return
    if len(req.after) > MAX_AFTER:
        raise JobError(ErrorCode.BAD_REQUEST, f"a job may wait for at most {MAX_AFTER} jobs, not {len(req.after)}")
    if len(set(req.after)) != len(req.after):
        raise JobError(ErrorCode.BAD_REQUEST, "`after` names a job twice")
    if req.job_id in req.after:
        raise JobError(ErrorCode.BAD_REQUEST, f"job {req.job_id} cannot wait for itself (a cycle)")
    if not req.run_key:
        raise JobError(ErrorCode.BAD_REQUEST, "a job with `after` needs its run's key (run_key)")
    mine = key_hash(req.run_key)
    for dep_id in req.after:
        check_job_id(dep_id)
        dep = jobs.get(dep_id)
        if dep is None or not owns(owner, dep.record):  # another controller's job does not exist to this one
            raise JobError(
                ErrorCode.BAD_REQUEST,
                f"no job {dep_id} on this runner: a step's dependencies are submitted to the same runner first",
            )
        if not dep.record.run_key_hash or dep.record.run_key_hash != mine:
            raise JobError(
                ErrorCode.BAD_REQUEST,
                f"job {dep_id} is not part of this run: a step may wait only for its own run's jobs",
            )


def blocked(job: Job, jobs: Mapping[str, Job]) -> tuple[bool, str]:
    """(fail, reason) for a step that may not start yet: fail when a dependency ended other
    than DONE (or is gone), else wait; (False, "") when every dependency is DONE."""
    waiting = []
    for dep_id in job.record.after:
        dep = jobs.get(dep_id)
        if dep is None:
            return True, f"dependency {dep_id} is no longer on this runner"
        state = JobState(dep.record.state)
        if state is JobState.DONE:
            continue
        if state.is_terminal():
            return True, f"dependency {dep_id} ({dep.record.workflow}) {_ended(state)}"
        waiting.append(f"{dep_id} ({dep.record.workflow})")
    if waiting:
        return False, "waiting for " + ", ".join(waiting)
    return False, ""


def _ended(state: JobState) -> str:
    return "failed" if state is JobState.FAILED else f"ended {state.value.lower()}"


def stage_dependencies(job: Job, jobs: Mapping[str, Job]) -> int:
    """Copy each dependency's listed artifacts over the step's workspace, in `after` order
    (a later one's file replaces an earlier one of the same path). Returns the files copied."""
    workspace = job.dir / "workspace"
    copied = 0
    for dep_id in job.record.after:
        dep = jobs[dep_id]
        source = dep.dir / "workspace"
        for listed in dep.record.artifact_files:
            rel = str(listed.get("path", ""))
            _copy_one(source, rel, workspace)
            copied += 1
    return copied


def _copy_one(source: Path, rel: str, workspace: Path) -> None:
    try:
        src = open_regular(source.resolve(), resolve_listed(source, rel))
    except (ArtifactChanged, NotARegularFile, OSError) as exc:
        raise JobError(ErrorCode.BAD_REQUEST, f"dependency artifact {rel!r} cannot be read: {exc}") from None
    try:
        root_fd = os.open(workspace, DIR_FLAGS)
        dirs: dict[str, int] = {"": root_fd}
        try:
            dir_fd = parent_dir_fd(dirs, rel)
            name = PurePosixPath(rel).name
            try:  # the snapshot's file (or link) of that path gives way, as a later upload entry would
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno not in (errno.EISDIR, errno.EPERM):
                    raise
                raise JobError(ErrorCode.BAD_REQUEST, f"{rel!r} is a directory in the step's workspace") from None
            dst = os.open(name, NEW_FILE, 0o644, dir_fd=dir_fd)
            try:
                os.fchmod(dst, os.fstat(src).st_mode & 0o755)
                copy_fd(src, dst, os.fstat(src).st_size)
            finally:
                os.close(dst)
        finally:
            for fd in dirs.values():
                os.close(fd)
    finally:
        os.close(src)
