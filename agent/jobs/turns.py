"""Fair turns between the people who share a runner, and what they are told about each other.

Several controllers (each one person's key: its owner, agent.jobs.owner) queue jobs on one
runner. First come, first served would let whoever queues 50 jobs first hold it for the day, so
the order the queue (agent.jobs.queue) starts jobs in is decided here:

- **Rounds.** Every owner's first waiting job comes before any owner's second, and so on: a job
  of someone else is at most one round behind a long batch.
- **Within a round**, the owner running the fewest jobs on this runner goes first, then the one
  whose last job started longest ago (never: first), then the one who queued earliest.
- **An owner's own jobs**: a higher `priority:` first, then the order they were queued in.
- **No starvation.** The first job in this order that does not fit is the queue's head, and the
  head reserves all it needs: only what fits beside it starts meanwhile (the backfill rule), so a
  job needing the whole runner is never passed over by a stream of small ones. An owner with
  nothing running is never behind one with jobs running, so a job waits at most for the jobs of
  owners running no more than its own, and for those holding what it needs.
- **Caps** (`--max-gpus-per-owner`): a job that would take its owner past the cap stays out of
  line, saying so, until that owner's jobs hold less.

What one owner learns of another's jobs is occupancy, never content: the label its key was
authorized with, the workflow's name, the resources held and for how long. Never its logs,
variables, env or artifacts; with `--private-occupancy`, not even those (a count of jobs).
Pure functions over plain data, like the queue, so each rule is tested on its own.
"""

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lanpool.agent.jobs.journal import JobRecord

MAX_HOLDERS_SHOWN = 3  # holders named in a waiting job's reason; the rest are counted
LABEL_CHARS = 32


@dataclass(frozen=True)
class InLine:
    """A waiting job as the turns see it."""

    job_id: str
    owner: str  # the owner's key fingerprint ("" for a job journalled before owners)
    seq: int  # its place in the queue (queued_seq)
    priority: int = 0


def take_turns(line: list[InLine], running: Mapping[str, int], last_start: Mapping[str, float]) -> list[str]:
    """The job ids of `line` in the order the queue should try them (see the module docstring).
    `running`: per owner, its jobs holding resources now; `last_start`: per owner, when its
    latest job started."""
    own: dict[str, list[InLine]] = {}
    for job in sorted(line, key=lambda j: (-j.priority, j.seq)):
        own.setdefault(job.owner, []).append(job)
    if len(own) < 2:
        return [j.job_id for j in own.get(next(iter(own), ""), [])]  # one owner: its own order
    first_seq = {owner: min(j.seq for j in jobs) for owner, jobs in own.items()}
    owners = sorted(own, key=lambda o: (running.get(o, 0), last_start.get(o, -math.inf), first_seq[o]))
    ordered: list[str] = []
    for turn in range(max(len(jobs) for jobs in own.values())):
        ordered += [own[o][turn].job_id for o in owners if turn < len(own[o])]
    return ordered


@dataclass(frozen=True)
class Holder:
    """A job holding resources, as another owner may be told of it."""

    label: str  # its owner's label ("" unknown)
    owner: str  # its owner's fingerprint
    workflow: str
    gpus: int
    cpus: float
    started_at: float | None
    max_duration_s: float = 0.0


def holders_text(holders: Iterable[Holder], now: float, private: bool = False) -> str:
    """`alice (train, 2 GPU, 1h12m of max_duration 4h), bob (eval, 1h)`: who holds what a waiting
    job needs, longest running first; "" when nobody does. `private`: "2 jobs" only."""
    held = sorted(holders, key=lambda h: h.started_at if h.started_at is not None else now)
    if not held:
        return ""
    if private:
        return f"{len(held)} job{'s' if len(held) > 1 else ''}"
    parts = []
    for h in held[:MAX_HOLDERS_SHOWN]:
        what = [clean(h.workflow, LABEL_CHARS) or "a job"]
        if h.gpus:
            what.append(f"{h.gpus} GPU")
        elif h.cpus:
            what.append(f"{h.cpus:g} CPU")
        if h.started_at is not None:
            took = span(max(0.0, now - h.started_at))
            what.append(f"{took} of max_duration {span(h.max_duration_s)}" if h.max_duration_s > 0 else took)
        parts.append(f"{who(h.label, h.owner)} ({', '.join(what)})")
    more = len(held) - MAX_HOLDERS_SHOWN
    return ", ".join(parts) + (f" and {more} more job{'s' if more > 1 else ''}" if more > 0 else "")


def who(label: str, owner: str) -> str:
    """An owner as people read it: its label, else the start of its key's fingerprint."""
    shown = clean(label, LABEL_CHARS)
    if shown:
        return shown
    return f"key {owner.removeprefix('SHA256:')[:8]}" if owner else "a controller"


def clean(text: str, limit: int) -> str:
    """A peer's text on one line: printable characters only, at most `limit` of them."""
    kept = "".join(c for c in str(text) if c.isprintable())
    return kept if len(kept) <= limit else kept[: limit - 1] + "…"


def span(seconds: float) -> str:
    """1h12m, 5m, 40s."""
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m"
    return f"{s}s"


def queue_rows(records: "list[JobRecord]", now: float) -> list[dict[str, object]]:
    """The runner's unfinished jobs as its admin sees them (`app agent status`, read from the
    journal): running first, then the waiting ones in the order their turns come (`turn`), each
    with its owner, workflow, run, resources and times."""
    from lanpool.agent.jobs.queue import holds, need_of

    live = [r for r in records if not r.terminal]
    holding = [r for r in live if holds(r)]
    running: dict[str, int] = {}
    for r in holding:
        running[r.owner] = running.get(r.owner, 0) + 1
    last_start: dict[str, float] = {}
    for r in records:
        if r.started_at is not None and r.started_at > last_start.get(r.owner, -math.inf):
            last_start[r.owner] = r.started_at
    waiting = {r.job_id: r for r in live if r.state == "QUEUED"}
    order = take_turns(
        [InLine(r.job_id, r.owner, r.queued_seq, r.priority) for r in waiting.values()], running, last_start
    )
    rows: list[dict[str, object]] = []
    for turn, record in [(0, r) for r in sorted(holding, key=lambda r: r.started_at or now)] + [
        (k, waiting[i]) for k, i in enumerate(order, 1)
    ]:
        need = need_of(record)
        rows.append(
            {
                "job_id": record.job_id,
                "state": str(record.state),
                "owner": who(record.owner_label, record.owner),
                "owner_key": record.owner,
                "workflow": clean(record.workflow, 64),
                "run": clean(record.run_name, 64),
                "gpus": need.gpus,
                "cpus": need.cpus,
                "memory_mb": need.memory_mb,
                "submitted_at": record.submitted_at,
                "started_at": record.started_at,
                "max_duration_s": record.max_duration_s,
                "turn": turn or None,  # 1 = the next to start, when it fits
                "priority": record.priority,
            }
        )
    return rows
