"""The runner's own queue: which waiting jobs start now, and why the others wait.

A job that fits this runner's capacity but not what is free now waits here
(state QUEUED, journalled with the job, so an agent restart keeps it and its
order), and starts as soon as a running job ends: no controller needs to be
alive. The rule is FIFO with a conservative backfill:

- the oldest waiting job (the head) starts as soon as it fits what is free;
- a later job may start before it only if it fits in what is free *after
  setting aside everything the head needs* (all of the head's need, not only
  its shortfall), so a backfilled job never takes what the head waits for.

A job waiting out a retry's delay is not in line until its delay is over.
Pure logic over numbers, so it is easy to test and to reason about; the job
manager (agent.jobs.manager) applies the choices.
"""

import dataclasses
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from lanpool.agent.errors import JobError
from lanpool.agent.host.resources import detect_machine
from lanpool.agent.jobs.journal import JobRecord
from lanpool.protocol import ErrorCode, JobState, SubmitJob
from lanpool.protocol.resources import MAX_CPUS, MAX_GPUS, MAX_MEMORY_MB


@dataclass(frozen=True)
class Amount:
    """CPUs, memory and GPUs: what a job needs, a runner has, or is free now."""

    cpus: float = 0.0
    memory_mb: int = 0
    gpus: int = 0

    def minus(self, other: "Amount") -> "Amount":
        return Amount(self.cpus - other.cpus, self.memory_mb - other.memory_mb, self.gpus - other.gpus)

    def fits_in(self, room: "Amount") -> bool:
        """Each resource asked for (> 0) is within `room`; one not asked for always fits."""
        return (
            (self.cpus <= 0 or self.cpus <= room.cpus + 1e-9)
            and (self.memory_mb <= 0 or self.memory_mb <= room.memory_mb)
            and (self.gpus <= 0 or self.gpus <= room.gpus)
        )


@dataclass(frozen=True)
class Waiting:
    """One queued job as the queue sees it, in queue order."""

    job_id: str
    need: Amount
    not_before: float = 0.0  # a retry's delay: not in line before this time


@dataclass(frozen=True)
class Plan:
    start: list[str]  # job ids to start now, in order
    # job id -> (position from 1, its reason): the text is made when asked (a status), not for
    # each of a thousand waiting jobs at every hand-over (docs/bench/bench-queue.json).
    waiting: dict[str, tuple[int, Callable[[], str]]]
    wake_at: float | None  # the earliest end of a retry delay, if any


def never_fits(need: Amount, capacity: Amount) -> str:
    """Why a job can never run on this runner ("" when it can): refused at submit."""
    short = [
        (need.gpus, capacity.gpus, "GPU"),
        (need.cpus, capacity.cpus, "CPU"),
        (need.memory_mb, capacity.memory_mb, "MB memory"),
    ]
    for want, has, what in short:
        if want > 0 and want > has + 1e-9:
            return f"the job needs {_n(want)} {what} and this runner has {_n(has)} in all: it can never run here"
    return ""


def plan(queue: list[Waiting], free: Amount, capacity: Amount, now: float) -> Plan:
    """What to start now from `queue` (oldest first), given what is `free`; see the module docstring."""
    start: list[str] = []
    waiting: dict[str, tuple[int, Callable[[], str]]] = {}
    wake_at: float | None = None
    head: Waiting | None = None
    room = free  # what a job may take: all that is free, less the head's need once there is a head
    for job in queue:
        if job.not_before > now:
            wake_at = job.not_before if wake_at is None else min(wake_at, job.not_before)
            continue
        if job.need.fits_in(room):
            start.append(job.job_id)
            free = free.minus(job.need)
            room = free if head is None else free.minus(head.need)
            continue
        if head is None:
            head = job
            room = free.minus(head.need)
        waiting[job.job_id] = (len(waiting) + 1, partial(_reason, job.need, free, capacity, len(waiting)))
    return Plan(start, waiting, wake_at)


