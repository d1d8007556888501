"""One job on this runner: its journal record, its log spool, and what runs it."""

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lanpool.agent.executors import Execution, Executor, OutputSink
from lanpool.agent.executors.line_cutter import MAX_LINE
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.jobs.masking import held_tail, mask_secrets
from lanpool.agent.workspace.metrics_tail import MetricsTail
from lanpool.agent.workspace.spool import LogSpool
from lanpool.protocol import JobState, JobStatus, SubmitJob

log = logging.getLogger(__name__)


def masked_env(env: dict[str, str], masked: list[str]) -> dict[str, str]:
    """The env as the journal keeps it: a value holding a secret is *** as a whole."""
    return {k: "***" if any(m and m in v for m in masked) else v for k, v in env.items()}


REASON_CHARS = 1000  # a waiting job's reason, holders named (protocol.schema bounds it at 1024)


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
    # The job's secrets (SubmitJob.masked), written *** in its spool; kept across a restart in
    # the agent's secrets/ (agent.jobs.kept_secrets), so a re-adopted job is masked here too.
    masks: list[bytes] = field(default_factory=list)
    # The request as it came, secrets and all (request.json on disk has *** for them).
    request: SubmitJob | None = None
    # Per stream, the end of a cut piece that may begin a secret (agent.jobs.masking.held_tail):
    # spooled in front of the stream's next piece, or when the run ends (flush_output).
    held: dict[str, bytes] = field(default_factory=dict)
    # While QUEUED: its place in the runner's queue and why it waits (agent.jobs.queue; not journalled).
    position: int = 0
    reason: str = ""
    # While QUEUED for want of room: the queue's reason and who holds the room now
    # (agent.jobs.turns), both made when a status asks (the pump only hands them over).
    reason_of: Callable[[], str] | None = None
    held_by: Callable[[], str] | None = None
    # Why the spool refused the job's own output (a full disk), "" while it takes it: the job is
    # failed with it (agent.jobs.end.ended_state), by `on_write_failure` (agent.jobs.supervision)
    # once it runs. Its output is dropped meanwhile, never held: the agent must not fill memory.
    write_failed: str = ""
    on_write_failure: Callable[[], None] | None = None
    # Ended because its agent exits (a process cannot outlive it), with `lost` in its retry: it ends LOST.
    lost_at_shutdown: bool = False
    # Sessions into the job now (exec, shells, the dev sshd's logins, forwarded connections) and when the last one ended:
    # a dev environment's idle limit counts from there (agent.jobs.supervision).
    sessions: int = 0
    idle_since: float = 0.0

    def session_opened(self) -> None:
        self.sessions += 1

    def session_closed(self) -> None:
        self.sessions = max(0, self.sessions - 1)
        self.idle_since = time.time()

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def shown_state(self) -> str:
        """The state a controller is told: QUEUED too while started but waiting in Slurm's queue."""
        if self.record.state in (JobState.SUBMITTED, JobState.RUNNING) and self.reason:
            return JobState.QUEUED.value
        return str(self.record.state)

    def status(self, artifacts_from: int = 0, artifacts_max: int | None = None) -> JobStatus:
        status = self.record.to_status(self.spool.next_seq, artifacts_from, artifacts_max)
        if self.record.state == JobState.QUEUED:
            return dataclasses.replace(status, position=self.position, reason=self._waiting_reason())
        if self.shown_state() != status.state:  # started (or re-adopted), but waiting in Slurm's queue
            return dataclasses.replace(status, state=JobState.QUEUED, reason=self.reason)
        if self.record.attempt:
            return dataclasses.replace(status, reason=f"retry {self.record.attempt} of {self.record.retry_limit}")
        return status

    def _waiting_reason(self) -> str:
        """The queue's reason, with who holds the room it waits for before the jobs ahead:
        "waiting for 2 GPU: 0 of 2 free; held by alice (train, 2 GPU, 1h12m); 1 job ahead"."""
        reason = self.reason or (self.reason_of() if self.reason_of is not None else "")
        held = self.held_by() if self.held_by is not None and not self.reason else ""
        if not held:
            return reason
        head, sep, ahead = reason.rpartition("; ")
        if not (sep and ahead.endswith(" ahead")):
            return f"{reason}; held by {held}"[:REASON_CHARS]
        return f"{head}; held by {held}"[: REASON_CHARS - len(ahead) - 2] + f"; {ahead}"

    def set_pending(self, reason: str) -> None:
        """The executor's own queue (Slurm's) holds the started job, for `reason` ("" once it runs)."""
        self.reason = reason
        self.notify()

    async def wait_terminal(self) -> None:
        while not self.record.terminal:
            await self.changed.wait()

    async def wait_attempt_over(self, attempt: int) -> None:
        """Until attempt `attempt` is over: the job ended, or it goes on as a later attempt (a retry)."""
        while not self.record.terminal and self.record.attempt == attempt:
            await self.changed.wait()

    async def wait_run_over(self, execution: Execution | None) -> None:
        """Until the run of `execution` is over: the job ended, or went back in the queue (a retry)."""
        while not self.record.terminal and self.execution is execution:
            await self.changed.wait()

    def output(self, stream: str, data: bytes, cut: bool = False) -> None:
        """Spool what the job printed; `cut`: the executor added the final newline (OutputSink)."""
        if self.record.terminal:  # a late line (from a pull thread) after the spool was closed
            return
        if self.write_failed and stream != "sys":  # its log already lost a piece: the job is being failed
            return
        if self.masks and stream in ("out", "err"):
            data = self.held.pop(stream, b"") + data
            # Cut at the length limit (not a last line without newline): a secret may go on in
            # the next piece, so what may begin one waits for it.
            if cut and len(data) > MAX_LINE:
                body = data[:-1]  # without the newline the executor added
                hold = held_tail(body, self.masks)
                if hold:
                    self.held[stream] = body[len(body) - hold :]
                    if hold == len(body):
                        return
                    data = body[: len(body) - hold] + b"\n"
        self._spool(stream, data, cut)

    def flush_output(self) -> None:
        """The run's output is over: what was held back at a cut goes to the spool, as a cut line."""
        held, self.held = self.held, {}
        for stream, data in held.items():
            self._spool(stream, data + b"\n", cut=True)

    def _spool(self, stream: str, data: bytes, cut: bool) -> None:
        masked = mask_secrets(data, self.masks)
        record = self.record
        # A re-adopted container resumes after the bytes it printed, told from the spool's
        # size: a cut's added newline and what masking changed are noted (JobRecord.log_cuts,
        # log_masked) before the record is written; the previous one's record was written, so it counts for sure.
        # A process job is never resumed: no journal write per cut of its long lines.
        noted = False
        if cut and (self.executor is None or self.executor.outlives_agent):
            record.settle_last_cut(self.spool.size)
            record.last_cut = [stream, self.spool.size]
            noted = True
        if len(masked) != len(data) and stream in ("out", "err"):
            record.settle_last_mask(self.spool.size)
            record.last_mask = [stream, self.spool.size, len(masked) - len(data)]
            noted = True
        if noted:
            record.save(self.dir)
        try:
            self.spool.append(stream, masked)
        except OSError as exc:  # a full disk: whatever the job does, the agent goes on
            self._cannot_write(stream, exc)
            return
        self.notify()

    def _cannot_write(self, stream: str, exc: OSError) -> None:
        """The spool refused a piece (left whole without it: LogSpool.append). An agent's line is
        only lost; the job's own output cannot be kept, so the job fails, saying why."""
        why = (exc.strerror or str(exc) or type(exc).__name__).lower()
        if stream == "sys" or self.write_failed:
            log.warning("job %s: a line of its log was lost: %s", self.record.job_id, why)
            return
        self.write_failed = f"{why} while writing its log"
        log.warning("job %s: %s: it is stopped and fails", self.record.job_id, self.write_failed)
        self.notify()
        if self.on_write_failure is not None:
            self.on_write_failure()

    def system_line(self, text: str) -> None:
        """One of the agent's own lines in the job's log ("sys")."""
        self.output("sys", text.encode(errors="replace") + b"\n")

    def sink(self) -> OutputSink:
        """Where the executor delivers the job's output."""

        def sink(stream: str, data: bytes, cut: bool = False) -> None:
            self.output(stream, data, cut)

        return sink
