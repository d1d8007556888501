"""A job's shell on a TLS connection of its own: the controller's side (agent/shell_direct.py
says why, and what the runner does).

The runner's offer came on the exec channel, inside the SSH connection whose host key is
pinned: the controller connects to the port it names on the runner's address, checks the
certificate is the one named and only then sends the token (app/direct_pull.py handshake).
Until then nothing was typed anywhere, so a port that cannot be reached, or another
certificate there, falls back to a shell on the channel (DirectUnavailable). After that,
a thread reads the terminal into the socket and another the socket onto the terminal;
window changes and the exit status stay on the channel.
"""

import contextlib
import os
import select
import socket
import ssl
import threading
from collections.abc import Sequence

from app.direct_pull import CONNECT_TIMEOUT_S, DIRECT_ENV, DirectUnavailable, handshake
from protocol import DirectOffer
from protocol.shell_direct import SHELL_DIRECT

SHELL_ENV = "LANPOOL_DIRECT_SHELLS"
_READ_SIZE = 64 * 1024


def shell_direct_wanted(features: Sequence[str]) -> bool:
    """Whether to ask this runner for a direct shell: it offers them, and neither
    LANPOOL_DIRECT_TRANSFERS nor LANPOOL_DIRECT_SHELLS is 0."""
    off = any(os.environ.get(name, "1").strip() == "0" for name in (DIRECT_ENV, SHELL_ENV))
    return SHELL_DIRECT in features and not off


def connect(host: str, offer: DirectOffer) -> ssl.SSLSocket:
    """The offered connection, its certificate checked and the token sent (blocking);
    DirectUnavailable when it cannot be had (nothing was sent: use the channel)."""
    try:
        raw = socket.create_connection((host, offer.port), timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise DirectUnavailable(f"cannot connect to port {offer.port}: {exc.strerror or exc}") from None
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a keystroke is one small write
    try:
        conn = handshake(raw, offer)
    except BaseException:
        raw.close()
        raise
    conn.settimeout(None)
    return conn


class Relay:
    """The terminal's bytes on `conn`: `fd_in` -> socket and socket -> `fd_out`, a thread each."""

    def __init__(self, conn: ssl.SSLSocket, fd_in: int, fd_out: int) -> None:
        self._conn = conn
        self._fd_in = fd_in
        self._fd_out = fd_out
        self._stop_r, self._stop_w = os.pipe()  # wakes the terminal reader (a keystroke must not be lost to it)
        self.ended = threading.Event()  # the runner closed the connection: all output is here
        self._typing = threading.Thread(target=self._type, name="shell-in", daemon=True)
        self._showing = threading.Thread(target=self._show, name="shell-out", daemon=True)

    def start(self) -> None:
        self._typing.start()
        self._showing.start()

    def _type(self) -> None:
        try:
            while True:
                ready = select.select([self._fd_in, self._stop_r], [], [])[0]
                if self._stop_r in ready:
                    return
                data = os.read(self._fd_in, _READ_SIZE)
                if not data:
                    return
                self._conn.sendall(data)
        except (OSError, ssl.SSLError):  # the connection went: the reader sees it too
            return

    def _show(self) -> None:
        from app.job_shell import write_all

        try:
            while data := self._conn.recv(_READ_SIZE):
                write_all(self._fd_out, data)
        except (OSError, ssl.SSLError):  # a ragged close is an end like any other
            pass
        finally:
            self.ended.set()

    def close(self, drain_s: float) -> None:
        """Stop both threads (the job's last output read first, for up to `drain_s`)."""
        self.ended.wait(drain_s)
        os.write(self._stop_w, b"x")
        with contextlib.suppress(OSError):
            self._conn.shutdown(socket.SHUT_RDWR)
        self._typing.join(drain_s)
        self._showing.join(drain_s)
        self._conn.close()
        os.close(self._stop_r)
        os.close(self._stop_w)
