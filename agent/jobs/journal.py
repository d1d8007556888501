"""The job journal: each job's state on disk, so jobs outlive connections and restarts."""

import contextlib
import errno
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lanpool.agent.home import write_json_atomic
from lanpool.protocol import ArtifactFile, JobState, JobStatus

log = logging.getLogger(__name__)


@dataclass
class JobRecord:
    job_id: str
    run_name: str
    workflow: str
    commands: list[str]
    env: dict[str, str]
    artifacts: list[str]
    # The controller key that submitted it (agent.jobs.owner): its fingerprint and label.
    owner: str = ""
    owner_label: str = ""
    working_dir: str = ""
    state: str = JobState.SUBMITTED
    exit_code: int | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    error: str = ""
    pid: int | None = None
    stop_requested: bool = False
    abort_requested: bool = False
    artifact_files: list[dict[str, Any]] = field(default_factory=list)
    executor: str = "process"  # "process" or "docker"
    image: str = ""  # the image a docker job runs in
    container_id: str = ""
    gpus: list[int] = field(default_factory=list)  # host GPU indices the job holds while it runs
    master_port: int = 0  # node 0's MASTER_PORT, sent at its gang's Go (agent.gang.hub)
    metrics_offset: int = 0  # bytes of the workspace's metrics file already spooled
    cpus: float = 0.0  # CPUs and memory the job asked for: reserved while it runs
    memory_mb: int = 0
    ports: list[int] = field(default_factory=list)  # declared: forwarded to authorized controllers while it runs
    gpu_count: int = 0  # GPUs asked for (`gpus` holds the indices once it runs)
    # Bytes its submit staged into the workspace: counted against its controller's
    # --max-staged-per-controller while it has not ended (agent.jobs.admission).
    staged_bytes: int = 0
    # Spool records whose last newline the executor added (a cut line), so
    # that after a restart the bytes a container printed are told exactly
    # from the spool: a count per stream, and the latest one as [stream, spool
    # offset], noted before its record is written (it counts only if the
    # spool reaches past that offset).
    log_cuts: dict[str, int] = field(default_factory=dict)
    last_cut: list[Any] = field(default_factory=list)
    # The same for secrets written *** (Job.masks): bytes the spool holds minus
    # bytes the job printed, per stream, and the latest change as [stream,
    # spool offset, bytes], noted before its record is written.
    log_masked: dict[str, int] = field(default_factory=dict)
    last_mask: list[Any] = field(default_factory=list)
    # The runner's queue (agent.jobs.queue): order of arrival, and a retry's delay.
    queued_seq: int = 0
    priority: int = 0  # orders its owner's own waiting jobs, higher first (agent.jobs.turns)
    not_before: float = 0.0
    # Time limit and retries (agent.jobs.limits), as the SubmitJob asked.
    max_duration_s: float = 0.0
    idle_s: float = 0.0  # a dev environment: stopped after this long with no session into it (0: never)
    retry_on: list[str] = field(default_factory=list)
    retry_limit: int = 0
    retry_delay_s: float = 0.0
    attempt: int = 0  # retries so far
    # A gang's restart (agent.gang.hub): the attempt this member's run ends into, whatever
    # its own end was (0: none asked). A member never retries alone: its gang starts again.
    restart_to: int = 0
    last_end: str = ""  # why its last attempt ended, when it was retried (told to its gang)
    attempt_started_at: float | None = None  # this attempt's start (max_duration); started_at is the job's
    timed_out: bool = False
    idled_out: bool = False  # stopped by its idle limit (agent.jobs.supervision)
    # A detached DAG's step (agent.jobs.dag): the jobs it waits for, and its run key's sha256.
    after: list[str] = field(default_factory=list)
    run_key_hash: str = ""
    # A detached gang's member (agent.gang.hub): its gang, rank and order; node 0 keeps its token's sha256.
    gang_id: str = ""
    gang_size: int = 0
    gang_rank: int = 0
    gang_order: float = 0.0
    gang_token_hash: str = ""

    def settle_last_cut(self, spool_size: int) -> None:
        """Count the latest cut (and masking) if its record reached the spool (`spool_size` bytes), then forget it."""
        if self.last_cut:
            stream, offset = self.last_cut
            if offset < spool_size:
                self.log_cuts[stream] = self.log_cuts.get(stream, 0) + 1
            self.last_cut = []
        self.settle_last_mask(spool_size)

    def settle_last_mask(self, spool_size: int) -> None:
        """Count the latest masking change if its record reached the spool, then forget it."""
        if self.last_mask:
            stream, offset, grew = self.last_mask
            if offset < spool_size:
                self.log_masked[stream] = self.log_masked.get(stream, 0) + grew
            self.last_mask = []

    @property
    def terminal(self) -> bool:
        return JobState(self.state).is_terminal()

    def save(self, job_dir: Path) -> bool:
        """Write the record; False (said in the agent's log) when the disk refused it. A journal
        that cannot be written must not take the agent, or the job's end, down with it: the
        record in memory stays the truth, and the next save that finds room catches up."""
        path = job_dir / "job.json"
        data = asdict(self)
        try:
            write_json_atomic(path, data)
            return True
        except OSError as exc:
            with contextlib.suppress(OSError):  # a half-written copy holds space a full disk needs
                path.with_name(path.name + ".tmp").unlink(missing_ok=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT) and _rewrite_in_place(path, data):
                return True
            log.warning("job %s: its journal could not be written: %s", self.job_id, exc.strerror or exc)
            return False

    @classmethod
    def load(cls, job_dir: Path) -> "JobRecord":
        data = json.loads((job_dir / "job.json").read_text())
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_status(self, log_lines: int, artifacts_from: int = 0, artifacts_max: int | None = None) -> JobStatus:
        """The status, with the artifact files from `artifacts_from` (`artifacts_max` of them at most)."""
        artifacts, total = artifact_page(self.artifact_files, artifacts_from, artifacts_max)
        return JobStatus(
            job_id=self.job_id,
            state=str(self.state),
            exit_code=self.exit_code,
            submitted_at=self.submitted_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
            error=self.error,
            log_lines=log_lines,
            artifacts=artifacts,
            attempt=self.attempt,
            retry_limit=self.retry_limit,
            artifacts_total=total,
        )


def _rewrite_in_place(path: Path, data: dict[str, Any]) -> bool:
    """On a full disk, overwrite the record where it lies, when it fits in the blocks the file
    already has: that takes no new space (a new copy, to rename over it, would), so a job's end
    is recorded even when a job filled the disk. Never when it would not fit: it could tear."""
    body = json.dumps(data, indent=1, sort_keys=True).encode()  # as write_json_atomic writes it
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if len(body) > os.fstat(fd).st_blocks * 512:
            return False
        os.pwrite(fd, body, 0)
        os.ftruncate(fd, len(body))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def artifact_page(
    files: list[dict[str, Any]], start: int = 0, limit: int | None = None
) -> tuple[list[ArtifactFile], int]:
    """The listed files from `start` (`limit` at most) and JobStatus.artifacts_total for them:
    how many there are in all, or 0 when the page is the whole list."""
    page = files[start:] if limit is None else files[start : start + limit]
    return [ArtifactFile(**f) for f in page], 0 if len(page) == len(files) else len(files)
