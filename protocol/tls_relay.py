"""A terminal's bytes both ways over one TLS socket, on ONE thread (the direct shell, issue #16).

OpenSSL does not let one SSL object be used by two threads at once: a read on one thread
while another writes may corrupt its state (CPython releases the GIL inside SSL_read and
SSL_write and adds no lock of its own). So both directions go through this one loop: the
TLS socket non-blocking, select() on it and on the local side, every write retried until
whole, and data read only when the previous read's bytes are written (the far side's flow
control holds, nothing grows without bound). One select per keystroke, no thread hand-off.

The controller relays its terminal (in: the keyboard, out: the screen); the agent relays
the job's PTY master or docker exec's socket (one fd both ways).
"""

import contextlib
import os
import select
import socket
import ssl

READ_SIZE = 64 * 1024


def relay(
    conn: ssl.SSLSocket, local_in: int, local_out: int, *, stop_fd: int | None = None, end_with_local: bool
) -> None:
    """Copy local_in -> conn and conn -> local_out until conn ends (everything it sent is
    written out first), `stop_fd` becomes readable, or, with `end_with_local`, local_in ends
    (everything it gave is sent first). A local_in that ends otherwise is just no longer read.
    Returns quietly on a dropped connection: the caller tells the end from the channel."""
    conn.setblocking(False)
    to_conn = b""  # read from local_in, not yet sent
    to_local = b""  # read from conn, not yet written
    local_open = True
    while True:
        readers: list[int | ssl.SSLSocket] = []
        writers: list[int | ssl.SSLSocket] = []
        pending = False  # decrypted bytes already inside SSL, which select cannot see
        if to_local:
            writers.append(local_out)
        elif conn.pending():
            pending = True
        else:
            readers.append(conn)
        if to_conn:
            writers.append(conn)
        elif local_open:
            readers.append(local_in)
        elif end_with_local:
            return
        if stop_fd is not None:
            readers.append(stop_fd)
        try:
            ready_r, _ready_w, _ = select.select(readers, writers, [], 0 if pending else None)
        except (OSError, ValueError):  # a descriptor closed under us: the session is over
            return
        if stop_fd is not None and stop_fd in ready_r:
            return
        if pending:
            ready_r.append(conn)
        try:
            if conn in ready_r:
                data = _recv(conn)
                if data == b"":  # the far end closed (all it sent before is written: see above)
                    return
                to_local = data or b""
            if local_in in ready_r:
                data = _read(local_in)
                if data == b"":
                    local_open = False
                to_conn = data or b""
            # Written at once where possible (a keystroke's echo must not wait for another select).
            if to_conn:
                to_conn = _send(conn, to_conn)
            if to_local:
                to_local = _write(local_out, to_local)
        except (OSError, ssl.SSLError):  # the connection or the local side went
            return


def _recv(conn: ssl.SSLSocket) -> bytes | None:
    """What arrived; None: nothing whole yet (a TLS record in pieces); b"": the end."""
    try:
        return conn.recv(READ_SIZE)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return None
    except ssl.SSLZeroReturnError:
        return b""


def _read(fd: int) -> bytes | None:
    """What the local side gave; None: nothing after all; b"": its end."""
    try:
        return os.read(fd, READ_SIZE)
    except BlockingIOError:
        return None
    except OSError:  # EIO: a PTY master whose last holder closed it is an end
        return b""


def _send(conn: ssl.SSLSocket, data: bytes) -> bytes:
    """What is left of `data` once the socket took what it could now."""
    while data:
        try:
            sent = conn.send(data)
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
            return data
        data = data[sent:]
    return data


def _write(fd: int, data: bytes) -> bytes:
    while data:
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            return data
        data = data[written:]
    return data


def shut(conn: socket.socket) -> None:
    """End a connection a relay may be waiting on (it sees the end and returns)."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
