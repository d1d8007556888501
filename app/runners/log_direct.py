"""A burst of a job's log on a connection of its own: the controller's side (agent/ssh/log_direct.py
says when a runner offers one and why; app/runners/direct.py checks its certificate and sends
its token).

A thread reads and decodes the frames, a batch at a time, one batch ahead of the one being
stored: when the store is slower, the thread waits with the next batch, the socket stops
being read and the runner's writes back up (memory stays flat). Every frame must be a
LogChunk (anything else is a RunnerProtocolError, as it would be among the channel's log
lines); whose lines they are is the caller's to check, as on the channel (app/jobs/own_output.py).
The runner ends the burst with a TLS close_notify; a connection that ends without one, or
mid-frame, was cut: a RunnerError (the follow re-attaches from what it stored).
"""

import asyncio
import contextlib
import os
import select
import socket
import ssl
from collections.abc import AsyncGenerator

from lanpool.app.errors import RunnerError, RunnerProtocolError
from lanpool.app.runners.direct import (
    CONNECT_TIMEOUT_S,
    DIRECT_ENV,
    IDLE_TIMEOUT_S,
    DirectUnavailable,
    fill,
    handshake,
    read_message,
)
from lanpool.protocol import DirectOffer, LogChunk

BATCH_BYTES = 1024 * 1024  # log bytes per batch handed to the loop (~10k lines of 100 B)
_HEADER_BYTES = 4


def log_direct_wanted() -> bool:
    """Whether to let a runner that offers it send log bursts directly: LANPOOL_DIRECT_TRANSFERS
    is not 0 (the same switch as artifacts')."""
    return os.environ.get(DIRECT_ENV, "1").strip() != "0"


class LogReader:
    """The reading end of one direct log burst (its methods block: run them in a thread)."""

    def __init__(self, conn: ssl.SSLSocket, job_id: str, where: str) -> None:
        self._conn = conn
        self._job_id = job_id
        self._where = where
        self._ended = False
        self._error: RunnerError | None = None

    @classmethod
    def connect(cls, host: str, offer: DirectOffer, where: str) -> "LogReader":
        """DirectUnavailable when the port cannot be reached or is not the runner's (nothing taken)."""
        try:
            raw = socket.create_connection((host, offer.port), timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            raise DirectUnavailable(f"cannot connect to port {offer.port}: {exc.strerror or exc}") from None
        try:
            conn = handshake(raw, offer, ragged_eof_ok=False)
        except BaseException:
            raw.close()
            raise
        conn.settimeout(IDLE_TIMEOUT_S)
        return cls(conn, offer.job_id, where)

    def read_batch(self) -> list[LogChunk] | None:
        """The next LogChunks: what has arrived, up to BATCH_BYTES of lines (waiting for one
        frame at least); None once the runner has closed the burst cleanly. An error after
        some frames of a batch is raised by the next call: those frames are handed over first."""
        if self._error is not None:
            raise self._error
        batch: list[LogChunk] = []
        size = 0
        while not self._ended and size < BATCH_BYTES:
            try:
                msg = self._frame()
            except (RunnerError, RunnerProtocolError) as exc:
                if not batch:
                    raise
                self._error = exc
                break
            if msg is None:
                self._ended = True
                break
            batch.append(msg)
            size += len(msg.data)
            if not self._conn.pending() and not select.select([self._conn], [], [], 0)[0]:
                break  # nothing more has arrived: hand these over now
        return batch or None

    def _frame(self) -> LogChunk | None:
        try:
            return self._read_frame()
        except TimeoutError:
            raise RunnerError(f"{self._where} stopped sending the log of job {self._job_id}") from None
        except (OSError, ssl.SSLError) as exc:
            raise RunnerError(f"lost {self._where}'s direct log connection: {exc}") from None

    def _read_frame(self) -> LogChunk | None:
        head = bytearray(_HEADER_BYTES)
        got = self._conn.recv_into(head)
        if not got:
            return None  # a clean close (close_notify: a cut without one raises SSLEOFError)
        if got < _HEADER_BYTES and not fill(self._conn, memoryview(head)[got:]):
            raise RunnerError(f"{self._where} closed the direct log connection in the middle of a frame")
        msg = read_message(self._conn, int.from_bytes(head, "big"), self._where, "direct log")
        if not isinstance(msg, LogChunk):
            raise RunnerProtocolError(f"{self._where} sent {type(msg).__name__} on the direct log connection")
        return msg

    def stop(self) -> None:
        """Wake a read blocked in another thread (it ends with an error nobody waits for)."""
        with contextlib.suppress(OSError):
            # The TCP socket's shutdown, not SSLSocket's: that one drops the TLS state, and the
            # reading thread would go on reading the bytes still queued as plain text.
            socket.socket.shutdown(self._conn, socket.SHUT_RDWR)

    def close(self) -> None:
        self._conn.close()


async def direct_batches(host: str, offer: DirectOffer, where: str) -> AsyncGenerator[list[LogChunk], None]:
    """The burst's LogChunks in batches, until the runner closes it cleanly. DirectUnavailable
    before the first (use the channel); RunnerError or RunnerProtocolError after."""
    connecting = asyncio.ensure_future(asyncio.to_thread(LogReader.connect, host, offer, where))
    try:
        reader = await asyncio.shield(connecting)
    except asyncio.CancelledError:  # the connection, if it comes, is nobody's
        connecting.add_done_callback(_close_reader)
        raise
    ahead = asyncio.ensure_future(asyncio.to_thread(reader.read_batch))
    try:
        while (batch := await asyncio.shield(ahead)) is not None:
            ahead = asyncio.ensure_future(asyncio.to_thread(reader.read_batch))
            yield batch
    finally:
        if ahead.done():
            if not ahead.cancelled():
                ahead.exception()  # taken (raised above, or of no interest now)
            reader.close()
        else:  # the consumer stopped: wake the thread, close once it is out of the socket
            reader.stop()

            def close(done: "asyncio.Future[list[LogChunk] | None]") -> None:
                if not done.cancelled():
                    done.exception()
                reader.close()

            ahead.add_done_callback(close)


def _close_reader(done: "asyncio.Future[LogReader]") -> None:
    if not done.cancelled() and done.exception() is None:
        done.result().close()
