"""A job's artifacts on this controller: brought back from its nodes, placed for the
jobs that depend on it, copied out for the user.

Node 0's artifacts sit at the top of the job's artifact dir, node K's under
node-K/ (`nodes: all` artifacts of a multi-node job). Everything a runner sends
is checked (app/transfer/files.py) before it is kept.
"""

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from lanpool.app.errors import ArtifactsRefused, LanpoolError, NotFoundError, RunnerProtocolError, UsageError
from lanpool.app.home import ControllerHome
from lanpool.app.store import ARTIFACTS_REFUSED, JobRow, Store
from lanpool.app.transfer.files import checked_path, copy_file
from lanpool.app.transfer.pull import Final, PullBusy, PullLimits, node_prefix, pull_job, pull_percent

log = logging.getLogger(__name__)

PULL_BUSY_POLL_S = 0.5
REFUSED_LINE = "artifacts refused"  # starts the stored line saying why a job's artifacts were not taken

__all__ = ["REFUSED_LINE", "Artifacts", "node_prefix", "other_node_path"]


def other_node_path(path: str) -> bool:
    """An artifact brought back from node K > 0 of a multi-node job (`nodes: all`)."""
    head = path.split("/", 1)[0]
    return head.startswith("node-") and head[5:].isdigit() and "/" in path


class Artifacts:
    def __init__(self, store: Store, home: ControllerHome, limits: PullLimits | None = None) -> None:
        self.store = store
        self.home = home
        self.limits = limits
        # One pull per job at a time in this process (the TUI may follow a job while stopping
        # it); other processes are kept out by app/transfer/pull.py's lock file.
        self._pull_locks: dict[str, asyncio.Lock] = {}

    def pull_percent(self, job_id: str) -> int | None:
        """How far a pull of the job's artifacts is, in any process (None: none under way)."""
        return pull_percent(self.home.artifacts, job_id)

    async def pull(self, job_id: str, finals: list[Final], wait: bool = True) -> str:
        """Stream each node's artifact files into the store (node K > 0 under node-K/) and
        list them. Whatever a runner sends is checked (app/transfer/pull.py): files the
        controller will not take refuse the job's artifacts, recorded in the store; the line
        saying why is returned ("" when they were taken, or there were none). A lost
        connection raises RunnerError and keeps what arrived: the next pull resumes it.
        Another process pulling the job is waited for (`wait`), else PullBusy."""
        finals = [(k, s, st) for k, s, st in finals if st.artifacts]
        if not finals:
            return ""
        async with self._pull_locks.setdefault(job_id, asyncio.Lock()):
            while True:
                if self.store.job(job_id).artifacts_pulled:  # another follower of this job was quicker
                    return ""
                try:
                    return await self._pull(job_id, finals)
                except PullBusy:
                    if not wait:  # `status`: said as "pulling artifacts N%", not waited for
                        raise
                    await asyncio.sleep(PULL_BUSY_POLL_S)  # another process (a second `logs -f`)

    async def _pull(self, job_id: str, finals: list[Final]) -> str:
        try:
            files = await pull_job(self.home.artifacts, job_id, finals, self.limits or PullLimits.from_env())
        except (ArtifactsRefused, RunnerProtocolError) as exc:
            line = f"{REFUSED_LINE}: {exc.message}"
            log.warning("job %s: %s", job_id, line)
            self.store.refuse_artifacts(job_id)
            return line
        except OSError as exc:  # this machine's side (disk full, permissions): worth another try later
            raise LanpoolError(
                f"could not write the artifacts of job {job_id} under {self.home.artifacts}: {exc.strerror or exc}"
            ) from None
        if self.store.job(job_id).artifacts_pulled == ARTIFACTS_REFUSED:
            return ""
        self.store.set_artifacts(job_id, files)
        return ""

    def refusal(self, job_id: str) -> str:
        """The stored line saying why the job's artifacts were refused."""
        return next(
            (d for _at, _s, d in reversed(self.store.job_events(job_id)) if d.startswith(REFUSED_LINE)), REFUSED_LINE
        )

    async def copy_out(
        self, job: JobRow, output: Path, progress: Callable[[int, int], None] | None = None
    ) -> list[tuple[str, int]]:
        """Copy a job's pulled artifacts to `output`; `progress(done_bytes, total_bytes)` after each file."""
        if job.artifacts_pulled == ARTIFACTS_REFUSED:
            raise ArtifactsRefused(f"job {job.id}: {self.refusal(job.id)}; nothing to download")
        files = self.store.artifacts(job.id)
        if not files:
            raise NotFoundError(f"job {job.id} has no artifacts")
        src = self.home.job_artifacts(job.id)
        try:
            output.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create the output directory {output}: {exc.strerror}") from None
        total, done = sum(n for _, n in files), 0
        for path, n in files:
            # Stored paths came from a runner: each is checked again, and nothing is read or
            # written through a symlink below the store's or the output's directory.
            parts = checked_path(path)
            try:
                await asyncio.to_thread(copy_file, src, parts, output)  # checkpoints can be GBs
            except OSError as exc:
                raise LanpoolError(f"copying {path} to {output} failed: {exc.strerror or exc}") from None
            done += n
            if progress:
                progress(done, total)
        return files