def _reason(need: Amount, free: Amount, capacity: Amount, ahead: int) -> str:
    parts = []
    for want, has, total, what in (
        (need.gpus, free.gpus, capacity.gpus, "GPU"),
        (need.cpus, free.cpus, capacity.cpus, "CPU"),
        (need.memory_mb, free.memory_mb, capacity.memory_mb, "MB memory"),
    ):
        if want > 0:
            parts.append(f"{_n(want)} {what}: {_n(max(0, has))} of {_n(total)} free")
    text = "waiting for " + ("; ".join(parts) if parts else "the jobs ahead")
    if ahead:
        text += f"; {ahead} job{'s' if ahead > 1 else ''} ahead"
    return text


def _n(value: float) -> str:
    return str(int(value)) if math.isclose(value, round(value)) else f"{value:g}"


# -- a job record's part in the bookkeeping (what agent.jobs.manager adds up) --------------


_HOLDING = frozenset({JobState.SUBMITTED.value, JobState.RUNNING.value})


def holds(record: JobRecord) -> bool:
    """Whether the job holds resources: started or starting (a queued or ended one holds nothing).
    A string test: it runs for every job at every hand-over (thousands with a long queue)."""
    return record.state in _HOLDING


def in_use(records: list[JobRecord]) -> Amount:
    """CPUs and memory the holding jobs among `records` reserve (GPUs are the allocator's to count)."""
    held = [r for r in records if holds(r)]
    cpus = sum(reserved(r.cpus, MAX_CPUS) for r in held)
    return Amount(cpus, int(sum(reserved(r.memory_mb, MAX_MEMORY_MB) for r in held)), 0)


def need_of(record: JobRecord) -> Amount:
    gpus = int(reserved(record.gpu_count, MAX_GPUS))
    return Amount(reserved(record.cpus, MAX_CPUS), int(reserved(record.memory_mb, MAX_MEMORY_MB)), gpus)


def capacity_of(capacity: Amount | None) -> tuple[float, int]:
    """CPUs and memory of this machine, unless given (agent.host.resources detects them)."""
    if capacity is not None:
        return capacity.cpus, capacity.memory_mb
    detected = detect_machine()
    return float(detected["cpus"]), int(detected["memory_mb"])


def replace_files(req: SubmitJob, env: dict[str, str] | None = None) -> SubmitJob:
    """The request without its file list (staged at submit, never needed again), with `env`
    instead of its own when given (secrets written ***); the secrets themselves become ***
    (how many there were is kept: after a restart they come back from agent.jobs.kept_secrets)."""
    masked = ["***"] * len(req.masked) if env is not None else req.masked
    # The run key is kept as its hash in the record only (agent.jobs.dag): never needed to start.
    # A gang's token likewise: node 0 keeps its hash, a member needs it only until its gang starts (agent.gang.hub).
    gang = dataclasses.replace(req.gang, gang_token="") if req.gang is not None else None
    return dataclasses.replace(req, files=[], env=req.env if env is None else env, masked=masked, run_key="", gang=gang)


def reserved(value: float, limit: float) -> float:
    """A recorded reservation as a number the bookkeeping can add: 0 unless finite, positive, capped
    (an old journal may hold anything)."""
    try:
        num = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return min(num, limit) if math.isfinite(num) and num > 0 else 0.0


def gang_fields(req: SubmitJob) -> dict[str, Any]:
    """A gang member's record fields (agent.gang.hub), its spec checked; node 0 keeps its token's sha256 only."""
    gang = req.gang
    if gang is None:
        return {}
    if not gang.gang_id or gang.gang_rank >= gang.gang_size or len(gang.gang_token) < 16:
        raise JobError(ErrorCode.BAD_REQUEST, "a gang member needs a gang id, a rank below its size and a token")
    host, _, port = gang.coordinator.rpartition(":")
    if gang.gang_rank and (not host or not port.isdigit() or not 0 < int(port) < 65536 or not gang.host_key):
        raise JobError(ErrorCode.BAD_REQUEST, "a gang member needs node 0's agent as HOST:PORT and its host key")
    digest = hashlib.sha256(gang.gang_token.encode()).hexdigest() if gang.gang_rank == 0 else ""
    return {
        "gang_id": gang.gang_id,
        "gang_size": gang.gang_size,
        "gang_rank": gang.gang_rank,
        "gang_order": gang.gang_order,
        "gang_token_hash": digest,
    }
