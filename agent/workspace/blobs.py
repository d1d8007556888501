"""The runner's blob cache: file contents by sha256, the stuff workspaces are built from.

A controller asks which blobs the runner lacks (HaveBlobs) and sends only those,
in parts (PutBlob). What arrives is untrusted: each part is written to
blobs/tmp/<sha>.<random>.part (created 0600 with O_NOFOLLOW|O_EXCL, so nothing
is written through a name someone else made), hashed as it is written, and only
renamed to blobs/<sha> once its bytes hash to the name it claimed. A part that
is never completed is dropped when its channel closes.

The cache is bounded: using a blob touches its mtime, and past `budget` bytes
the least recently used blobs go, except those pinned (a channel that has
offered or sent them and not submitted yet, a workspace being staged).
"""

import contextlib
import hashlib
import logging
import os
import secrets
import shutil
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lanpool.agent.errors import JobError
from lanpool.protocol import ErrorCode

log = logging.getLogger(__name__)

DEFAULT_BUDGET = 20 * 1024**3
# Bytes of incomplete uploads at once, over every channel: what a controller can make
# this runner hold before it proves anything about the content.
MAX_IN_FLIGHT = 32 * 1024**3
DISK_MARGIN = 512 * 1024**2  # left free on the disk whatever a blob's size says
_EVICT_EVERY = 1024**3  # bytes stored between eviction passes (each lists the cache)
_HEX = frozenset("0123456789abcdef")


def is_sha256(name: str) -> bool:
    return len(name) == 64 and set(name) <= _HEX


@dataclass
class BlobPart:
    """A blob being received: its temp file, hash so far and bytes so far."""

    sha256: str
    size: int
    path: Path
    fd: int
    hasher: "hashlib._Hash" = field(default_factory=hashlib.sha256)
    done: int = 0


class BlobCache:
    """One per agent: every channel's uploads and every staging go through it."""

    def __init__(self, root: Path, budget: int = DEFAULT_BUDGET) -> None:
        self.root = root
        self.tmp = root / "tmp"
        self.budget = budget
        self.in_flight = 0
        self._pins: Counter[str] = Counter()
        self._stored = 0  # bytes stored since the last eviction pass

    def create(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        for stale in self.tmp.iterdir():  # parts of an agent that died mid-upload
            with contextlib.suppress(OSError):
                stale.unlink()

    def path(self, sha256: str) -> Path:
        return self.root / sha256

    def has(self, sha256: str) -> bool:
        """Whether the blob is here (a use: its mtime is touched, so LRU keeps it)."""
        try:
            os.utime(self.path(sha256), follow_symlinks=False)
            return True
        except OSError:
            return False

    def missing(self, sha256s: Iterable[str]) -> list[str]:
        return [s for s in dict.fromkeys(sha256s) if not self.has(s)]

    # -- pins ----------------------------------------------------------------------

    @contextlib.contextmanager
    def pinned(self, sha256s: Iterable[str]) -> Iterator[None]:
        names = list(set(sha256s))
        self.pin(names)
        try:
            yield
        finally:
            self.unpin(names)

    def pin(self, sha256s: Iterable[str]) -> None:
        self._pins.update(sha256s)

    def unpin(self, sha256s: Iterable[str]) -> None:
        self._pins.subtract(sha256s)
        self._pins = +self._pins  # drop the ones at zero

    # -- receiving -----------------------------------------------------------------

    def begin(self, sha256: str, size: int) -> BlobPart:
        if not is_sha256(sha256):
            raise JobError(ErrorCode.BAD_REQUEST, "a blob's name must be 64 lowercase hex digits")
        if self.in_flight + size > MAX_IN_FLIGHT:
            raise JobError(
                ErrorCode.BAD_REQUEST,
                f"blob {sha256[:12]} of {size} bytes would put more than {MAX_IN_FLIGHT} bytes of uploads "
                "in progress on this runner: try again when the others finish",
            )
        free = shutil.disk_usage(self.root).free
        if size + DISK_MARGIN > free:
            raise JobError(
                ErrorCode.BAD_REQUEST, f"blob {sha256[:12]} of {size} bytes does not fit: {free} bytes free here"
            )
        path = self.tmp / f"{sha256}.{secrets.token_hex(6)}.part"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self.in_flight += size
        return BlobPart(sha256, size, path, fd)

    def write(self, part: BlobPart, offset: int, size: int, data: bytes) -> bool:
        """Append a part's bytes; True once the blob is whole, verified and in the cache.
        JobError (the part is then dropped) when the peer's numbers or content do not hold."""
        try:
            if size != part.size:
                raise self._refuse(part, f"says {size} bytes after saying {part.size}")
            if offset != part.done:
                raise self._refuse(part, f"part at offset {offset}, expected {part.done}")
            if part.done + len(data) > part.size:
                raise self._refuse(part, f"more than the {part.size} bytes it declared")
            view = memoryview(data)
            while view:
                view = view[os.write(part.fd, view) :]
            part.hasher.update(data)
            part.done += len(data)
            if part.done < part.size:
                return False
            if part.hasher.hexdigest() != part.sha256:
                raise self._refuse(part, "content does not hash to its name")
            os.fsync(part.fd)
            os.close(part.fd)
            part.fd = -1
            os.replace(part.path, self.path(part.sha256))
            self.in_flight -= part.size
            self._stored += part.size
            if self._stored > min(self.budget // 8, _EVICT_EVERY):  # the budget holds during long uploads too
                with self.pinned([part.sha256]):  # the blob just stored is about to be used
                    self.evict()
            return True
        except JobError:
            raise
        except OSError:
            self.drop(part)
            raise

    def _refuse(self, part: BlobPart, problem: str) -> JobError:
        self.drop(part)
        return JobError(ErrorCode.BAD_REQUEST, f"blob {part.sha256[:12]}: {problem}: refused")

    def discard(self, sha256: str) -> None:
        """Remove a stored blob that no longer holds what its name says (a job wrote to it):
        never staged again; the next HaveBlobs lists it, so it is sent again."""
        with contextlib.suppress(OSError):
            self.path(sha256).unlink()

    def drop(self, part: BlobPart) -> None:
        """Forget an incomplete blob (refused, or its channel closed)."""
        if part.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(part.fd)
            part.fd = -1
            self.in_flight -= part.size
        with contextlib.suppress(OSError):
            part.path.unlink()

    # -- retention -----------------------------------------------------------------

    def entries(self) -> list[tuple[float, int, Path]]:
        """(mtime, size, path) of every cached blob, least recently used first."""
        found = []
        with os.scandir(self.root) as it:
            for entry in it:
                if is_sha256(entry.name) and entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    found.append((st.st_mtime, st.st_size, Path(entry.path)))
        return sorted(found)

    def usage(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def evict(self, budget: int | None = None) -> tuple[int, int]:
        """Remove least recently used blobs until the cache holds at most `budget` bytes
        (default: its own); pinned ones stay. Returns (blobs removed, bytes freed)."""
        budget = self.budget if budget is None else budget
        self._stored = 0
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        removed = freed = 0
        for _mtime, size, path in entries:
            if total <= budget:
                break
            if self._pins[path.name]:
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed, freed, total = removed + 1, freed + size, total - size
        if removed:
            log.info("blob cache: evicted %d blob(s), %d bytes (budget %d)", removed, freed, budget)
        return removed, freed
