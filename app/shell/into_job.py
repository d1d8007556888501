"""Into a running job from the controller: a command, an interactive shell, its declared ports.

All go over the SSH connection lanpool already has with the job's runner (host key pinned).
A command is an exec request on a channel of it (app/shell/channel.py). A shell takes the
first way the runner offers: OpenSSH end to end through a one-time sshd (app/shell/sshd.py),
its bytes on a TLS connection of their own (app/shell/direct.py), else the channel itself.
A port is direct-tcpip to 127.0.0.1:PORT, which the agent allows only for a port the running
job declared (agent/shell/ports.py).
"""

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import termios
import tty
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import asyncssh

from lanpool.app.errors import LanpoolError, RunnerError, UsageError
from lanpool.app.jobs.remote import JobServices, RemoteJob
from lanpool.app.runners.client import RunnerSession
from lanpool.app.shell.channel import (
    READ_SIZE,
    attach,
    channel_status,
    exec_command,
    exit_code_of,
    open_terminal,
    reason,
)
from lanpool.app.shell.ports import PortForward, forward_local
from lanpool.app.shell.sshd import sshd_shell, sshd_wanted
from lanpool.app.store import JobRow
from lanpool.protocol import JobState

log = logging.getLogger(__name__)

_STATUS_POLL_S = 2.0  # how often an open forward asks whether its job still runs


@dataclass(frozen=True)
class JobTarget:
    job_id: str
    node: int
    runner: str
    host: str
    port: int
    ports: list[int] = field(default_factory=list)  # what the job declared (its spec)


def running_target(jobs: JobServices, candidates: list[JobRow], ref: str, node: int | None) -> JobTarget:
    """The node of the one running job `ref` names; UsageError (one line) otherwise."""
    if len(candidates) > 1:
        live = [j for j in candidates if not j.state.is_terminal()]
        if len(live) != 1:
            names = ", ".join(j.id for j in (live or candidates))
            raise UsageError(f"{ref} names {len(candidates)} jobs ({names}): name one by its id")
        candidates = live
    job = candidates[0]
    if job.state.is_terminal():
        raise UsageError(f"job {job.id} ended ({job.state}): ssh, exec and ports reach running jobs only")
    if job.state is not JobState.RUNNING:
        raise UsageError(f"job {job.id} is {job.state}, not running yet: try again once it runs")
    remote = RemoteJob(jobs, job.id)
    k = 0 if node is None else node
    if not 0 <= k < len(remote.nodes):
        raise UsageError(f"job {job.id} runs on {len(remote.nodes)} node(s): --node takes 0 to {len(remote.nodes) - 1}")
    at = remote.nodes[k]
    declared = [p for p in json.loads(job.spec or "{}").get("ports", []) if isinstance(p, int)]
    return JobTarget(job.id, k, at.runner, at.host, at.port, declared)


async def run_command(session: RunnerSession, job_id: str, argv: list[str]) -> int:
    """Run `argv` in the job, its output streamed to ours; returns its exit code."""
    stdin_tty = sys.stdin.isatty()
    try:
        proc = await session.conn.create_process(
            exec_command(job_id, argv), encoding=None, stdin=asyncssh.DEVNULL if stdin_tty else asyncssh.PIPE
        )
    except (OSError, asyncssh.Error) as exc:
        raise RunnerError(f"{session.where} refused to run in job {job_id}: {reason(exc)}") from None
    feed = None if stdin_tty else asyncio.create_task(_feed_stdin(proc))
    try:
        await asyncio.gather(_copy(proc.stdout, sys.stdout.buffer), _copy(proc.stderr, sys.stderr.buffer))
        await proc.wait_closed()
    finally:
        if feed is not None:
            feed.cancel()
    return exit_code_of(proc)


