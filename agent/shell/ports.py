"""A running job's declared ports, forwarded to an authorized controller (SSH direct-tcpip).

The only destinations allowed are this machine's loopback at a port that a
RUNNING job declared (SubmitJob.ports): no other host, no undeclared port, no
job that ended. A forward is cut when its job ends.

The bytes go through asyncssh's protocol-level forwarder (no task, no stream
copy per chunk), with backpressure both ways; the controller picks the packet
size of what comes down (app/shell/ports.py).
"""

import asyncio
import logging
from collections.abc import Awaitable
from typing import cast

import asyncssh

from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.manager import JobManager

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost")
_CONNECT_S = 10.0
# What the controller may send before the agent reads, and in one packet (the upload side of a
# forward; the download side is the controller's window, app/shell/into_job.py).
PORT_WINDOW = 4 * 1024 * 1024
PORT_MAX_PACKET = 64 * 1024

# The controller's side of a forward (asyncssh's stream/protocol types for a direct-tcpip open).
Forward = tuple[asyncssh.SSHTCPChannel[bytes], Awaitable[asyncssh.SSHTCPSession[bytes]]]

_watchers: set["asyncio.Task[None]"] = set()  # strong references: each cuts one forward when its job ends


def declaring_job(manager: JobManager, dest_host: str, dest_port: int) -> Job | None:
    """The running job that declared `dest_port`, when the destination is loopback; else None."""
    if dest_host not in LOOPBACK:
        return None
    for job in manager.jobs.values():
        if not job.record.terminal and job.execution is not None and dest_port in job.record.ports:
            return job
    return None


def forward_to(conn: asyncssh.SSHServerConnection, job: Job, port: int) -> Forward:
    """The channel and session relaying a direct-tcpip open to 127.0.0.1:port, cut when the job ends."""
    chan: asyncssh.SSHTCPChannel[bytes] = conn.create_tcp_channel(window=PORT_WINDOW, max_pktsize=PORT_MAX_PACKET)
    return chan, _connect(chan, job, port)


async def _connect(chan: asyncssh.SSHTCPChannel[bytes], job: Job, port: int) -> asyncssh.SSHTCPSession[bytes]:
    loop = asyncio.get_running_loop()
    try:
        _transport, upstream = await asyncio.wait_for(
            loop.create_connection(asyncssh.SSHForwarder, "127.0.0.1", port), _CONNECT_S
        )
    except (OSError, TimeoutError) as exc:
        log.info("job %s: nothing answers on its port %d: %s", job.record.job_id, port, exc)
        # The open fails: the controller's client sees its connection refused, as with ssh -L.
        raise asyncssh.ChannelOpenError(
            asyncssh.OPEN_CONNECT_FAILED, f"nothing answers on port {port} of job {job.record.job_id}"
        ) from None
    watcher = asyncio.ensure_future(_cut_at_end(chan, job))
    _watchers.add(watcher)
    watcher.add_done_callback(_watchers.discard)
    # It pairs itself with upstream: bytes go both ways, with backpressure. asyncssh's own
    # forward_connection hands it over as a session the same way (it is one, untyped as such).
    return cast(asyncssh.SSHTCPSession[bytes], asyncssh.SSHForwarder(upstream))


async def _cut_at_end(chan: asyncssh.SSHTCPChannel[bytes], job: Job) -> None:
    ended = asyncio.ensure_future(job.wait_terminal())
    closed = asyncio.ensure_future(chan.wait_closed())
    try:
        await asyncio.wait([ended, closed], return_when=asyncio.FIRST_COMPLETED)
        if ended.done() and not closed.done():
            log.info("job %s ended: cutting a forward of its port", job.record.job_id)
            chan.close()  # the session's forwarder then closes the upstream socket (connection_lost)
    finally:
        ended.cancel()
        closed.cancel()
