"""The gang channel (agent.gang.hub): newline-delimited JSON on the `lanpool-gang` subsystem
of node 0's agent, and a member's connection to that agent (its host key pinned by the
controller, the gang's token as password)."""

import asyncio
import json
from typing import Any

import asyncssh

from lanpool.agent.jobs.job import Job
from lanpool.protocol import ENCRYPTION_ALGS, GANG_SUBSYSTEM, GANG_USER_PREFIX

_LINE_MAX = 1024  # one message of the gang channel: a few small JSON fields


class Lines:
    """Newline-delimited JSON objects on an SSH channel, each at most _LINE_MAX bytes."""

    def __init__(self, reader: "asyncssh.SSHReader[bytes]", writer: "asyncssh.SSHWriter[bytes]") -> None:
        self._reader, self._writer, self._buf = reader, writer, b""

    async def read(self) -> dict[str, Any] | None:
        """The next message; None at the end of the channel or on anything malformed."""
        while b"\n" not in self._buf:
            if len(self._buf) > _LINE_MAX:
                return None
            data = await self._reader.read(_LINE_MAX)
            if not data:
                return None
            self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError:
            return None
        return msg if isinstance(msg, dict) else None

    def send(self, **msg: Any) -> None:
        try:
            self._writer.write(json.dumps(msg).encode() + b"\n")
        except (OSError, asyncssh.Error, ConnectionError):
            pass


async def connect_node0(coordinator: str, host_key: str, gang_id: str, token: str) -> asyncssh.SSHClientConnection:
    """Node 0's agent, whose host key must be the one the controller pinned (never trusted on first use)."""
    host, _, port = coordinator.rpartition(":")
    key = asyncssh.import_public_key(host_key)
    return await asyncssh.connect(
        host.strip("[]"),
        int(port),
        username=GANG_USER_PREFIX + gang_id,
        password=token,
        known_hosts=([key], [], []),
        client_keys=None,
        agent_path=None,
        preferred_auth="password",
        encryption_algs=ENCRYPTION_ALGS,
        config=None,
        connect_timeout=10,
    )


async def open_barrier(conn: asyncssh.SSHClientConnection, **hello: int) -> Lines:
    """The gang channel on a connection to node 0, its first message sent."""
    process = await conn.create_process(subsystem=GANG_SUBSYSTEM, encoding=None)
    lines = Lines(process.stdout, process.stdin)
    lines.send(**hello)
    return lines


async def until_end(read: Any, job: Job, attempt: int) -> dict[str, Any] | None:
    """The next message, or None once the job's attempt `attempt` ended first (the read is abandoned)."""
    reading = asyncio.ensure_future(read)
    ending = asyncio.ensure_future(job.wait_attempt_over(attempt))
    try:
        await asyncio.wait([reading, ending], return_when=asyncio.FIRST_COMPLETED)
    finally:
        ending.cancel()
    if not reading.done():
        reading.cancel()
        return None
    try:
        result: dict[str, Any] | None = reading.result()
        return result
    except (OSError, asyncssh.Error, ConnectionError):
        return None
