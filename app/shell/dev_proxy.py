"""`app headless ssh-proxy JOB`: the ProxyCommand of an `ssh-config` Host entry (app/shell/ssh_config.py).

On the lanpool SSH connection to the job's runner (its host key pinned: the trust root), it asks
for the job's dev sshd (`--dev-sshd` with the controller's own key: protocol/shell_sshd.py). The
runner answers with a port, a user and its dev host key; the key is checked against what the
runner said in its Hello and pinned in our known_hosts before a byte goes to that port (so `ssh`,
which checks it, trusts what the pinned connection said). Then stdin and stdout are relayed to
that port as plain bytes: OpenSSH's own encryption runs end to end between `ssh` and sshd, so
the relay adds no second one (the asyncssh channel would cost Python work per packet). The
exec channel stays open meanwhile: the runner stops the sshd when it closes.
Errors are one `lanpool:` line on stderr and exit 255, which ssh shows as it is.
"""

import asyncio
import contextlib
import os
import socket
import sys
import threading
from pathlib import Path

import asyncssh

from lanpool.app.errors import RunnerError
from lanpool.app.runners.client import RunnerSession
from lanpool.app.shell.ssh_config import pin
from lanpool.app.shell.sshd import first_line, refused
from lanpool.protocol.shell_sshd import DEV_SSHD_RELAY, NO_OFFER_LINE, RELAY_LINE, parse_offer_line
from lanpool.protocol.wire import exec_command

PROXY_FAILED = 255  # what ssh says of a ProxyCommand that could not connect
CONNECT_S = 10.0
_CLOSE_S = 10.0
_CHUNK = 256 * 1024


async def proxy(
    session: RunnerSession, job_id: str, node: int | None, key_b64: str, known_hosts: Path, alias: str
) -> int:
    """Relay stdin/stdout to the job's dev sshd until either side ends; 0, or PROXY_FAILED with
    a reason on stderr (the runner's, or RunnerError's)."""
    command = exec_command(job_id, [], node, dev_sshd_key=f"ssh-ed25519:{key_b64}")
    try:
        proc = await session.conn.create_process(command, encoding=None)
    except (OSError, asyncssh.Error) as exc:
        raise RunnerError(f"{session.where} refused a dev sshd for job {job_id}: {exc}") from None
    try:
        line = await first_line(proc)
        offer = parse_offer_line(line) if line else None
        if offer is None:
            if line == NO_OFFER_LINE:
                raise RunnerError(
                    f"{session.where} offers no dev sshd for job {job_id} (a Slurm job, no sshd or docker command "
                    "there, or LANPOOL_SSHD_SHELLS=0: its agent log says which)"
                )
            if await refused(proc):  # the runner said why (the job ended, another key, ...)
                return PROXY_FAILED
            raise RunnerError(f"{session.where} answered the dev sshd request with {line[:80]!r}")
        port, _user, host_key = offer
        if host_key != session.hello.sshd_host_key:
            raise RunnerError(f"{session.where} offered a dev sshd host key that is not the one its Hello named")
        pin(known_hosts, alias, host_key)
        try:
            sock = await asyncio.to_thread(socket.create_connection, (session.peer_host, port), CONNECT_S)
        except OSError as exc:
            unreachable = f"cannot reach {session.where}'s dev sshd at port {port} ({exc.strerror or exc})"
            if DEV_SSHD_RELAY not in session.hello.features:
                raise RunnerError(f"{unreachable}: a firewall between here and its --direct-ports?") from None
            # The same offer, on the channel itself: slower, but it gets through a firewall that
            # lets lanpool's own port through only (protocol/shell_sshd.py, RELAY_LINE).
            print(f"lanpool: {unreachable}: relayed on lanpool's connection (slower)", file=sys.stderr, flush=True)
            await relay_on_channel(proc, 0, 1)
        else:
            with sock:
                await relay(sock, 0, 1)
        with contextlib.suppress(OSError, asyncssh.Error, TimeoutError):  # the runner may have closed it first
            proc.stdin.write_eof()  # done: the runner stops the sshd, if it has not ended already
            await asyncio.wait_for(proc.wait_closed(), _CLOSE_S)
        return 0
    finally:
        proc.close()


async def relay_on_channel(proc: "asyncssh.SSHClientProcess[bytes]", rfd: int, wfd: int) -> None:
    """Copy `rfd` to the offer's channel and the channel to `wfd`, after RELAY_LINE, until the
    runner's side ends (its sshd closed). `rfd` is read by a thread of its own, as in relay()."""
    loop = asyncio.get_running_loop()
    proc.stdin.write(RELAY_LINE)

    async def send(data: bytes) -> None:
        proc.stdin.write(data)
        await proc.stdin.drain()

    def up() -> None:
        with contextlib.suppress(OSError, RuntimeError, asyncssh.Error):
            while data := os.read(rfd, _CHUNK):
                asyncio.run_coroutine_threadsafe(send(data), loop).result()
            asyncio.run_coroutine_threadsafe(_write_eof(proc), loop).result()

    threading.Thread(target=up, name="ssh-proxy-up", daemon=True).start()
    with contextlib.suppress(OSError, asyncssh.Error):
        while data := await proc.stdout.read(_CHUNK):
            await asyncio.to_thread(_write_all, wfd, data)


async def _write_eof(proc: "asyncssh.SSHClientProcess[bytes]") -> None:
    proc.stdin.write_eof()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def relay(sock: socket.socket, rfd: int, wfd: int) -> None:
    """Copy `rfd` to `sock` and `sock` to `wfd` until the socket's side ends (the sshd closed);
    `rfd`'s end is passed on as a half-close. Threads of their own, not the loop's executor: one
    blocked on a read of `rfd` must not hold up the end (the process exits under it)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def finish() -> None:
        if not done.done():
            done.set_result(None)

    def up() -> None:
        with contextlib.suppress(OSError):
            while data := os.read(rfd, _CHUNK):
                sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)

    def down() -> None:
        try:
            with contextlib.suppress(OSError):
                while data := sock.recv(_CHUNK):
                    view = memoryview(data)
                    while view:
                        view = view[os.write(wfd, view) :]
        finally:
            loop.call_soon_threadsafe(finish)

    threading.Thread(target=up, name="ssh-proxy-up", daemon=True).start()
    threading.Thread(target=down, name="ssh-proxy-down", daemon=True).start()
    await done
