"""What a SubmitJob must satisfy before the agent writes anything for it.

Each check names the field at fault in one line (JobError, BAD_REQUEST), so a
request that cannot run is refused at submit instead of failing obscurely when
the job starts.
"""

import re
from collections.abc import Mapping

from lanpool.agent.errors import JobError
from lanpool.agent.workspace.artifacts import check_artifact_path
from lanpool.protocol import ErrorCode, SubmitJob
from lanpool.protocol.errors import clip
from lanpool.protocol.resources import Resources, ResourcesError

_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
PULL_POLICIES = ("never", "missing", "always")
MAX_PORTS = 16  # a job's declared ports (SubmitJob.ports)


def check_job_id(job_id: str) -> None:
    if not _JOB_ID.match(job_id):
        raise JobError(ErrorCode.BAD_REQUEST, f"invalid job id {job_id!r}")


def check_request(req: SubmitJob) -> None:
    """Everything of the request but its id, executor and resources (see `parse_resources`)."""
    if not req.commands:
        raise JobError(ErrorCode.BAD_REQUEST, "the job has no commands")
    _check_exec_text(req)
    for path in req.artifacts:
        problem = check_artifact_path(path)
        if problem:
            raise JobError(ErrorCode.BAD_REQUEST, problem)
    if len(req.ports) + req.port_count > MAX_PORTS:
        n = len(req.ports) + req.port_count
        raise JobError(ErrorCode.BAD_REQUEST, f"{n} ports: a job declares at most {MAX_PORTS}")
    if req.pull not in PULL_POLICIES:
        raise JobError(ErrorCode.BAD_REQUEST, f"pull {req.pull!r}: use one of {', '.join(PULL_POLICIES)}")


def parse_resources(res: Mapping[str, object]) -> Resources:
    """SubmitJob.resources, checked (see Resources.parse); JobError naming the key otherwise."""
    try:
        return Resources.parse(res)
    except ResourcesError as exc:
        raise JobError(ErrorCode.BAD_REQUEST, str(exc)) from None


def _check_exec_text(req: SubmitJob) -> None:
    """Refuse what exec() and the environment cannot carry (a NUL byte, an env name with '=')."""
    for i, command in enumerate(req.commands):
        if "\0" in command:
            raise JobError(ErrorCode.BAD_REQUEST, f"commands[{i}] holds a NUL character")
    for key, value in req.env.items():
        if not key or "=" in key or "\0" in key:
            raise JobError(ErrorCode.BAD_REQUEST, f"env name {clip(repr(key), 40)} is not a valid variable name")
        if "\0" in value:
            raise JobError(ErrorCode.BAD_REQUEST, f"env {clip(repr(key), 40)} holds a NUL character")
