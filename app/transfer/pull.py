"""Pulling a finished job's artifact files from its runners into the artifact store.

Each node's runner streams the files it listed (GetArtifacts); the controller
trusts none of it (see app/transfer/files.py for the path rules):
- every path is checked, and must be one the runner declared for that node;
- every byte must come in order, at the offset the controller expects, within
  the declared size: more is refused, not cut; nothing is decompressed;
- per-job limits on the total size and the number of files (configurable,
  see `PullLimits`) are checked before anything is asked for;
- files are written under a staging dir through directory descriptors opened
  with O_NOFOLLOW, so nothing is ever written through a symlink.

Written once: the staging dir (`<store>/<job>.part`) becomes the job's artifact
dir by a rename. A pull cut off (connection lost, process killed) keeps the
staging dir and its declared total (`<job>.part.json`): the next pull asks for
each file from the bytes already there. Any process can tell how far a pull is
(`pull_percent`) from those two; one process pulls a job at a time (a lock
file), so a second one says so instead of racing it.
"""

import asyncio
import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lanpool.app.errors import ArtifactsRefused, LanpoolError, RunnerProtocolError
from lanpool.app.transfer.files import DISK_RESERVE_BYTES, checked_declared, checked_path, make_dirs
from lanpool.protocol import ArtifactData, ArtifactEnd, ArtifactRange, ArtifactsSent, DirectOffer, Error, JobStatus
from lanpool.protocol.message_base import Record, record
from lanpool.protocol.messages import AgentMessage

if TYPE_CHECKING:  # a type only here: `status` reads pull_percent without the SSH stack
    from lanpool.app.runners.client import RunnerSession

log = logging.getLogger(__name__)

MAX_BYTES_ENV = "LANPOOL_MAX_ARTIFACT_BYTES"
MAX_FILES_ENV = "LANPOOL_MAX_ARTIFACT_FILES"
DEFAULT_MAX_BYTES = 256 * 2**30
DEFAULT_MAX_FILES = 100_000
# Left beside the staging dir by a pull cut off in an older lanpool, which fetched large files in
# byte ranges over several connections: its staged files were filled out of order, so their
# sizes say nothing of what arrived. Such a pull starts over.
_RANGED_LEFTOVERS = (".part.ranges", ".part.done")


class PullBusy(LanpoolError):
    """Another lanpool process is pulling this job's artifacts now."""


