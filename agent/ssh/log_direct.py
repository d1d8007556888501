"""A burst of a job's log on a TLS connection of its own (agent/direct.py
has the connection, its token and certificate).

A log flood on the SSH channel is held by asyncssh's per-packet Python work on both sides
(~420k lines/s of 100 B on a 2-core machine, bare); the same LogChunk frames on a TLS
socket written by a thread are not. Only a flood goes there: a followed job that prints
now and then keeps its channel (its first line never waits for a handshake, and an idle
follower holds none of the agent's MAX_TRANSFERS slots). The rule, `Burst`: BURST_BYTES
sent on the channel within BURST_WINDOW_S (~16 MB/s, ~160k lines/s of 100 B: a rate the
channel carries at a good part of its CPU). A rate, not a backlog in the spool: the
channel's 16 MiB window takes a flood's first 16 MiB without the stream ever waiting, so
a backlog shows only once that much is in flight.

On the direct connection a thread reads the spool from where the channel stopped and sends
frames until, over GRACE_S, it found less than a chunk (the flood is over: the channel
carries that rate easily); then it closes cleanly, and the channel goes on from where the
thread got to (so the final JobStatus always comes on the channel, after every line).
"""

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Generator

from lanpool.agent.direct import DirectSender
from lanpool.agent.jobs.job import Job
from lanpool.agent.workspace.spool import SpoolRecord
from lanpool.protocol import DirectOffer, LogChunk, encode_message

# Channel bytes within BURST_WINDOW_S that make a flood: a handshake costs a few ms of it.
BURST_BYTES = 4 * 1024 * 1024
BURST_WINDOW_S = 0.25
GRACE_S = 0.15  # less than a chunk read in this long: the flood is over, back to the channel
POLL_S = 0.01  # between reads that found less than a full chunk


class Burst:
    """Counts what a log stream sent on its channel lately."""

    def __init__(self) -> None:
        self._since = time.monotonic()
        self._sent = 0

    def sent(self, nbytes: int) -> bool:
        """Note `nbytes` sent; True when the stream is in a flood worth a connection."""
        now = time.monotonic()
        if now - self._since > BURST_WINDOW_S:
            self._since, self._sent = now, 0
        self._sent += nbytes
        return self._sent >= BURST_BYTES

    def reset(self) -> None:
        self._since, self._sent = time.monotonic(), 0


class _Progress:
    """Where the transfer thread has got to: the seq after the last line it sent."""

    def __init__(self, cursor: int) -> None:
        self.cursor = cursor


def chunk_frames(job_id: str, records: list[SpoolRecord]) -> bytes:
    """A spool read's records as LogChunk frames, on the channel or on a direct connection."""
    return b"".join(encode_message(LogChunk(job_id, r.seq, r.stream, r.data, at=r.at)) for r in records)


def log_frames(job: Job, progress: _Progress, chunk_bytes: int) -> Generator[bytes, None, None]:
    """LogChunk frames from `progress.cursor` until less than `chunk_bytes` came in GRACE_S
    (run in the transfer's thread; LogSpool.read is safe beside the loop's appends). The cursor
    moves once a buffer is sent: the generator resumes only after sendall took it."""
    job_id = job.record.job_id
    since, read = time.monotonic(), 0
    while True:
        records = job.spool.read(progress.cursor, chunk_bytes)
        if records:
            size = sum(len(r.data) for r in records)
            cursor = records[-1].seq + records[-1].n_lines
            yield chunk_frames(job_id, records)
            progress.cursor = cursor
            read += size
            if size >= chunk_bytes:
                continue
        elif job.record.terminal:
            return
        now = time.monotonic()
        if now - since >= GRACE_S:
            if read < chunk_bytes:
                return
            since, read = now, 0
        time.sleep(POLL_S)


async def send_burst(
    direct: DirectSender,
    host: str,
    job: Job,
    cursor: int,
    chunk_bytes: int,
    say: Callable[[DirectOffer], Awaitable[None]],
) -> int | None:
    """Offer the log from `cursor` on a connection of its own, `say` the offer on the channel,
    and wait for the transfer to end; returns the seq the channel goes on from. None when no
    offer could be made (at the limit, no port): the channel goes on as it was."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()
    progress = _Progress(cursor)

    def end() -> None:
        if not ended.done():
            ended.set_result(None)

    def on_end() -> None:  # in the transfer's thread
        with contextlib.suppress(RuntimeError):  # the loop is closed: the agent is stopping
            loop.call_soon_threadsafe(end)

    job_id = job.record.job_id
    offer = direct.offer(host, job_id, lambda: log_frames(job, progress, chunk_bytes), on_end)
    if offer is None:
        return None
    try:
        await say(offer)
        await ended
    except BaseException:  # the channel went (or the stream was cancelled): nobody will connect
        direct.withdraw(offer)
        raise
    return progress.cursor
