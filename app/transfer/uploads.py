"""A job's workspace going up to a runner, by content.

The workspace is the code snapshot (app/transfer/snapshot.py) plus the artifacts of the
jobs it depends on, at their paths (a later entry of a path wins). Each file is
named by its sha256; the runner says which of those it lacks (HaveBlobs) and
only those are sent, streamed from disk in parts (PutBlob), so a second run
after editing one file sends one file, and a dependency that ran on the same
runner (whose artifacts it keeps as blobs) sends nothing. A file is hashed
again as it is sent: one that changed since the snapshot fails the upload.
"""

import hashlib
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lanpool.app.errors import LanpoolError, UsageError
from lanpool.app.home import ControllerHome
from lanpool.app.runners.client import RunnerSession
from lanpool.app.store import JobRow, Store
from lanpool.app.transfer.snapshot import Manifest, content_hash
from lanpool.protocol import FileEntry, PutBlob

log = logging.getLogger(__name__)

PART_BYTES = 1024 * 1024  # of a PutBlob: a frame well under the 16 MiB limit
PROGRESS_AFTER_S = 1.0  # uploads quicker than this say nothing
PROGRESS_EVERY_S = 1.0


class UploadError(LanpoolError):
    """The upload cannot go on (a file changed under it, a local read failed)."""


@dataclass
class WorkspaceFiles:
    """A job's workspace as SubmitJob.files, and where each blob's bytes are on this machine."""

    entries: list[FileEntry] = field(default_factory=list)
    sources: dict[str, tuple[Path, int]] = field(default_factory=dict)  # sha256 -> (a file with it, its size)

    def add(self, entry: FileEntry, source: Path | None = None) -> None:
        self.entries.append(entry)
        if source is not None:
            self.sources.setdefault(entry.sha256, (source, entry.size))


def workspace_files(manifest: Manifest, home: ControllerHome, store: Store, inputs: list[JobRow]) -> WorkspaceFiles:
    """The snapshot's entries, then each input job's artifacts over them."""
    files = WorkspaceFiles()
    for e in manifest.entries:
        if e.link:
            files.add(FileEntry(e.path, link=e.link))
        else:
            files.add(FileEntry(e.path, e.sha256, e.size, e.mode), manifest.root / e.path)
    for dep in inputs:
        _add_artifacts(files, home, store, dep)
    return files


def _add_artifacts(files: WorkspaceFiles, home: ControllerHome, store: Store, dep: JobRow) -> None:
    """`dep`'s artifacts from this controller's store (regular files only: links there are not followed)."""
    if not store.artifacts(dep.id):
        return
    root = home.job_artifacts(dep.id)
    if not root.is_dir():
        raise UsageError(f"the artifacts of job {dep.id} are no longer on this controller: run {dep.workflow} again")
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            digest, st = content_hash(path)
            rel = path.relative_to(root).as_posix()
            files.add(FileEntry(rel, digest, st.st_size, stat.S_IMODE(st.st_mode) & 0o755), path)


async def upload(session: RunnerSession, files: WorkspaceFiles, say: Callable[[str], None]) -> int:
    """Send the blobs `session`'s runner lacks; returns how many were sent."""
    missing = await session.missing_blobs(list(files.sources))
    if not missing:
        return 0
    total = sum(files.sources[s][1] for s in missing)
    progress = _Progress(len(missing), total, say)
    await session.put_blobs(_parts(files, missing, progress), len(missing))
    progress.done()
    log.info("%s: sent %d blob(s), %d bytes", session.where, len(missing), total)
    return len(missing)


def _parts(files: WorkspaceFiles, missing: list[str], progress: "_Progress") -> Iterator[PutBlob]:
    """PutBlob parts of every missing blob, read from disk as they go (never a whole file in memory)."""
    for sha in missing:
        path, size = files.sources[sha]
        changed = UploadError(f"{path} changed while uploading; run again")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            raise UploadError(f"cannot read {path}: {exc.strerror}; run again") from None
        try:
            if os.fstat(fd).st_size != size:
                raise changed
            h = hashlib.sha256()
            offset = 0
            while offset < size:
                data = os.read(fd, min(PART_BYTES, size - offset))
                if not data:
                    raise changed
                h.update(data)
                if offset + len(data) == size and h.hexdigest() != sha:
                    raise changed  # checked before its last part goes: the runner would refuse it anyway
                yield PutBlob(sha, offset, size, data)
                offset += len(data)
                progress.add(len(data))
            if size == 0:
                if h.hexdigest() != sha:
                    raise changed
                yield PutBlob(sha, 0, 0, b"")
        finally:
            os.close(fd)


class _Progress:
    """'uploading N files, X MB: 43%' through `say`, for uploads taking over a second."""

    def __init__(self, count: int, total: int, say: Callable[[str], None]) -> None:
        self.count, self.total, self.say = count, total, say
        self.sent = 0
        self.started = self.last = time.monotonic()
        self.shown = False

    def add(self, n: int) -> None:
        self.sent += n
        now = time.monotonic()
        if now - self.started >= PROGRESS_AFTER_S and now - self.last >= PROGRESS_EVERY_S:
            self.last, self.shown = now, True
            self.say(self._line())

    def done(self) -> None:
        if self.shown:
            self.say(self._line())

    def _line(self) -> str:
        pct = 100 * self.sent // self.total if self.total else 100
        return f"uploading {self.count} files, {self.total / 1e6:.1f} MB: {pct}%"