async def run_shell(session: RunnerSession, job_id: str, argv: list[str] | None = None) -> int:
    """An interactive shell (or `argv`) in the job on our terminal (raw mode, resize, Ctrl-C); its exit code.
    Through the runner's one-time sshd with the system's `ssh` where both are there (app/shell/sshd.py),
    else on a TLS connection of its own when the runner offers one (app/shell/direct.py), else on the channel."""
    fd = sys.stdin.fileno()
    if not os.isatty(fd):
        raise UsageError("ssh needs a terminal; for one command use `app headless exec JOB -- CMD`")
    from lanpool.app.shell.direct import shell_direct_wanted

    if sshd_wanted(session.hello.features):  # OpenSSH end to end (app/shell/sshd.py)
        code = await sshd_shell(session, job_id, argv or [])
        if code is not None:
            return code
    if shell_direct_wanted(session.hello.features):
        code = await _direct_shell(session, job_id, argv or [], fd)
        if code is not None:
            return code
    return await _channel_shell(session, job_id, argv or [], fd)


async def _direct_shell(session: RunnerSession, job_id: str, argv: list[str], fd: int) -> int | None:
    """The shell with its bytes on the runner's offered connection; None when the runner made no
    offer (old or at its limit: the caller opens one on the channel)."""
    from lanpool.app.runners.direct import DirectUnavailable
    from lanpool.app.shell.direct import Relay, connect

    chan, term = await open_terminal(session, job_id, argv, fd, True)
    offer = await term.offer
    if offer is None:  # what came is the job's own output, or the refusal (already shown)
        if term.closed.done():
            return channel_status(chan)
        return await attach(chan, term, fd)
    try:
        conn = await asyncio.to_thread(connect, session.peer_host, offer)
    except DirectUnavailable as exc:
        log.warning("%s: %s; the shell runs on the SSH channel instead", session.where, exc.message)
        chan.close()
        await term.closed
        return None
    log.info("%s: the shell in job %s runs on a direct connection", session.where, job_id)
    relay = Relay(conn, fd, sys.stdout.fileno())
    loop = asyncio.get_running_loop()
    saved = termios.tcgetattr(fd)

    def resized() -> None:
        with contextlib.suppress(OSError):
            chan.change_terminal_size(*os.get_terminal_size(fd))

    tty.setraw(fd)
    loop.add_signal_handler(signal.SIGWINCH, resized)
    relay.start()
    try:
        ended: asyncio.Future[Any] = asyncio.ensure_future(asyncio.to_thread(relay.ended.wait))
        await asyncio.wait([term.closed, ended], return_when=asyncio.FIRST_COMPLETED)
        if not term.closed.done():  # the connection dropped: the runner hangs the shell up once the channel goes
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(term.closed), 2.0)
            chan.close()
            await term.closed
    finally:
        loop.remove_signal_handler(signal.SIGWINCH)
        await asyncio.to_thread(relay.close, 2.0)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    return channel_status(chan)


async def _channel_shell(session: RunnerSession, job_id: str, argv: list[str], fd: int) -> int:
    chan, term = await open_terminal(session, job_id, argv, fd, False)
    return await attach(chan, term, fd)


async def forward_ports(session: RunnerSession, ports: list[int]) -> dict[int, PortForward]:
    """A listener on a free port of our 127.0.0.1 for each of the job's ports (the runner's loopback)."""
    listeners: dict[int, PortForward] = {}
    for port in ports:
        try:
            listeners[port] = await forward_local(session.conn, port)
        except OSError as exc:
            for listener in listeners.values():
                listener.close()
            raise RunnerError(f"cannot listen on 127.0.0.1 for port {port}: {reason(exc)}") from None
    return listeners


async def hold_forwards(
    session: RunnerSession, job_id: str, listeners: dict[int, PortForward], say: Callable[[str], None]
) -> JobState:
    """Keep the forwards open until the job ends (the runner also cuts them then); its final state."""
    try:
        while True:
            try:
                status = await session.status(job_id)
            except LanpoolError as exc:
                say(f"lost the runner: {exc.message}")
                return JobState.LOST
            if JobState(status.state).is_terminal():
                return JobState(status.state)
            await asyncio.sleep(_STATUS_POLL_S)
    finally:
        for listener in listeners.values():
            listener.close()


async def _feed_stdin(proc: asyncssh.SSHClientProcess[bytes]) -> None:
    while data := await asyncio.to_thread(os.read, sys.stdin.fileno(), READ_SIZE):
        proc.stdin.write(data)
        await proc.stdin.drain()
    proc.stdin.write_eof()


async def _copy(reader: asyncssh.SSHReader[bytes], out: BinaryIO) -> None:
    while data := await reader.read(READ_SIZE):
        out.write(data)
        out.flush()