@record
class PullLimits(Record):
    """What one job may bring back, over all its nodes."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_files: int = DEFAULT_MAX_FILES

    def check_count(self, count: int) -> None:
        if count > self.max_files:
            raise ArtifactsRefused(
                f"the runner declares {count} artifact files, more than the limit of {self.max_files} "
                f"per job (raise it with {MAX_FILES_ENV})"
            )

    @classmethod
    def from_env(cls) -> "PullLimits":
        return cls(_env_int(MAX_BYTES_ENV, DEFAULT_MAX_BYTES), _env_int(MAX_FILES_ENV, DEFAULT_MAX_FILES))

    def check(self, declared: dict[str, int]) -> None:
        self.check_count(len(declared))
        total = sum(declared.values())
        if total > self.max_bytes:
            raise ArtifactsRefused(
                f"the runner declares {total} bytes of artifacts, more than the limit of {self.max_bytes} "
                f"per job (raise it with {MAX_BYTES_ENV})"
            )


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise LanpoolError(f"{name}={raw!r} is not a whole number") from None
    if value < 0:
        raise LanpoolError(f"{name}={raw!r} must not be negative")
    return value


def staging_dir(store_dir: Path, job_id: str) -> Path:
    return store_dir / f"{job_id}.part"


def _meta(store_dir: Path, job_id: str) -> Path:
    return store_dir / f"{job_id}.part.json"


def pull_percent(store_dir: Path, job_id: str) -> int | None:
    """How far a pull of the job's artifacts is (0-100), from any process; None when none
    is under way or left to resume."""
    try:
        total = int(json.loads(_meta(store_dir, job_id).read_text())["total"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    have = 0
    for dirpath, _dirs, files in os.walk(staging_dir(store_dir, job_id)):
        for name in files:
            with contextlib.suppress(OSError):
                have += os.lstat(os.path.join(dirpath, name)).st_size
    return 100 if total <= 0 else min(99, have * 100 // total)


@contextlib.contextmanager
def _pull_lock(store_dir: Path, job_id: str) -> Iterator[None]:
    """Held while this process pulls the job; the lock file goes with it."""
    path = store_dir / f"{job_id}.part.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino != os.stat(path, follow_symlinks=False).st_ino:
                raise BlockingIOError  # the holder just removed it: another process has the new one
        except (BlockingIOError, FileNotFoundError):
            pct = pull_percent(store_dir, job_id)
            raise PullBusy(
                f"another lanpool process is pulling the artifacts of job {job_id}"
                + (f" ({pct}%)" if pct is not None else "")
                + ": try again when it is done"
            ) from None
        try:
            yield
        finally:
            path.unlink(missing_ok=True)  # while still held: a waiter sees it gone, not ours
    finally:
        os.close(fd)  # releases the lock


def node_prefix(node: int) -> str:
    """Where node K's artifacts go in the job's artifact dir: node 0's at the top, node K's under node-K/."""
    return "" if node == 0 else f"node-{node}/"


Final = tuple[int, "RunnerSession", JobStatus]


async def pull_job(store_dir: Path, job_id: str, finals: list[Final], limits: PullLimits) -> list[tuple[str, int]]:
    """Bring every node's declared artifacts into the job's dir under `store_dir`; returns the
    files (path, size). ArtifactsRefused (staging removed) when the runner's files are not
    taken; RunnerError (staging kept, to resume) when the connection is lost."""
    limits.check_count(sum(status.artifacts_total or len(status.artifacts) for _node, _session, status in finals))
    finals = [(node, session, await whole_list(session, job_id, status)) for node, session, status in finals]
    per_node = [(node, session, checked_declared(status.artifacts)) for node, session, status in finals]
    every: dict[str, int] = {}
    for node, _session, declared in per_node:
        for path, size in declared.items():
            key = node_prefix(node) + path
            if key in every:
                raise ArtifactsRefused(f"artifact {key!r} is declared twice (by two nodes)")
            every[key] = size
    limits.check(every)
    store_dir.mkdir(parents=True, exist_ok=True)
    staging = staging_dir(store_dir, job_id)
    with _pull_lock(store_dir, job_id):
        try:
            staging.mkdir(exist_ok=True)
            _drop_ranged_pull(store_dir, job_id, staging)
            have = _sizes_there(staging, every)
            _ensure_room(store_dir, sum(every.values()) - sum(have.values()))
            _meta(store_dir, job_id).write_text(json.dumps({"total": sum(every.values())}))
            for node, session, declared in per_node:
                prefix = node_prefix(node)
                ranges = [  # each file not whole yet (an empty one: not there yet)
                    ArtifactRange(path, have.get(prefix + path, 0))
                    for path, size in declared.items()
                    if have.get(prefix + path, -1) < size
                ]
                if not ranges:
                    continue
                try:
                    await _pull_node(session, job_id, staging, prefix, declared, ranges)
                except (ArtifactsRefused, RunnerProtocolError) as exc:
                    if len(per_node) == 1 and node == 0:
                        raise
                    raise ArtifactsRefused(f"node {node}: {exc.message}") from None
            dest = store_dir / job_id
            if dest.exists():
                shutil.rmtree(dest)
            staging.rename(dest)
        except ArtifactsRefused:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        except RunnerProtocolError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise ArtifactsRefused(exc.message) from None
        finally:
            if not staging.exists():
                _meta(store_dir, job_id).unlink(missing_ok=True)
    return sorted(every.items())


def _drop_ranged_pull(store_dir: Path, job_id: str, staging: Path) -> None:
    """Start over a pull an older lanpool left cut off in byte ranges (see _RANGED_LEFTOVERS)."""
    leftovers = [store_dir / f"{job_id}{suffix}" for suffix in _RANGED_LEFTOVERS]
    if not any(os.path.lexists(path) for path in leftovers):
        return
    log.warning("job %s: a pull cut off in byte ranges by an older lanpool starts over", job_id)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for path in leftovers:
        path.unlink(missing_ok=True)


async def whole_list(session: "RunnerSession", job_id: str, status: JobStatus) -> JobStatus:
    """`status` with every artifact file its runner listed: a long list comes a page at a time
    (JobStatus.artifacts_total, protocol/messages.py STATUS_ARTIFACTS), the rest asked for here.
    The caller checks the count against its limits first; each page must bring files, so a
    runner that says more than it sends is refused after at most that many requests."""
    total = status.artifacts_total
    if not total:
        return status
    files = list(status.artifacts)
    log.info("%s: job %s lists %d artifact files; reading them a page at a time", session.where, job_id, total)
    while len(files) < total:
        page = await session.status(job_id, len(files))
        if page.artifacts_total != total or not page.artifacts:
            raise ArtifactsRefused(
                f"{session.where} listed {total} artifact files, then {page.artifacts_total} "
                f"with {len(page.artifacts)} from file {len(files)}"
            )
        files += page.artifacts
    if len(files) != total:
        raise ArtifactsRefused(f"{session.where} listed {total} artifact files and sent {len(files)}")
    return dataclasses.replace(status, artifacts=files, artifacts_total=0)


async def _pull_node(
    session: "RunnerSession",
    job_id: str,
    staging: Path,
    prefix: str,
    declared: dict[str, int],
    ranges: list[ArtifactRange],
) -> None:
    """One node's GetArtifacts stream into `staging` (its files under `prefix`): on a
    connection of its own when the runner offers one (app/runners/direct.py), else on the
    SSH channel."""
    from lanpool.app.runners.direct import (  # ssl: not for `status`
        IDLE_TIMEOUT_S,
        DirectUnavailable,
        direct_wanted,
        fetch,
    )

    writer = Writer(staging, prefix, declared, {r.path: r.offset for r in ranges})
    try:
        offer = await _stream(session, job_id, ranges, writer, direct_wanted(session.hello.features))
        if offer is not None:
            try:
                await asyncio.to_thread(fetch, session.peer_host, offer, writer.take, session.where, IDLE_TIMEOUT_S)
            except DirectUnavailable as exc:
                log.warning("%s: %s; pulling artifacts on the SSH channel instead", session.where, exc.message)
                await _stream(session, job_id, ranges, writer, False)
        writer.check_complete()
    finally:
        writer.close()


async def _stream(
    session: "RunnerSession", job_id: str, ranges: list[ArtifactRange], writer: "Writer", direct: bool
) -> DirectOffer | None:
    """The stream on the channel into `writer`; or, asked `direct`, the runner's offer."""
    async for batch in session.get_artifacts(job_id, ranges, direct):
        if isinstance(batch[0], DirectOffer):
            return batch[0]
        errors = [m for m in batch if isinstance(m, Error)]
        if errors:
            raise ArtifactsRefused(f"{session.where}: {_clip(errors[0].message)}")
        await asyncio.to_thread(writer.take, batch)
    return None


