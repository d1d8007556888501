"""A job's time limit and retries, as the runner keeps them (dstack's max_duration and
retry, Slurm's --time and --requeue): no controller needs to be alive for either.

The wire bounds (protocol.schema) keep absurd values out; this module checks
what the bounds cannot (the names in retry_on) and holds the small decisions
the job manager applies: whether an end is retried, and the checkpoint a retry
resumes from.
"""

import os
from pathlib import Path

from lanpool.agent.errors import JobError
from lanpool.agent.jobs.journal import JobRecord
from lanpool.protocol import ErrorCode, JobState, SubmitJob

RETRY_ON = ("failure", "lost")
CKPT_SUFFIX = ".ckpt"  # what training/ recipes and app/runs/resume.py take as a checkpoint
_CKPT_SCAN_LIMIT = 20000  # entries looked at in a workspace: a huge tree must not stall a retry


def check_limits(req: SubmitJob) -> None:
    """What the wire bounds cannot say about max_duration and retry; JobError naming the field."""
    for event in req.retry_on:
        if event not in RETRY_ON:
            raise JobError(ErrorCode.BAD_REQUEST, f"retry_on: {event!r} is not one of {', '.join(RETRY_ON)}")
    if req.retry_limit and not req.retry_on:
        raise JobError(ErrorCode.BAD_REQUEST, "retry_limit without retry_on: say which ends are retried")


def retries(record: JobRecord, state: JobState) -> bool:
    """Whether a job that just ended `state` runs again: its retry asks for that kind of end,
    it was not stopped (a stop or a time limit is the user's word), and attempts are left."""
    if record.stop_requested or record.attempt >= record.retry_limit:
        return False
    if state is JobState.FAILED:
        return "failure" in record.retry_on
    if state is JobState.LOST:
        return "lost" in record.retry_on
    return False


def newest_checkpoint(workspace: Path) -> Path | None:
    """The newest `*.ckpt` file under the workspace (by modification time), if any.
    Symlinks are not followed: the workspace is the job's, its links could point anywhere."""
    best: tuple[float, Path] | None = None
    seen = 0
    for root, dirs, files in os.walk(workspace, followlinks=False):
        dirs.sort()
        for name in files:
            seen += 1
            if seen > _CKPT_SCAN_LIMIT:
                return best[1] if best else None
            if not name.endswith(CKPT_SUFFIX):
                continue
            path = Path(root) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            if path.is_symlink() or not path.is_file():
                continue
            if best is None or st.st_mtime >= best[0]:
                best = (st.st_mtime, path)
    return best[1] if best else None


def human_duration(seconds: float) -> str:
    """2h, 90m, 1h30m, 45s: as a user wrote it, near enough."""
    total = int(round(seconds))
    if total <= 0:
        return f"{seconds:g}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            parts.append(f"{total // size}{unit}")
            total %= size
    return "".join(parts)
