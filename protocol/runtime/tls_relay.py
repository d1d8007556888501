"""A terminal's bytes both ways over one TLS socket, on ONE thread (the direct shell).

OpenSSL does not let one SSL object be used by two threads at once: a read on one thread
while another writes may corrupt its state (CPython releases the GIL inside SSL_read and
SSL_write and adds no lock of its own). So both directions go through this one loop: the
TLS socket non-blocking, poll() on it and on the local side, every write retried until
whole, and data read only when the previous read's bytes are written (the far side's flow
control holds, nothing grows without bound). One poll per keystroke, no thread hand-off, and
the poll's registrations change only when a write is held up, not per keystroke.

The controller relays its terminal (in: the keyboard, out: the screen); the agent relays
the job's PTY master or docker exec's socket (one fd both ways).
"""

import contextlib
import os
import select
import socket
import ssl

READ_SIZE = 64 * 1024
_READABLE = select.POLLIN | select.POLLPRI
_READ_EVENTS = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR  # an end is read as one
_WOULD_BLOCK = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError)


def relay(
    conn: ssl.SSLSocket, local_in: int, local_out: int, *, stop_fd: int | None = None, end_with_local: bool
) -> None:
    """Copy local_in -> conn and conn -> local_out until conn ends (everything it sent is
    written out first), `stop_fd` becomes readable, or, with `end_with_local`, local_in ends
    (everything it gave is sent first). A local_in that ends otherwise is just no longer read.
    Returns quietly on a dropped connection: the caller tells the end from the channel.
    `local_in` and `local_out` may be one descriptor (a PTY master, a socket)."""
    conn.setblocking(False)
    cfd = conn.fileno()
    # Bound once: a keystroke's round trip is a few of these calls on each side (scripts/bench-shell).
    recv, send, pending, write, read = conn.recv, conn.send, conn.pending, os.write, os.read
    poller = select.poll()
    poll = poller.poll
    to_conn = b""  # read from local_in, not yet sent
    to_local = b""  # read from conn, not yet written
    local_open = True

    def watch() -> None:
        """Register what to wait for, given what is held: changed only when a write is held up
        or local_in ended, not per keystroke."""
        masks = {cfd: (0 if to_local else _READABLE) | (select.POLLOUT if to_conn else 0)}
        if to_local:
            masks[local_out] = masks.get(local_out, 0) | select.POLLOUT
        if local_open and not to_conn:
            masks[local_in] = masks.get(local_in, 0) | _READABLE
        for fd in (cfd, local_in, local_out):
            if masks.get(fd):
                poller.register(fd, masks[fd])
            else:
                with contextlib.suppress(KeyError):
                    poller.unregister(fd)

    if stop_fd is not None:
        poller.register(stop_fd, _READABLE)
    watch()
    rewatch = False  # the registrations are a held write's, or local_in ended
    try:
        while True:
            # Decrypted bytes already inside SSL are invisible to poll.
            events = ((cfd, select.POLLIN),) if not to_local and pending() else poll()
            for fd, ev in events:
                if fd == stop_fd or ev & select.POLLNVAL:  # stopped, or a descriptor closed under us
                    return
                if fd == cfd and not to_local and ev & _READ_EVENTS:
                    try:
                        data = recv(READ_SIZE)
                    except _WOULD_BLOCK:  # a TLS record still in pieces
                        continue
                    except ssl.SSLZeroReturnError:
                        return
                    if not data:  # the far end closed (all it sent before is written: see below)
                        return
                    to_local = data
                if fd == local_in and local_open and not to_conn and ev & _READ_EVENTS:
                    try:
                        data = read(local_in, READ_SIZE)
                    except BlockingIOError:
                        continue
                    except OSError:  # EIO: a PTY master whose last holder closed it is an end
                        data = b""
                    if data:
                        to_conn = data
                    else:
                        local_open = False
                        rewatch = True
            # Written at once where possible: a keystroke's echo must not wait for another poll.
            while to_conn:
                try:
                    to_conn = to_conn[send(to_conn) :]
                except _WOULD_BLOCK:
                    break
            while to_local:
                try:
                    to_local = to_local[write(local_out, to_local) :]
                except BlockingIOError:
                    break
            if end_with_local and not local_open and not to_conn:
                return
            if rewatch or to_conn or to_local:
                watch()
                rewatch = bool(to_conn or to_local)  # once drained, back to reading both
    except (OSError, ssl.SSLError):  # the connection or the local side went
        return


def shut(conn: socket.socket) -> None:
    """End a connection a relay may be waiting on (it sees the end and returns)."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
