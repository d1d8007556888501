"""Into a running job from the controller: a command, an interactive shell, its declared ports.

All go over the SSH connection lanpool already has with the job's runner (host key pinned).
A command is an exec request on a channel of it (app/shell/channel.py). A shell goes through
OpenSSH end to end where the runner offers a one-time sshd (app/shell/sshd.py), else on the
channel itself (container jobs, runners without sshd, a firewall that shuts the sshd's port).
A port is direct-tcpip to 127.0.0.1:PORT, which the agent allows only for a port the running
job declared (agent/shell/ports.py).
"""

import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

import asyncssh

from lanpool.app.errors import LanpoolError, RunnerError, UsageError
from lanpool.app.jobs.remote import JobServices, RemoteJob
from lanpool.app.runners.client import RunnerSession
from lanpool.app.shell.channel import READ_SIZE, attach, exit_code_of, open_terminal, reason
from lanpool.app.shell.ports import PortForward, forward_local
from lanpool.app.shell.sshd import sshd_shell, sshd_wanted
from lanpool.app.store import JobRow
from lanpool.protocol import JobState
from lanpool.protocol.wire import exec_command

_STATUS_POLL_S = 2.0  # how often an open forward asks whether its job still runs


@dataclass(frozen=True)
class JobTarget:
    job_id: str
    node: int
    runner: str
    host: str
    port: int
    ports: list[int] = field(default_factory=list)  # what the job declared (its spec)
    # Node K of a job its runner runs on several nodes (one Slurm job): the exec request names it.
    runner_node: int | None = None


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
    if not 0 <= k < remote.size:
        raise UsageError(f"job {job.id} runs on {remote.size} node(s): --node takes 0 to {remote.size - 1}")
    at = remote.nodes[0 if remote.slurm else k]
    declared = [p for p in json.loads(job.spec or "{}").get("ports", []) if isinstance(p, int)]
    return JobTarget(job.id, k, at.runner, at.host, at.port, declared, k if remote.slurm else None)


async def run_command(session: RunnerSession, job_id: str, argv: list[str], node: int | None = None) -> int:
    """Run `argv` in the job (on its runner's node `node`: JobTarget.runner_node), its output
    streamed to ours; returns its exit code."""
    stdin_tty = sys.stdin.isatty()
    try:
        proc = await session.conn.create_process(
            exec_command(job_id, argv, node), encoding=None, stdin=asyncssh.DEVNULL if stdin_tty else asyncssh.PIPE
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


async def run_shell(session: RunnerSession, job_id: str, argv: list[str] | None = None, node: int | None = None) -> int:
    """An interactive shell (or `argv`) in the job on our terminal (raw mode, resize, Ctrl-C); its exit code.
    Through the runner's one-time sshd with the system's `ssh` where both are there (app/shell/sshd.py),
    else on the channel (always for a node of a job its runner runs on several: a Slurm job's)."""
    fd = sys.stdin.fileno()
    if not os.isatty(fd):
        raise UsageError("ssh needs a terminal; for one command use `app headless exec JOB -- CMD`")
    if node is None and sshd_wanted(session.hello.features):  # OpenSSH end to end (app/shell/sshd.py)
        code = await sshd_shell(session, job_id, argv or [])
        if code is not None:
            return code
    chan, term = await open_terminal(session, job_id, argv or [], fd, node)
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
