"""The TCP connection to a runner, opened before the SSH stack is imported.

`status` refreshing a job whose runner is switched off, and `runners` checking the known
ones, used to import asyncssh and cryptography (~0.2 s of a short command) only to learn
that nothing answers there. The socket opened here is the one the SSH session then runs
over (asyncssh's `sock=`): still one connection per session, the host key checked as
before, and an address where nothing listens costs no import at all.
"""

import asyncio
import os
import socket

from lanpool.app.errors import RunnerError

CONNECT_TIMEOUT_S = 10.0  # connecting and the SSH handshake (app/runners/client.py), each


async def open_socket(host: str, port: int, timeout: float = CONNECT_TIMEOUT_S) -> socket.socket:
    """A socket connected to host:port, trying each address the name has in turn; RunnerError
    worded as RunnerSession.open words a connection that fails."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            failed: OSError = OSError(f"no address for {host}")
            for family, kind, proto, _name, address in infos:
                sock = socket.socket(family, kind, proto)
                try:
                    sock.setblocking(False)
                    await loop.sock_connect(sock, address)
                    return sock
                except OSError as exc:
                    sock.close()
                    failed = exc
                except BaseException:  # cancelled, or the timeout: no socket left open
                    sock.close()
                    raise
            raise failed
    except (OSError, TimeoutError) as exc:
        reason = _reason(exc)
        raise RunnerError(f"cannot reach runner {host}:{port}: {reason}; is `app agent serve` running there?") from None


def _reason(exc: OSError) -> str:
    """ "Connection refused", as asyncssh says it (asyncio's sock_connect says "Connect call failed (ADDR)")."""
    if isinstance(exc, socket.gaierror) or not exc.errno:
        return exc.strerror or str(exc) or type(exc).__name__
    return os.strerror(exc.errno)
