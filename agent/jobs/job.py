"""One job on this runner: its journal record, its log spool, and what runs it."""

import asyncio
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from lanpool.agent.executors import Execution, Executor, OutputSink
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.workspace.metrics_tail import MetricsTail
from lanpool.agent.workspace.spool import LogSpool
from lanpool.protocol import JobState, JobStatus, SubmitJob


def mask_secrets(data: bytes, masks: list[bytes]) -> bytes:
    """`data` with each secret text (longest first, as the controller sends them) as ***."""
    for secret in masks:
        if secret and secret in data:
            data = data.replace(secret, b"***")
    return data


def masked_env(env: dict[str, str], masked: list[str]) -> dict[str, str]:
    """The env as the journal keeps it: a value holding a secret is *** as a whole."""
    return {k: "***" if any(m and m in v for m in masked) else v for k, v in env.items()}


@dataclass
class Job:
    record: JobRecord
    dir: Path
    spool: LogSpool
    executor: Executor | None = None  # once started or re-adopted
    execution: Execution | None = None
    starting: asyncio.Task[None] | None = None  # until started: pulling the image, creating the container
    metrics: MetricsTail | None = None
    metrics_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Replaced after each set(): waiters take the current one, then re-check.
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    # The job's secrets (SubmitJob.masked), written *** in its spool. Kept in memory only: a
    # container re-adopted after a restart is masked by the controller alone.
    masks: list[bytes] = field(default_factory=list)
    # The request as it came, secrets and all (request.json on disk has *** for them).
    request: SubmitJob | None = None
    # While QUEUED: its place in the runner's queue and why it waits (agent.jobs.queue; not journalled).
    position: int = 0
    reason: str = ""

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def status(self) -> JobStatus:
        status = self.record.to_status(self.spool.next_seq)
        if self.record.state == JobState.QUEUED:
            return dataclasses.replace(status, position=self.position, reason=self.reason)
        # started (or re-adopted), but waiting in Slurm's queue
        if self.record.state in (JobState.SUBMITTED, JobState.RUNNING) and self.reason:
            return dataclasses.replace(status, state=JobState.QUEUED, reason=self.reason)
        if self.record.attempt:
            return dataclasses.replace(status, reason=f"retry {self.record.attempt} of {self.record.retry_limit}")
        return status

    def set_pending(self, reason: str) -> None:
        """The executor's own queue (Slurm's) holds the started job, for `reason` ("" once it runs)."""
        self.reason = reason
        self.notify()

    async def wait_terminal(self) -> None:
        while not self.record.terminal:
            await self.changed.wait()

    def output(self, stream: str, data: bytes) -> None:
        if self.record.terminal:  # a late line (from a pull thread) after the spool was closed
            return
        masked = mask_secrets(data, self.masks)
        if len(masked) != len(data) and stream in ("out", "err"):
            # A re-adopted container resumes after the bytes it printed, told from the
            # spool's size: note how masking changed it (as a cut is noted) before the record.
            record = self.record
            record.settle_last_mask(self.spool.size)
            record.last_mask = [stream, self.spool.size, len(masked) - len(data)]
            record.save(self.dir)
        self.spool.append(stream, masked)
        self.notify()

    def system_line(self, text: str) -> None:
        """One of the agent's own lines in the job's log ("sys")."""
        self.output("sys", text.encode(errors="replace") + b"\n")

    def sink(self) -> OutputSink:
        """Where the executor delivers the job's output."""

        def sink(stream: str, data: bytes, cut: bool = False) -> None:
            record = self.record
            if cut and not record.terminal:
                # Noted before the record is written (see JobRecord.log_cuts);
                # the previous one's record was written, so it counts for sure.
                record.settle_last_cut(self.spool.size)
                record.last_cut = [stream, self.spool.size]
                record.save(self.dir)
            self.output(stream, data)

        return sink
