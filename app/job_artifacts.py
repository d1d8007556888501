"""A job's artifacts on this controller: brought back from its nodes, placed for the
jobs that depend on it, copied out for the user.

Node 0's artifacts sit at the top of the job's artifact dir, node K's under
node-K/ (`nodes: all` artifacts of a multi-node job). Everything a runner sends
is checked (app/artifact_files.py) before it is kept.
"""

import asyncio
import logging
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from app.artifact_files import (
    ArtifactsRefused,
    archive_limit,
    checked_declared,
    checked_path,
    copy_file,
    ensure_room,
    extract_archive,
)
from app.errors import LanpoolError, NotFoundError, RunnerProtocolError, UsageError
from app.home import ControllerHome
from app.runner_client import RunnerSession
from app.store import ARTIFACTS_REFUSED, JobRow, Store
from protocol import JobStatus

log = logging.getLogger(__name__)

REFUSED_LINE = "artifacts refused"  # starts the stored line saying why a job's artifacts were not taken


def node_prefix(node: int) -> str:
    """Where node K's artifacts go in the job's artifact dir: node 0's at the top, node K's under node-K/."""
    return "" if node == 0 else f"node-{node}/"


def other_node_path(path: str) -> bool:
    """An artifact brought back from node K > 0 of a multi-node job (`nodes: all`)."""
    head = path.split("/", 1)[0]
    return head.startswith("node-") and head[5:].isdigit() and "/" in path


class Artifacts:
    def __init__(self, store: Store, home: ControllerHome) -> None:
        self.store = store
        self.home = home
        # One pull per job at a time: the TUI may follow a job while stopping it.
        self._pull_locks: dict[str, asyncio.Lock] = {}

    async def pull(self, job_id: str, finals: list[tuple[int, RunnerSession, JobStatus]]) -> str:
        """Download each node's packed artifacts into one staging dir (node K > 0 under
        node-K/), then put it in place of the job's artifact dir and list the files.

        Every archive is checked (app/artifact_files.py): one the controller will not
        take refuses the job's artifacts, recorded in the store; the line saying why is
        returned ("" when they were taken, or there were none)."""
        finals = [(k, s, st) for k, s, st in finals if st.artifacts_archive]
        if not finals:
            return ""
        async with self._pull_locks.setdefault(job_id, asyncio.Lock()):
            if self.store.job(job_id).artifacts_pulled:  # another follower of this job was quicker
                return ""
            return await self._pull(job_id, finals)

    async def _pull(self, job_id: str, finals: list[tuple[int, RunnerSession, JobStatus]]) -> str:
        staging = self.home.artifacts / f"{job_id}.{secrets.token_hex(4)}.part"
        files: list[tuple[str, int]] = []
        node = finals[0][0]
        try:
            for node, session, status in finals:
                declared = checked_declared(status.artifacts)
                ensure_room(self.home.artifacts, declared)
                tar = Path(f"{staging}.node{node}.tar")
                try:
                    await session.download(status.artifacts_archive, tar, max_bytes=archive_limit(declared))
                    await asyncio.to_thread(extract_archive, tar, staging / node_prefix(node), declared)
                finally:
                    tar.unlink(missing_ok=True)
                files += [(node_prefix(node) + path, size) for path, size in declared.items()]
            if self.store.job(job_id).artifacts_pulled:  # another controller process was quicker
                return ""
            dest = self.home.job_artifacts(job_id)
            if dest.exists():
                shutil.rmtree(dest)
            staging.mkdir(exist_ok=True)  # every file was refused or none declared: an empty dir
            staging.rename(dest)
            self.store.set_artifacts(job_id, files)
            return ""
        except (ArtifactsRefused, RunnerProtocolError) as exc:
            line = f"{REFUSED_LINE}: " + (f"node {node}: " if len(finals) > 1 or node else "") + exc.message
            log.warning("job %s: %s", job_id, line)
            self.store.refuse_artifacts(job_id)
            return line
        except OSError as exc:  # this machine's side (disk full, permissions): worth another try later
            raise LanpoolError(
                f"could not write the artifacts of job {job_id} under {self.home.artifacts}: {exc.strerror or exc}"
            ) from None
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

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
