"""A job's shell on a TLS connection of its own: each keystroke and its echo are relayed by a
plain thread on each side instead of going through asyncssh's per-packet work (scripts/bench-shell).

The SSH exec request stays the only door (agent/ssh/server.py authorizes it, agent/shell/into_job.py
checks the job runs and logs the session): asked `--direct` with a PTY, the agent offers on that
channel a one-time TLS listener on the address the SSH connection reached, with the SHA-256 of
its certificate and a one-time token (DirectSender.listen_once, the same as artifact transfers,
agent/direct.py). Only the connection that brings the token is taken; the terminal's
bytes then go on it both ways, relayed by one thread (PTY master <-> socket, or docker exec's
socket <-> socket: protocol/runtime/tls_relay.py). Window changes and the exit status stay on the channel; Ctrl-C
is the byte 0x03, which the job's terminal turns into SIGINT as on any terminal.
"""

import asyncio
import logging
import os
import pty
import ssl
from typing import Any

import asyncssh

from lanpool.agent.direct import DirectSender, OneConnection
from lanpool.agent.jobs.job import Job
from lanpool.agent.shell.process_job import inside, job_environment, set_size, supervise, take_terminal
from lanpool.agent.shell.relay import in_thread, relay, watch_channel
from lanpool.protocol.runtime import tls_relay
from lanpool.protocol.shell_direct import NO_OFFER_LINE, offer_line

log = logging.getLogger(__name__)

_JOIN_S = 2.0  # after the session, how long a relay thread may take to see its socket shut


async def serve_direct(
    process: asyncssh.SSHServerProcess[bytes], job: Job, argv: tuple[str, ...], sender: DirectSender
) -> int | None:
    """Offer the connection and run the shell on it; its exit code. None: no listener could be
    had: the channel says so (NO_OFFER_LINE) and the caller runs the shell on it."""
    sockname = process.channel.get_extra_info("sockname")
    what = f"direct shell in job {job.record.job_id}"
    opened = sender.listen_once(str(sockname[0]), what) if sockname else None
    if opened is None:
        process.stdout.write(NO_OFFER_LINE)
        return None
    once, offer = opened
    try:
        process.stdout.write(offer_line(offer))
        conn = await _accept(process, once)
        if conn is None:
            return 255
        log.info("%s: the controller connected; the terminal goes direct", what)
        conn.settimeout(None)
        try:
            if job.record.container_id:
                from lanpool.agent.shell.container import exec_in_container_direct

                return await exec_in_container_direct(process, job, argv, conn)
            return await _in_process_job(process, job, argv, conn)
        finally:
            _shut(conn)
    finally:
        once.done()


async def _accept(process: asyncssh.SSHServerProcess[bytes], once: OneConnection) -> ssl.SSLSocket | None:
    """The offered connection, or None when none came or the channel closed first."""
    loop = asyncio.get_running_loop()
    accepted: asyncio.Future[ssl.SSLSocket | None] = loop.create_future()
    in_thread("accept", once.accept, accepted)
    closed = asyncio.ensure_future(process.channel.wait_closed())
    try:
        waits: list[asyncio.Future[Any]] = [accepted, closed]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        closed.cancel()
    if not accepted.done():  # the controller went away (or fell back): withdraw the offer
        once.close()
    conn = await accepted
    if conn is not None and process.channel.is_closing():
        conn.close()
        return None
    return conn


def _shut(conn: ssl.SSLSocket) -> None:
    tls_relay.shut(conn)  # wakes the relay thread waiting on it
    conn.close()


async def _in_process_job(
    process: asyncssh.SSHServerProcess[bytes], job: Job, argv: tuple[str, ...], conn: ssl.SSLSocket
) -> int:
    env, cwd = job_environment(job)
    env["TERM"] = process.term_type or "xterm"
    master, slave = pty.openpty()
    width, height, _pw, _ph = process.term_size
    set_size(master, width, height)
    try:
        proc = await asyncio.create_subprocess_exec(
            *inside(job, list(argv) or ["bash", "-i"], cwd),
            cwd=cwd,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            preexec_fn=take_terminal(slave),
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    out = relay(conn, master)
    watcher = asyncio.create_task(watch_channel(process, lambda w, h: set_size(master, w, h)))
    try:
        return await supervise(job, proc, watcher, [asyncio.ensure_future(out)])
    finally:
        _shut(conn)
        # The thread gone before the master is closed: its number could be reused under it.
        await asyncio.wait([out], timeout=_JOIN_S)
        os.close(master)
