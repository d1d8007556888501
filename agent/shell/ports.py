"""A running job's declared ports, forwarded to an authorized controller (SSH direct-tcpip).

The only destinations allowed are this machine's loopback at a port that a
RUNNING job of the asking controller declared (SubmitJob.ports) and that a process of
that job listens on (agent/shell/listeners.py): no other host, no undeclared port, no
job that ended, no other controller's job, no other server that happens to hold the
port. A forward is cut when its job ends.

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
from lanpool.agent.jobs.owner import Owner, owns
from lanpool.agent.shell.listeners import job_listens

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


def declaring_job(manager: JobManager, dest_host: str, dest_port: int, owner: Owner | None) -> Job | None:
    """The running job of `owner` that declared `dest_port`, when the destination is loopback; else None."""
    if dest_host not in LOOPBACK:
        return None
    for job in manager.jobs.values():
        running = not job.record.terminal and job.execution is not None
        if running and dest_port in job.record.ports and owns(owner, job.record):
            return job
    return None


def forward_to(conn: asyncssh.SSHServerConnection, job: Job, port: int) -> Forward:
    """The channel and session relaying a direct-tcpip open to 127.0.0.1:port, cut when the job ends."""
    chan: asyncssh.SSHTCPChannel[bytes] = conn.create_tcp_channel(window=PORT_WINDOW, max_pktsize=PORT_MAX_PACKET)
    return chan, _connect(chan, job, port)


async def _connect(chan: asyncssh.SSHTCPChannel[bytes], job: Job, port: int) -> asyncssh.SSHTCPSession[bytes]:
    loop = asyncio.get_running_loop()
    theirs = await asyncio.to_thread(job_listens, job.record.job_id, port)  # reads /proc: off the loop
    if theirs is False:
        log.warning(
            "job %s declared port %d, but none of its processes listens there: refused", job.record.job_id, port
        )
        raise asyncssh.ChannelOpenError(
            asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
            f"no process of job {job.record.job_id} listens on port {port}",
        )
    try:
        _transport, upstream = await asyncio.wait_for(loop.create_connection(_JobSide, "127.0.0.1", port), _CONNECT_S)
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
    return cast(asyncssh.SSHTCPSession[bytes], _ChannelSide(upstream))


class _JobSide(asyncssh.SSHForwarder):
    """The job's socket. What it sends before the controller's channel is open (a server that
    speaks first: SSH, SMTP; or one that answers and closes at once) waits here and goes on
    in order once the channel is open; asyncssh's forwarder would drop it."""

    def __init__(self) -> None:
        super().__init__()
        self._held: list[bytes | None] = []  # None: its EOF
        self._ready = False
        self._gone = False

    def data_received(self, data: bytes, datatype: int | None = None) -> None:
        if self._ready:
            super().data_received(data, datatype)
        else:
            self._held.append(data)

    def eof_received(self) -> bool:
        if self._ready:
            return super().eof_received()
        self._held.append(None)
        # Recorded as asyncssh's own eof_received does: the channel's side asks it once the
        # controller is done too, and closes only when this side's EOF is known. Without it, a
        # server that answered and closed before the channel was open (an HTTP request that came
        # in ahead of session_started) left the channel, and a dev environment's session, open.
        self._eof_received = True
        return True  # kept open: the channel is told once it is there

    def connection_lost(self, exc: Exception | None) -> None:
        if self._ready:
            super().connection_lost(exc)
        else:
            self._gone = True

    def channel_open(self, channel_side: asyncssh.SSHForwarder) -> None:
        self._ready = True
        for data in self._held:
            if data is None:
                channel_side.write_eof()
            else:
                channel_side.write(data)
        self._held = []
        if self._gone:
            self.close()  # and the channel, after what was written on it


class _ChannelSide(asyncssh.SSHForwarder):
    """The controller's channel, which releases what the job's side held once it is open."""

    def __init__(self, job_side: _JobSide) -> None:
        super().__init__(job_side)
        self._job_side = job_side

    def session_started(self) -> None:
        self._job_side.channel_open(self)


async def _cut_at_end(chan: asyncssh.SSHTCPChannel[bytes], job: Job) -> None:
    ended = asyncio.ensure_future(job.wait_terminal())
    closed = asyncio.ensure_future(chan.wait_closed())
    # A forwarded connection is a session into the job while it lasts: a dev environment used
    # through its ports alone (JupyterLab in a browser) is not idle meanwhile.
    job.session_opened()
    try:
        await asyncio.wait([ended, closed], return_when=asyncio.FIRST_COMPLETED)
        if ended.done() and not closed.done():
            log.info("job %s ended: cutting a forward of its port", job.record.job_id)
            chan.close()  # the session's forwarder then closes the upstream socket (connection_lost)
    finally:
        job.session_closed()
        ended.cancel()
        closed.cancel()
