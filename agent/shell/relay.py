"""A job's terminal on the controller's direct connection (agent/shell/direct.py): the job's
side and the TLS socket relayed both ways by one thread (protocol/runtime/tls_relay.py says why
one), while the SSH channel carries only window changes. Shared by process jobs' PTYs and
container jobs' exec sockets (agent/shell/container.py).
"""

import asyncio
import contextlib
import os
import ssl
import threading
from collections.abc import Callable
from typing import TypeVar

import asyncssh

from lanpool.protocol.runtime import tls_relay

T = TypeVar("T")
_READ_SIZE = 64 * 1024


def in_thread(name: str, work: Callable[[], T], done: "asyncio.Future[T]") -> None:
    """`work` on a thread of its own (not the loop's executor: these block for a whole session);
    its result into `done`."""
    loop = asyncio.get_running_loop()

    def run() -> None:
        result: T | None = None
        try:
            result = work()
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is gone (the agent stopping)
                loop.call_soon_threadsafe(_settle, done, result)

    threading.Thread(target=run, name=f"shell-{name}", daemon=True).start()


def _settle(done: "asyncio.Future[T]", result: T | None) -> None:
    if not done.done():
        done.set_result(result)  # type: ignore[arg-type]  # None only when `work` raised


def relay(conn: ssl.SSLSocket, fd: int) -> "asyncio.Future[None]":
    """The job's terminal (`fd`: the PTY master, or docker exec's socket) <-> `conn`, both ways on
    one thread (protocol/runtime/tls_relay.py says why one); done once the job's side has ended and all
    it wrote is sent, or the connection went."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    os.set_blocking(fd, False)
    in_thread("relay", lambda: tls_relay.relay(conn, fd, fd, end_with_local=True), done)
    return done


async def watch_channel(process: asyncssh.SSHServerProcess[bytes], resize: Callable[[int, int], object]) -> None:
    """The channel now carries only window changes (and its close): apply them; return when it closes."""
    while True:
        try:
            data = await process.stdin.read(_READ_SIZE)
        except asyncssh.TerminalSizeChanged as exc:
            result = resize(exc.width, exc.height)
            if asyncio.iscoroutine(result):
                await result
            continue
        except (asyncssh.BreakReceived, asyncssh.SignalReceived):
            continue
        if not data:
            await process.channel.wait_closed()
            return