class Writer:
    """Checks and writes one node's stream; see the module docstring for the rules. `starts`:
    path -> the first byte asked of each file (a resumed pull: the bytes already staged)."""

    def __init__(self, staging: Path, prefix: str, declared: dict[str, int], starts: dict[str, int]) -> None:
        self.staging = staging
        self.prefix = prefix
        self.declared = declared
        self.expected = dict(starts)  # path -> next offset, for the files still to come
        self.ended: set[str] = set()
        self._fds: dict[str, int] = {}

    def take(self, batch: Sequence[AgentMessage]) -> None:
        for msg in batch:
            if isinstance(msg, ArtifactData):
                self._data(msg)
            elif isinstance(msg, ArtifactEnd):
                self._end(msg)
            elif isinstance(msg, ArtifactsSent):
                self.check_complete()

    def _want(self, path: str) -> int:
        checked_path(path)
        if path not in self.expected:
            what = "sent twice" if path in self.ended else "not asked for"
            raise ArtifactsRefused(f"the runner sent {_q(path)}, which was {what}")
        return self.expected[path]

    def _data(self, msg: ArtifactData) -> None:
        at = self._want(msg.path)
        if msg.offset != at:
            raise ArtifactsRefused(f"the runner sent {_q(msg.path)} at byte {msg.offset}, expected {at}")
        end = at + len(msg.data)
        if end > self.declared[msg.path]:
            raise ArtifactsRefused(
                f"the runner sent more of {_q(msg.path)} than the {self.declared[msg.path]} bytes it declared"
            )
        fd = self._fds.get(msg.path)
        if fd is None:
            fd = self._fds[msg.path] = self._open(msg.path)
        os.pwrite(fd, msg.data, at)
        self.expected[msg.path] = end

    def _end(self, msg: ArtifactEnd) -> None:
        at = self._want(msg.path)
        size = self.declared[msg.path]
        if msg.size != size or at != size:
            raise ArtifactsRefused(
                f"the runner ended {_q(msg.path)} at {at} bytes (saying {msg.size}), {size} declared"
            )
        fd = self._fds.pop(msg.path, None)
        if fd is None:  # an empty file, or one whose bytes were all there already
            fd = self._open(msg.path)
        os.close(fd)
        del self.expected[msg.path]
        self.ended.add(msg.path)

    def _open(self, path: str) -> int:
        """The staging file for `path`, opened for writing without following any link: a
        resumed file keeps its bytes (the runner sends from where they end)."""
        parts = checked_path(self.prefix + path)
        dir_fd = make_dirs(self.staging, parts[:-1])
        try:
            return os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            raise ArtifactsRefused(f"artifact {_q(path)} cannot be written in staging: {exc.strerror}") from None
        finally:
            os.close(dir_fd)

    def check_complete(self) -> None:
        if self.expected:
            first = sorted(self.expected)[0]
            raise ArtifactsRefused(
                f"the runner ended the stream without {len(self.expected)} declared file(s), first {_q(first)}"
            )

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _sizes_there(staging: Path, every: dict[str, int]) -> dict[str, int]:
    """Bytes of each declared file already in staging (a resumed pull). A file larger than
    declared, or anything but a regular file, starts over."""
    have: dict[str, int] = {}
    for path, size in every.items():
        parts = checked_path(path)
        try:
            st = os.stat(staging.joinpath(*parts), follow_symlinks=False)
        except OSError:
            continue
        if os.path.islink(staging.joinpath(*parts[:-1])) or not _regular(st) or st.st_size > size:
            shutil.rmtree(staging, ignore_errors=True)  # not ours: start over, from nothing
            staging.mkdir()
            return {}
        have[path] = st.st_size
    return have


def _regular(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode)


def _ensure_room(where: Path, need: int) -> None:
    free = shutil.disk_usage(where).free
    if need > free - DISK_RESERVE_BYTES:
        raise ArtifactsRefused(
            f"the artifacts need {need / 2**20:.1f} MiB more: they do not fit in the "
            f"{free / 2**20:.1f} MiB free at {where}"
        )


def _q(name: str) -> str:
    text = repr(name)
    return text if len(text) <= 200 else text[:200] + "...'"


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
