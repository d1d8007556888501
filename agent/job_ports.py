"""A running job's declared ports, forwarded to an authorized controller (SSH direct-tcpip).

The only destinations allowed are this machine's loopback at a port that a
RUNNING job declared (SubmitJob.ports): no other host, no undeclared port, no
job that ended. A forward is cut when its job ends.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import asyncssh

from agent.job import Job
from agent.jobs import JobManager

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost")
_CONNECT_S = 10.0
_READ_SIZE = 64 * 1024

Handler = Callable[[asyncssh.SSHReader[bytes], asyncssh.SSHWriter[bytes]], Awaitable[None]]


def declaring_job(manager: JobManager, dest_host: str, dest_port: int) -> Job | None:
    """The running job that declared `dest_port`, when the destination is loopback; else None."""
    if dest_host not in LOOPBACK:
        return None
    for job in manager.jobs.values():
        if not job.record.terminal and job.execution is not None and dest_port in job.record.ports:
            return job
    return None


def forward_to(job: Job, port: int) -> Handler:
    """A direct-tcpip handler relaying the channel to 127.0.0.1:port until either side or the job ends."""

    async def relay(reader: asyncssh.SSHReader[bytes], writer: asyncssh.SSHWriter[bytes]) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), _CONNECT_S)
        except (OSError, TimeoutError) as exc:
            log.info("job %s: nothing answers on its port %d: %s", job.record.job_id, port, exc)
            writer.close()
            return
        up = asyncio.create_task(_copy(reader, up_writer))
        down = asyncio.create_task(_copy(up_reader, writer))
        ended = asyncio.ensure_future(job.wait_terminal())
        try:
            await asyncio.wait([down, ended], return_when=asyncio.FIRST_COMPLETED)
            if not ended.done():  # the server finished; give the client's side a moment to finish too
                await asyncio.wait([up, ended], timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (up, down, ended):
                task.cancel()
            up_writer.close()
            writer.close()

    return relay


async def _copy(
    reader: asyncio.StreamReader | asyncssh.SSHReader[bytes], writer: asyncio.StreamWriter | asyncssh.SSHWriter[bytes]
) -> None:
    with contextlib.suppress(OSError, asyncssh.Error):
        while data := await reader.read(_READ_SIZE):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
