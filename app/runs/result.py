"""What `Controller.run` hands back: the jobs it submitted and how they ended.

Its own module so front ends get these types without importing the run loop
(app/runs/loop.py), which only `run` needs.
"""

from __future__ import annotations  # JobStatus for typing only: `status`/`logs` skip the message classes

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lanpool.app.store import JobRow
from lanpool.protocol.message_base import Record, record

if TYPE_CHECKING:
    from lanpool.protocol import JobStatus


@record
class Submitted(Record):
    """A job the run submitted, and the runner (node 0's) it went to."""

    run_name: str
    job_id: str
    runner: str  # node 0's
    status: JobStatus


@dataclass
class RunOutcome:
    run_name: str
    submitted: list[Submitted] = field(default_factory=list)
    jobs: list[JobRow] = field(default_factory=list)  # jobs that ran, in order, final state
    reused: list[JobRow] = field(default_factory=list)  # earlier jobs it reused (same inputs), in order

    @property
    def last(self) -> JobRow | None:
        return self.jobs[-1] if self.jobs else None
