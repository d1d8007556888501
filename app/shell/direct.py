"""A job's shell on a TLS connection of its own: the controller's side (agent/shell/direct.py
says why, and what the runner does).

The runner's offer came on the exec channel, inside the SSH connection whose host key is
pinned: the controller connects to the port it names on the runner's address, checks the
certificate is the one named and only then sends the token (app/runners/direct.py handshake).
Until then nothing was typed anywhere, so a port that cannot be reached, or another
certificate there, falls back to a shell on the channel (DirectUnavailable). After that,
one thread relays the terminal and the socket both ways (protocol/runtime/tls_relay.py);
window changes and the exit status stay on the channel.
"""

import os
import socket
import ssl
import threading
from collections.abc import Sequence

from lanpool.app.runners.direct import CONNECT_TIMEOUT_S, DIRECT_ENV, DirectUnavailable, handshake
from lanpool.protocol import DirectOffer
from lanpool.protocol.runtime import tls_relay
from lanpool.protocol.shell_direct import SHELL_DIRECT

SHELL_ENV = "LANPOOL_DIRECT_SHELLS"


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
    """The terminal's bytes on `conn`, both ways on one thread (protocol/runtime/tls_relay.py says why
    one): `fd_in` -> socket, socket -> `fd_out`."""

    def __init__(self, conn: ssl.SSLSocket, fd_in: int, fd_out: int) -> None:
        self._conn = conn
        self._stop_r, self._stop_w = os.pipe()  # stops the relay (a keystroke must not be lost to it)
        self.ended = threading.Event()  # the relay returned: the runner closed the connection, or close()
        self._thread = threading.Thread(target=self._run, args=(fd_in, fd_out), name="shell-relay", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self, fd_in: int, fd_out: int) -> None:
        try:
            tls_relay.relay(self._conn, fd_in, fd_out, stop_fd=self._stop_r, end_with_local=False)
        finally:
            self.ended.set()

    def close(self, drain_s: float) -> None:
        """Stop the relay (the job's last output read first, for up to `drain_s`)."""
        self.ended.wait(drain_s)
        os.write(self._stop_w, b"x")
        self._thread.join(drain_s)
        tls_relay.shut(self._conn)
        self._conn.close()
        os.close(self._stop_r)
        os.close(self._stop_w)
