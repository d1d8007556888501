"""After a restart: the journal's jobs read back, and what an executor needs to take one back.

Which jobs can be taken back is the executor's to say (Executor.adopt): a
container outlives the agent, a process's pipes do not.
"""

import asyncio
import logging

from lanpool.agent.executors import Adoption, ExecutorChoice, ExecutorError
from lanpool.agent.home import AgentHome
from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.workspace.spool import LogSpool
from lanpool.protocol import JobState

log = logging.getLogger(__name__)


def read_journal(home: AgentHome) -> list[Job]:
    """Every job on disk, in job-id order; the spools of ended jobs are opened read-only."""
    jobs = []
    for job_dir in sorted(home.jobs.iterdir()):
        if not (job_dir / "job.json").exists():
            continue
        try:
            record = JobRecord.load(job_dir)
        except (OSError, ValueError, TypeError) as exc:  # one bad entry must not keep the agent from starting
            log.warning("job %s: its journal cannot be read (%s); left as it is", job_dir.name, exc)
            continue
        try:
            spool = LogSpool(job_dir / "log.spool", writable=not record.terminal)
        except OSError as exc:  # a new spool's first bytes on a full disk: its later lines fail the job
            log.warning("job %s: its log cannot be written (%s)", job_dir.name, exc.strerror or exc)
            spool = LogSpool(job_dir / "log.spool", writable=False)
        jobs.append(Job(record, job_dir, spool))
    return jobs


async def adoption_of(job: Job, resumes_output: bool) -> Adoption:
    """What the journal kept of an unfinished job; with `resumes_output`, the bytes of output it already holds."""
    record = job.record
    record.settle_last_cut(job.spool.size)
    added = {s: record.log_cuts.get(s, 0) + record.log_masked.get(s, 0) for s in ("out", "err")}
    delivered = await asyncio.to_thread(spooled_bytes, job.spool, added) if resumes_output else {}
    started = record.state != JobState.SUBMITTED
    return Adoption(record.job_id, record.pid, started=started, delivered=delivered, on_pending=job.set_pending)


def spooled_bytes(spool: LogSpool, added: dict[str, int]) -> dict[str, int]:
    """Bytes of each job stream the spool holds, as the job printed them (the bytes the agent `added`,
    cut lines' newlines and masking, taken off)."""
    counts = {"out": 0, "err": 0}
    seq = 0
    while records := spool.read(seq, 4 * 1024 * 1024):
        for rec in records:
            if rec.stream in counts:
                counts[rec.stream] += len(rec.data)
            seq = rec.seq + rec.n_lines
    return {stream: n - added.get(stream, 0) for stream, n in counts.items()}


async def remove_leftovers(executors: ExecutorChoice, active: set[str]) -> None:
    """What ended (or unknown) jobs left behind (containers) goes: their logs and artifacts are safe."""
    for executor in executors.all():
        try:
            removed = await executor.remove_leftovers(active)
        except ExecutorError as exc:
            log.warning("cannot clean up after old %s jobs: %s", executor.name, exc)
            continue
        if removed:
            log.info("removed %d leftover(s) of %s jobs", len(removed), executor.name)
