"""What a runner may write into this controller's store while one of its jobs is followed."""

import logging
from collections.abc import Sequence
from typing import Any

from lanpool.app.errors import RunnerProtocolError
from lanpool.protocol import JobStatus, LogChunk
from lanpool.protocol.messages import AgentMessage

log = logging.getLogger(__name__)


class OwnOutput:
    """What a runner may write while followed for node `node` of job `job_id`: that
    node's log lines and that job's status, nothing else.

    Lines for another job, or for another node (agents leave `node` at 0: a runner
    knows its part only as "mine"), are dropped, with one warning per follow. A
    status for another job ends the follow: the runner is not answering the question.
    """

    def __init__(self, job_id: str, node: int, where: str) -> None:
        self.job_id = job_id
        self.node = node
        self.where = where
        self.dropped = 0

    def take(self, batch: Sequence[AgentMessage]) -> tuple[list[tuple[Any, ...]], JobStatus | None]:
        """Store rows (job_id, node, seq, n_lines, stream, data, at) of the batch's own chunks,
        and its final status (None if the batch does not end with one)."""
        rows = []
        for m in batch:
            if not isinstance(m, LogChunk):
                continue
            if m.job_id != self.job_id or m.node not in (0, self.node):
                if not self.dropped:
                    log.warning(
                        "%s sent log lines for job %r node %d while followed for job %s node %d: "
                        "dropped (a runner writes only its own job's log)",
                        self.where,
                        m.job_id[:64],
                        m.node,
                        self.job_id,
                        self.node,
                    )
                self.dropped += 1
                continue
            rows.append((self.job_id, self.node, m.seq, m.n_lines, m.stream, m.data, m.at))
        final = next((m for m in reversed(batch) if isinstance(m, JobStatus)), None)
        if final is not None and final.job_id != self.job_id:
            raise RunnerProtocolError(
                f"{self.where} sent the status of job {final.job_id[:64]!r} while followed for job {self.job_id}"
            )
        return rows, final
