"""A process job's stdout and stderr: pipes read in few, large reads.

asyncio's subprocess pipes hand over what each wake-up finds: a job printing through
Python's 8 KiB stdout buffer gave ~23,000 reads of ~4 KiB for 100 MB, each one a syscall,
a spool record and a wake-up of every follower: most of the agent's CPU in a log flood.
Here the pipe is made 1 MiB (F_SETPIPE_SZ: what Linux allows any user by default) and,
after a read that found less than half of that, the pump waits GATHER_S before the next:
a flood then comes in reads of GATHER_S worth (a few hundred KiB), while a line after a
quiet spell is read at once. The job does not wait on the pipe for it: 1 MiB is GATHER_S
of output at 200 MB/s; where the pipe stays 64 KiB, only reads under 32 KiB wait.
"""

import asyncio
import contextlib
import fcntl
import logging
import os

from lanpool.agent.executors.base import OutputSink
from lanpool.agent.executors.line_cutter import whole_lines

log = logging.getLogger(__name__)

PIPE_BYTES = 1 << 20
GATHER_S = 0.005
READ_BYTES = 1 << 20  # at most, per read: the spool takes it as one record
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux's values (Python >= 3.10 names them)
_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)


def open_pipe() -> tuple[int, int]:
    """(read end, write end) for a child's stdout or stderr: both close-on-exec (the child gets
    the write end as its fd 1 or 2 only), the read end non-blocking and as large as allowed."""
    r, w = os.pipe2(os.O_CLOEXEC)
    with contextlib.suppress(OSError):  # a lower pipe-max-size, or not Linux: the pipe stays as it is
        fcntl.fcntl(r, _F_SETPIPE_SZ, PIPE_BYTES)
    os.set_blocking(r, False)
    return r, w


def capacity(fd: int) -> int:
    try:
        return int(fcntl.fcntl(fd, _F_GETPIPE_SZ))
    except OSError:
        return 64 * 1024


async def pump(fd: int, stream: str, sink: OutputSink) -> None:
    """Deliver whole lines from the pipe's read end until EOF, then what is left as a line;
    a line longer than MAX_LINE is cut (agent/executors/line_cutter.py). Closes `fd`."""
    loop = asyncio.get_running_loop()
    half = capacity(fd) // 2
    partial = b""
    broken = False

    def deliver(lines: bytes, cut: bool) -> None:
        # A sink that raises (a bug: the job's own handles a full disk, agent.jobs.job) must not end
        # the pump: the job would block on a full pipe, or die of SIGPIPE, with no word of why.
        # Said once in the agent's log; the pipe is drained to its end, the rest dropped.
        nonlocal broken
        if broken:
            return
        try:
            if cut:  # flagged (OutputSink): the job's log holds back at a cut what may begin a secret
                sink(stream, lines + b"\n", True)
            else:
                sink(stream, lines)
        except Exception:
            broken = True
            log.exception("a job's %s could not be delivered; the rest of it is dropped", stream)

    try:
        while True:
            await _readable(loop, fd)
            data, ended = _read_available(fd)
            if data:
                partial = whole_lines(partial, data, deliver)
            if ended:
                break
            if len(data) < half:
                await asyncio.sleep(GATHER_S)
        if partial:
            deliver(partial, True)
    finally:
        os.close(fd)


async def _readable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


def _read_available(fd: int) -> tuple[bytes, bool]:
    """What the pipe holds now (at most READ_BYTES), and whether its write end is closed."""
    parts: list[bytes] = []
    total = 0
    while total < READ_BYTES:
        try:
            chunk = os.read(fd, READ_BYTES - total)
        except BlockingIOError:
            break
        except InterruptedError:
            continue
        if not chunk:
            return b"".join(parts), True
        parts.append(chunk)
        total += len(chunk)
    return b"".join(parts), False
