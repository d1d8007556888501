"""A job's port on the controller's 127.0.0.1: each local connection opens one direct-tcpip
channel to the runner's 127.0.0.1:PORT (which the agent allows only for a port the running
job declared, agent/shell/ports.py) and the bytes go through asyncssh's protocol-level forwarder.

Not asyncssh's forward_local_port: its channels take asyncssh's 32 KiB packets, a Python round
of packet work per 32 KiB; 64 KiB packets carried 1.3-1.4x as much on loopback (alternating
runs, scripts/bench-shell). Larger packets (128-256 KiB) and windows (16 MiB) did worse: asyncssh
ignores the TCP transport's backpressure, so the runner's whole window piles into asyncio's
send buffer, which is shifted on every partial send.
"""

import asyncio
import logging
from typing import cast

import asyncssh

log = logging.getLogger(__name__)

# What the runner may send before we read, and in one SSH packet, on a port's channel (see above).
PORT_WINDOW = 4 * 1024 * 1024
PORT_MAX_PACKET = 64 * 1024


class PortForward:
    """A listener on 127.0.0.1 (a free port) relaying to the runner's 127.0.0.1:`remote_port`."""

    def __init__(self, server: asyncio.Server, remote_port: int) -> None:
        self._server = server
        self.remote_port = remote_port

    def get_port(self) -> int:
        return int(self._server.sockets[0].getsockname()[1])

    def close(self) -> None:
        """No new connections; open ones end with their job (the runner cuts them) or their peer."""
        self._server.close()


async def forward_local(conn: asyncssh.SSHClientConnection, remote_port: int) -> PortForward:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _LocalEnd(conn, remote_port), "127.0.0.1", 0)
    return PortForward(server, remote_port)


class _LocalEnd(asyncssh.SSHForwarder):
    """One local connection: its channel opened, then paired both ways with asyncssh's forwarder."""

    def __init__(self, conn: asyncssh.SSHClientConnection, remote_port: int) -> None:
        super().__init__()
        self._conn = conn
        self._remote_port = remote_port
        self._opening: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # sets TCP_NODELAY
        # A stream transport (create_server); uvloop's are not asyncio.Transport subclasses.
        stream = cast(asyncio.Transport, transport)
        # Nothing is read until the channel is open, so nothing need be held meanwhile. Not under
        # uvloop, which starts reading after connection_made: data_received holds what comes early.
        stream.pause_reading()
        self._opening = asyncio.ensure_future(self._open(stream))

    def data_received(self, data: bytes, datatype: int | None = None) -> None:
        super().data_received(data, datatype)  # to the channel, or held in _inpbuf until it opens
        if self._peer is None and self._transport is not None:
            self._transport.pause_reading()  # one read's worth held, not the client's whole upload

    async def _open(self, transport: asyncio.Transport) -> None:
        try:
            chan, _session = await self._conn.create_connection(
                # asyncssh's forwarder is a TCP session, untyped as such (as in asyncssh's own forwards).
                lambda: cast(asyncssh.SSHTCPSession[bytes], asyncssh.SSHForwarder(self)),
                "127.0.0.1",
                self._remote_port,
                window=PORT_WINDOW,
                max_pktsize=PORT_MAX_PACKET,
            )
        except (OSError, asyncssh.Error) as exc:
            log.info("port %d not forwarded: %s", self._remote_port, getattr(exc, "reason", None) or exc)
            transport.close()
            return
        if transport.is_closing():  # the local client left while the channel opened
            chan.close()
            return
        # What arrived before the channel opened (uvloop, above), then its end if it came too:
        # as asyncssh's own local forwarder does.
        assert self._peer is not None
        if self._inpbuf:
            self._peer.write(self._inpbuf)
            self._inpbuf = b""
        if self._eof_received:
            self._peer.write_eof()
        else:
            transport.resume_reading()
