"""A command or shell inside a container job, through the engine's exec API (`docker exec` without the CLI).

The exec's socket is driven by the event loop; the engine's blocking calls
(create, resize, inspect) run in threads. Without a TTY the engine multiplexes
stdout and stderr in 8-byte-headed frames.
"""

import asyncio
import contextlib
import logging
import socket
import struct
from typing import Any

import asyncssh
import docker.errors

from lanpool.agent.jobs.job import Job

log = logging.getLogger(__name__)

_READ_SIZE = 64 * 1024
_SHELL = ["/bin/sh", "-c", "if command -v bash >/dev/null; then exec bash; else exec sh; fi"]


async def _start(job: Job, argv: tuple[str, ...], term: str) -> tuple[Any, str, socket.socket]:
    """The engine's API, the exec's id and its attached socket."""
    container = getattr(job.execution, "container", None)
    if container is None:
        raise RuntimeError("the job's container is not known to this agent")
    api = container.client.api
    env = {"TERM": term} if term else {}
    try:
        created = await asyncio.to_thread(
            api.exec_create, container.id, list(argv) or _SHELL, stdin=True, tty=bool(term), environment=env
        )
        exec_id = created["Id"]
        sock_io = await asyncio.to_thread(api.exec_start, exec_id, tty=bool(term), socket=True)
    except docker.errors.DockerException as exc:
        raise RuntimeError(f"docker exec: {exc}") from None
    return api, exec_id, getattr(sock_io, "_sock", sock_io)


async def exec_in_container(process: asyncssh.SSHServerProcess[bytes], job: Job, argv: tuple[str, ...]) -> int:
    term = process.term_type
    api, exec_id, sock = await _start(job, argv, term or "")
    sock.setblocking(False)
    if term:
        await _resize(api, exec_id, *process.term_size[:2])
    feeder = asyncio.create_task(_feed(process, sock, api, exec_id))
    try:
        await (_copy_tty(sock, process) if term else _copy_frames(sock, process))
    finally:
        feeder.cancel()
        sock.close()
    return await _exit_code(api, exec_id)


async def _resize(api: Any, exec_id: str, width: int, height: int) -> None:
    if width > 0 and height > 0:
        with contextlib.suppress(docker.errors.DockerException):
            await asyncio.to_thread(api.exec_resize, exec_id, height=height, width=width)


async def _feed(process: asyncssh.SSHServerProcess[bytes], sock: socket.socket, api: Any, exec_id: str) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            data = await process.stdin.read(_READ_SIZE)
        except asyncssh.TerminalSizeChanged as exc:
            await _resize(api, exec_id, exc.width, exc.height)
            continue
        except (asyncssh.BreakReceived, asyncssh.SignalReceived):
            continue
        if not data:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            await process.channel.wait_closed()
            # The client went away: end the session's socket, which the engine takes as a hangup.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            return
        try:
            await loop.sock_sendall(sock, data)
        except OSError:
            return


async def _copy_tty(sock: socket.socket, process: asyncssh.SSHServerProcess[bytes]) -> None:
    loop = asyncio.get_running_loop()
    while data := await _recv(loop, sock, _READ_SIZE):
        process.stdout.write(data)
        await process.stdout.drain()


async def _copy_frames(sock: socket.socket, process: asyncssh.SSHServerProcess[bytes]) -> None:
    loop = asyncio.get_running_loop()
    buffer = b""
    while data := await _recv(loop, sock, _READ_SIZE):
        buffer += data
        while len(buffer) >= 8:
            stream, size = struct.unpack(">BxxxL", buffer[:8])
            if len(buffer) < 8 + size:
                break
            payload, buffer = buffer[8 : 8 + size], buffer[8 + size :]
            out = process.stderr if stream == 2 else process.stdout
            out.write(payload)
            await out.drain()


async def _recv(loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int) -> bytes:
    try:
        return await loop.sock_recv(sock, size)
    except OSError:
        return b""


async def _exit_code(api: Any, exec_id: str) -> int:
    for _ in range(50):  # the stream ends a moment before the engine records the exit
        try:
            info = await asyncio.to_thread(api.exec_inspect, exec_id)
        except docker.errors.DockerException as exc:
            log.warning("cannot read the exit of exec %s: %s", exec_id[:12], exc)
            return 255
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"])
        await asyncio.sleep(0.1)
    return 255
