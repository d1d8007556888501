"""A container job's output read from files, each byte delivered exactly once.

Why files: through the engine's log API a container printing 1M short lines
took 110 s to deliver here (46 s on a quiet machine) against 2.6 s for the same
program as a process job. Every line costs dockerd a JSON encode when written
(json-file driver), a decode plus a multiplexed frame when read back, and the
SDK one Python iteration per frame; and a log stream can only start at byte 0,
so each pass after a restart re-reads everything. Reading the engine's own
json-file log directly would need the agent on the engine's host with read
access to its data root; an attached stream is lost while the agent is down.
So the container's wrapper (docker.py) sends the job's stdout and stderr to
`out` and `err` in a directory of the job (`stdio/`, bind-mounted at
STDIO_MOUNT), and the agent reads them by offset: the offset of each file is
the bytes of that stream already spooled, which survives an agent restart (the
spool is the record: `delivered`), so output resumes exactly where it stopped.
`docker logs` shows only what the wrapper itself prints; the job's output is in
`lanpool logs` (and in the stdio/ files while the job dir is kept).

The files are the job's, so untrusted: they are opened through `open_regular`
(a link, FIFO or device in their place is refused with one "sys" line), read in
a thread, at most READ_MAX a stream per pass, and a line longer than _MAX_LINE
is cut, so neither a huge line nor binary output can hold unbounded memory. A
job that truncates or rewrites its own files only garbles its own log.
"""

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from lanpool.agent.executors.base import OutputSink
from lanpool.agent.executors.line_cutter import MAX_LINE, whole_lines
from lanpool.agent.workspace.files import NotARegularFile, open_regular

log = logging.getLogger(__name__)

STDIO_DIR = "stdio"  # in the job dir, next to the workspace
STDIO_MOUNT = "/.lanpool-stdio"  # where the container sees it
STREAMS = ("out", "err")
_MAX_LINE = MAX_LINE  # as the process executor: a longer line is cut
READ_MAX = 1024 * 1024  # a stream's bytes read per pass: memory stays bounded whatever the job writes
POLL_S = 0.05  # while the files do not grow


def fresh_stdio_dir(job_dir: Path, user: str) -> dict[str, int]:
    """A new stdio/ in the job dir with empty `out` and `err` that the container's `user`
    ("uid:gid") can append to (blocking), and a read descriptor of each, opened before the
    job runs, so that it cannot swap them before the agent holds them. What a previous start
    of the job left is removed (rmtree never follows a link the job may have put there)."""
    path = job_dir / STDIO_DIR
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()
    path.mkdir()
    for stream in STREAMS:
        os.close(os.open(path / stream, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        _hand_over(path / stream, user)
    fds: dict[str, int] = {}
    try:
        for stream in STREAMS:
            fds[stream] = open_regular(path, stream)
    except OSError:
        close_all(fds)
        raise
    return fds


def close_all(fds: dict[str, int]) -> None:
    for fd in fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


def _hand_over(file: Path, user: str) -> None:
    """Let `user` write `file`: its owner when the agent may chown (root), else writable by all
    (the directory stays the agent's, so only these two files are)."""
    uid, _, gid = user.partition(":")
    if uid.isdigit() and (int(uid), int(gid) if gid.isdigit() else os.getgid()) == (os.getuid(), os.getgid()):
        return
    try:
        if not uid.isdigit():
            raise PermissionError("not a numeric uid")
        os.chown(file, int(uid), int(gid) if gid.isdigit() else -1)
    except OSError:
        os.chmod(file, 0o666)


class StdioFiles:
    """Follows a container's stdio/ files from `delivered` (bytes of each stream already spooled)."""

    def __init__(
        self, root: Path, sink: OutputSink, delivered: dict[str, int] | None = None, fds: dict[str, int] | None = None
    ) -> None:
        """`fds`: descriptors fresh_stdio_dir opened (now this object's); without them
        (a re-adopted container) the files are opened on the first read."""
        self.root = root
        self._sink = sink
        self.delivered = {s: (delivered or {}).get(s, 0) for s in STREAMS}
        self._partial = {s: b"" for s in STREAMS}  # read, not delivered: no newline yet
        self._fds: dict[str, int] = dict(fds or {})
        self._refused: set[str] = set()

    async def follow(self, ended: Callable[[], bool]) -> None:
        """Deliver the output live; return once `ended()` and the files hold nothing new."""
        while True:
            got = await self._pass()
            if not got:
                if ended():
                    return
                await asyncio.sleep(POLL_S)

    async def catch_up(self) -> None:
        """After the container exited: read to the end, a last line without a newline included."""
        while await self._pass():
            pass
        for stream in STREAMS:
            if self._partial[stream]:
                self._deliver(stream, self._partial[stream], cut=True)
                self._partial[stream] = b""

    def close(self) -> None:
        close_all(self._fds)

    async def _pass(self) -> bool:
        """One read of each stream (in a thread); True if anything was new. Offsets move
        only here, on the loop, so a pass cancelled mid-read delivers nothing twice."""
        at = {s: self.delivered[s] + len(self._partial[s]) for s in STREAMS}
        chunks = await asyncio.to_thread(self._read, at)
        for stream, data in chunks.items():
            self._take(stream, data)
        return any(chunks.values())

    def _read(self, at: dict[str, int]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for stream in STREAMS:
            fd = self._fds.get(stream)
            if fd is None:
                fd = self._open(stream)
                if fd is None:
                    continue
            try:
                found[stream] = os.pread(fd, READ_MAX, at[stream])
            except OSError as exc:
                log.warning("%s/%s: %s", self.root, stream, exc)
        return found

    def _open(self, stream: str) -> int | None:
        if stream in self._refused:
            return None
        try:
            fd = self._fds[stream] = open_regular(self.root, stream)
            return fd
        except NotARegularFile as exc:
            self._refused.add(stream)
            log.warning("%s/%s not read: %s", self.root, stream, exc)
            self._sink("sys", f"lanpool: the job's std{stream} file was replaced ({exc}); not read\n".encode())
        except OSError:
            pass  # not written yet
        return None

    def _take(self, stream: str, data: bytes) -> None:
        self._partial[stream] = whole_lines(
            self._partial[stream], data, lambda lines, cut: self._deliver(stream, lines, cut), _MAX_LINE
        )

    def _deliver(self, stream: str, data: bytes, cut: bool = False) -> None:
        self._sink(stream, data + b"\n" if cut else data, cut)
        self.delivered[stream] += len(data)
