"""An SSH session with one runner: the lanpool subsystem, which carries everything.

Each purpose gets its own channel on the connection (requests, each attached
log stream), so replies never have to be sorted out of a log stream.
"""

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TypeVar

import asyncssh

from lanpool import __version__
from lanpool.app.errors import (
    BlobsMissing,
    HostKeyMismatch,
    LanpoolError,
    NotFoundError,
    RunnerError,
    RunnerProtocolError,
    RunnerRefused,
)
from lanpool.app.runners.reach import CONNECT_TIMEOUT_S
from lanpool.protocol import (
    PROTOCOL_VERSION,
    ArtifactData,
    ArtifactEnd,
    ArtifactRange,
    ArtifactsSent,
    Attach,
    BlobStored,
    ClientHello,
    DirectOffer,
    Error,
    ErrorCode,
    FrameReader,
    GetArtifacts,
    GetStatus,
    HaveBlobs,
    Hello,
    JobAccepted,
    JobState,
    JobStatus,
    MissingBlobs,
    PairConfirm,
    Paired,
    PairReply,
    PairStart,
    ProtocolError,
    PutBlob,
    StopJob,
    SubmitJob,
    decode_agent_message,
    encode_message,
)
from lanpool.protocol.messages import ARTIFACT_PAGES, AgentMessage, ClientMessage
from lanpool.protocol.pairing import PAIRING_USER, ControllerPake, PairingFailed, sanitize_label
from lanpool.protocol.runtime.ssh_transport import install as install_ssh_transport
from lanpool.protocol.wire import ENCRYPTION_ALGS, SUBSYSTEM
from lanpool.protocol.wire import key_text as host_key_text

log = logging.getLogger(__name__)

install_ssh_transport()  # no ignore packet before each AEAD packet (protocol/runtime/ssh_transport.py)

# What the runner may send before we read (window) and in one SSH packet: asyncssh's defaults
# (2 MiB, 32 KiB) cost a Python round of packet work per 32 KiB, which caps a 1 GiB artifact's
# pull well below the link; larger packets cut that work ~8x. (A runner sends no more than it
# has: logs come in whole lines.)
CHANNEL_WINDOW = 16 * 1024 * 1024
CHANNEL_MAX_PACKET = 256 * 1024
REPLY_TIMEOUT_S = 60.0  # a submit extracts the snapshot before replying
# A runner that vanishes without closing the connection (machine off, cable out)
# is noticed after 3 unanswered keepalives: ~9-12 s.
KEEPALIVE_S = 3.0
# One SSH packet per read: asyncssh hands a packet's bytes over as they are, where a larger
# read joins several (one more copy of every artifact byte).
_READ_SIZE = CHANNEL_MAX_PACKET
HAVE_CHUNK = 8192  # digests per HaveBlobs: ~0.5 MB, far below a frame's limits
_WRITE_BATCH = 8 * 1024 * 1024  # PutBlob bytes written before each drain

_Reply = TypeVar("_Reply", bound=AgentMessage)


class Channel:
    """One lanpool subsystem channel: typed send, typed receive."""

    def __init__(self, process: asyncssh.SSHClientProcess[bytes], where: str) -> None:
        self._proc = process
        self._reader = FrameReader()
        self._messages: list[AgentMessage] = []
        self._unreadable: RunnerProtocolError | None = None  # raised once the messages before it are taken
        self._where = where

    async def start(self) -> Hello:
        msg = await self.recv(CONNECT_TIMEOUT_S)
        if not isinstance(msg, Hello):
            raise RunnerError(f"{self._where} did not greet with Hello; is it a lanpool agent?")
        if msg.protocol_version != PROTOCOL_VERSION:
            raise RunnerError(
                f"{self._where} speaks lanpool protocol {msg.protocol_version}, this controller {PROTOCOL_VERSION}: "
                "install the same lanpool version on both"
            )
        await self.send(ClientHello(PROTOCOL_VERSION, __version__, [ARTIFACT_PAGES]))
        return msg

    async def send(self, msg: ClientMessage) -> None:
        await self.send_many([msg])

    async def send_many(self, msgs: Iterable[ClientMessage]) -> None:
        """Write the messages as one buffer, then wait for the channel to take it."""
        try:
            self._proc.stdin.write(b"".join(encode_message(m) for m in msgs))
            await self._proc.stdin.drain()
        except (OSError, asyncssh.Error) as exc:
            raise RunnerError(f"lost {self._where}: {getattr(exc, 'reason', None) or exc}") from None

    async def _fill(self, timeout: float | None) -> None:
        while not self._messages:
            if self._unreadable is not None:
                raise self._unreadable
            try:
                data = await asyncio.wait_for(self._proc.stdout.read(_READ_SIZE), timeout)
            except (OSError, asyncssh.Error) as exc:
                raise RunnerError(f"lost {self._where}: {getattr(exc, 'reason', None) or exc}") from None
            if not data:
                raise RunnerError(f"{self._where} closed the connection")
            try:
                for body in self._reader.feed(data):
                    self._messages.append(decode_agent_message(body))
            except ProtocolError as exc:
                # Not a lost connection: asking again would get the same, so it is never retried.
                # The messages that came before it (log lines) are still delivered first.
                self._unreadable = RunnerProtocolError(
                    f"{self._where} sent a message this controller cannot read: {_clip(exc.message)}"
                )

    async def recv_many(self, timeout: float | None = None) -> list[AgentMessage]:
        """Every whole message that has arrived (at least one); raises at end of stream."""
        await self._fill(timeout)
        batch, self._messages = self._messages, []
        return batch

    async def recv(self, timeout: float | None = None) -> AgentMessage:
        await self._fill(timeout)
        return self._messages.pop(0)

    def close(self) -> None:
        self._proc.close()


async def _open_channel(conn: asyncssh.SSHClientConnection, where: str) -> tuple[Channel, Hello]:
    """A new lanpool subsystem channel, past the runner's greeting."""
    try:
        proc = await conn.create_process(
            subsystem=SUBSYSTEM, encoding=None, window=CHANNEL_WINDOW, max_pktsize=CHANNEL_MAX_PACKET
        )
    except asyncssh.ChannelOpenError as exc:
        raise RunnerError(f"{where} refused the lanpool channel: {exc.reason}") from None
    except (OSError, asyncssh.Error) as exc:
        raise RunnerError(f"{where} refused the lanpool channel: {exc}") from None
    channel = Channel(proc, where)
    return channel, await channel.start()


class RunnerSession:
    """A connection to one runner, opened with the controller key and a pinned host key."""

    def __init__(
        self, conn: asyncssh.SSHClientConnection, where: str, host_key: str, control: Channel, hello: Hello
    ) -> None:
        self.conn = conn
        self.where = where
        self.host_key = host_key
        self.hello = hello  # what the runner said on the request channel
        self._control = control
        self._spare: asyncio.Task[Channel] | None = None  # open_channel_soon's, for the next attach
        # One request at a time on the request channel: a refresh asks after many jobs on one session.
        self._asking = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        client_key: asyncssh.SSHKey,
        pinned_host_key: str | None,
        *,
        timeout: float = CONNECT_TIMEOUT_S,
        pairing: bool = False,
        sock: socket.socket | None = None,
    ) -> "RunnerSession":
        """Connect and open the request channel. With `pairing`, connect as the pairing
        user: the runner accepts any key for it while it shows a code, and the
        connection can then only run pair(). `sock`: a TCP connection to host:port already
        open (app/runners/reach.py), which the session runs over (and closes)."""
        where = f"runner {host}:{port}"
        known_hosts: tuple[list[asyncssh.SSHKey], list[asyncssh.SSHKey], list[asyncssh.SSHKey]] | None = None
        # None: first contact: trust on first use (pairing proves the key), then pinned by the caller
        if pinned_host_key:
            known_hosts = ([asyncssh.import_public_key(pinned_host_key)], [], [])
        try:
            try:
                conn = await asyncio.wait_for(
                    asyncssh.connect(
                        host,
                        port,
                        username=PAIRING_USER if pairing else "lanpool",
                        known_hosts=known_hosts,
                        encryption_algs=ENCRYPTION_ALGS,
                        agent_path=None,
                        agent_forwarding=False,
                        config=[],
                        connect_timeout=timeout,
                        keepalive_interval=KEEPALIVE_S,
                        keepalive_count_max=3,
                        client_keys=[client_key],
                        preferred_auth=["publickey"],
                        password=None,
                        kbdint_auth=False,
                        sock=sock,
                    ),
                    timeout + 1,
                )
            except BaseException:
                if sock is not None:  # no-op when asyncssh took it (and closed it with its connection)
                    sock.close()
                raise
        except asyncssh.HostKeyNotVerifiable:
            raise HostKeyMismatch(
                f"{where} presented a different host key than the one pinned for it. If the runner was "
                "reinstalled, `app headless runners remove NAME` and connect again; otherwise someone may be "
                "impersonating it"
            ) from None
        except asyncssh.PermissionDenied:
            if pairing:
                raise RunnerRefused(
                    f"{where} refused to pair: it has no active pairing code (codes expire and are "
                    "used once): `app agent pair` on the runner shows a new one"
                ) from None
            raise RunnerRefused(
                f"{where} refused this controller's key: pair with `app headless runners pair NAME CODE` "
                f"(the code is in `app agent status` on the runner), or run `app agent authorize` there "
                f"with {_pubkey_hint()}"
            ) from None
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            raise RunnerError(f"cannot reach {where}: {reason}; is `app agent serve` running there?") from None
        key = conn.get_server_host_key()
        try:
            control, hello = await _open_channel(conn, where)
        except BaseException:
            conn.close()
            raise
        return cls(conn, where, host_key_text(key.export_public_key().decode()) if key else "", control, hello)

    async def open_channel(self) -> Channel:
        return (await _open_channel(self.conn, self.where))[0]

    def open_channel_soon(self) -> None:
        """Start opening the channel the next attach will use, now: beside a submit, whose
        runner opens it while the job starts (a round trip less to a run's first line)."""
        if self._spare is None:
            self._spare = asyncio.create_task(self.open_channel())

    async def _take_channel(self) -> Channel:
        spare, self._spare = self._spare, None
        return await spare if spare is not None else await self.open_channel()

    async def _request(self, msg: ClientMessage, expect: type[_Reply]) -> _Reply:
        async with self._asking:
            await self._control.send(msg)
            return await self._reply(msg, expect)

    async def _reply(self, msg: ClientMessage, expect: type[_Reply]) -> _Reply:
        """The next reply on the request channel, which must be an `expect` (`msg` is what it answers)."""
        reply = await self._control.recv(REPLY_TIMEOUT_S)
        if isinstance(reply, Error):
            raise _error_from(reply, self.where)
        if not isinstance(reply, expect):
            raise RunnerError(f"{self.where} replied {type(reply).__name__} to {type(msg).__name__}")
        return reply

    async def submit(self, req: SubmitJob) -> JobStatus:
        return (await self.submit_accepted(req))[1]

    async def submit_accepted(self, req: SubmitJob) -> tuple[JobAccepted, JobStatus]:
        async with self._asking:
            await self._control.send(req)
            accepted = await self._reply(req, JobAccepted)
            return accepted, await self._reply(req, JobStatus)

    async def pair(self, code: str, public_key: str, label: str) -> str:
        """Run the pairing PAKE (protocol/pairing.py) on a pairing connection; returns the
        runner's name. The runner proves the code first: to one that cannot, this sends
        nothing more (not even `label`)."""
        pake = ControllerPake(code, public_key, self.host_key)
        await self._control.send(PairStart(pake.message, host_key_text(public_key)))
        reply = await self._control.recv(REPLY_TIMEOUT_S)
        if isinstance(reply, Error):
            raise RunnerRefused(f"{self.where} refused to pair: {_clip(reply.message)}")
        if not isinstance(reply, PairReply):
            raise RunnerError(f"{self.where} replied {type(reply).__name__} to PairStart")
        try:
            proof = pake.check_runner(reply.pake, reply.confirm)
        except PairingFailed:
            raise RunnerRefused(
                f"{self.where} could not prove the pairing code: wrong code, or someone in the middle"
            ) from None
        paired = await self._request(PairConfirm(proof, sanitize_label(label)), Paired)
        return paired.name

    async def stop(self, job_id: str, abort: bool, grace_s: float | None) -> JobStatus:
        return await self._request(StopJob(job_id, abort, grace_s), JobStatus)

    async def status(self, job_id: str, artifacts_from: int = 0) -> JobStatus:
        """The job's status; a long artifact list comes a page at a time, this one from file
        `artifacts_from` (app/transfer/pull.py reads the rest)."""
        return await self._request(GetStatus(job_id, artifacts_from), JobStatus)

    async def attach(
        self, job_id: str, from_seq: int, follow: bool = True, states: bool = False
    ) -> AsyncIterator[list[AgentMessage]]:
        """Batches of LogChunk messages; the last batch ends with the job's final JobStatus (its
        end, or without `follow` its state now). Followed with `states`, a batch may also end
        with a JobStatus of a state the job has only reached on its way (QUEUED, RUNNING)."""
        channel = await self._take_channel()
        try:
            await channel.send(Attach(job_id, from_seq, follow, states=follow and states))
            while True:
                batch = await channel.recv_many()
                for msg in batch:
                    if isinstance(msg, Error):
                        raise _error_from(msg, self.where)
                yield batch
                last = batch[-1]
                if isinstance(last, JobStatus) and (not states or not follow or JobState(last.state).is_terminal()):
                    return
        finally:
            channel.close()

    @property
    def peer_host(self) -> str:
        """The runner's address as this connection reached it: where its direct connections are offered."""
        peer = self.conn.get_extra_info("peername")
        return str(peer[0]) if peer else ""

    async def missing_blobs(self, sha256s: list[str]) -> list[str]:
        """Which of these blobs the runner lacks (only ever ones that were asked about)."""
        missing: list[str] = []
        for i in range(0, len(sha256s), HAVE_CHUNK):
            chunk = sha256s[i : i + HAVE_CHUNK]
            reply = await self._request(HaveBlobs(chunk), MissingBlobs)
            asked = set(chunk)
            missing += [s for s in dict.fromkeys(reply.sha256s) if s in asked]
        return missing

    async def put_blobs(self, parts: Iterator[PutBlob], count: int) -> None:
        """Stream `count` blobs' parts, many frames per write, while their BlobStored
        replies are read; the first Error (or a reply for no blob sent) ends it."""
        sent: list[str] = []

        async def replies() -> None:
            for n in range(count):
                # No timeout while parts are still going (a large blob is answered only once
                # whole); once all are written, the rest must come within REPLY_TIMEOUT_S.
                reply = await self._control.recv()
                if isinstance(reply, Error):
                    raise _error_from(reply, self.where)
                if not isinstance(reply, BlobStored) or n >= len(sent) or reply.sha256 != sent[n]:
                    raise RunnerProtocolError(f"{self.where} replied {type(reply).__name__} to PutBlob")

        reader = asyncio.create_task(replies())
        try:
            batch: list[PutBlob] = []
            size = 0
            for part in parts:
                if part.offset + len(part.data) == part.size:
                    sent.append(part.sha256)
                batch.append(part)
                size += len(part.data) + 128
                if size >= _WRITE_BATCH:
                    await self._send_parts(batch, reader)
                    batch, size = [], 0
            if batch:
                await self._send_parts(batch, reader)
            try:
                await asyncio.wait_for(asyncio.shield(reader), REPLY_TIMEOUT_S)
            except TimeoutError:
                raise RunnerError(f"{self.where} did not confirm the blobs sent to it") from None
        finally:
            if not reader.done():
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, LanpoolError):
                    await reader

    async def _send_parts(self, batch: list[PutBlob], reader: asyncio.Task[None]) -> None:
        if reader.done():  # the runner refused something: its reason, not a lost channel
            await reader
        await self._control.send_many(batch)

    async def get_artifacts(
        self, job_id: str, files: list[ArtifactRange], direct: bool = False
    ) -> AsyncIterator[list[ArtifactData | ArtifactEnd | ArtifactsSent | Error | DirectOffer]]:
        """Batches of the GetArtifacts stream, on a channel of its own; the last batch ends
        with ArtifactsSent or an Error (the request refused, or a file the runner could not
        send). `direct`: ask for a connection of its own (app/runners/direct.py); a runner that
        offers one answers with a DirectOffer alone, the one batch then; one that does not
        streams here as asked without it. Any other message is a RunnerProtocolError; what
        the messages carry is the caller's to check."""
        channel = await self.open_channel()
        try:
            await channel.send(GetArtifacts(job_id, files, direct))
            first = True
            while True:
                batch = await channel.recv_many(REPLY_TIMEOUT_S)  # a runner that stops sending is lost
                if direct and first and isinstance(batch[0], DirectOffer):
                    if len(batch) > 1 or batch[0].job_id != job_id:
                        raise RunnerProtocolError(f"{self.where} sent a direct offer this controller did not ask for")
                    yield [batch[0]]
                    return
                first = False
                for msg in batch:
                    if not isinstance(msg, (ArtifactData, ArtifactEnd, ArtifactsSent, Error)):
                        raise RunnerProtocolError(f"{self.where} sent {type(msg).__name__} among artifact data")
                yield batch  # type: ignore[misc]
                if isinstance(batch[-1], ArtifactsSent):
                    return
        except TimeoutError:
            raise RunnerError(f"{self.where} stopped sending artifacts of job {job_id}") from None
        finally:
            channel.close()

    def close(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:  # never used: its channel closes with the connection
            spare.cancel()
            spare.add_done_callback(lambda t: t.cancelled() or t.exception())
        self.conn.close()

    async def __aenter__(self) -> "RunnerSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
        await self.conn.wait_closed()


def _clip(text: str, limit: int = 300) -> str:
    """A runner's text in one of our messages: bounded (a frame may hold 16 MB of it)."""
    return text if len(text) <= limit else text[:limit] + "..."


def _error_from(err: Error, where: str) -> Exception:
    if err.code == ErrorCode.UNKNOWN_JOB:
        return NotFoundError(f"{where}: {err.message}")
    if err.code == ErrorCode.MISSING_BLOBS:
        return BlobsMissing(f"{where}: {err.message}")
    return RunnerError(f"{where}: {err.message}")


def _pubkey_hint() -> str:
    from lanpool.app.home import ControllerHome

    return str(ControllerHome.default().key) + ".pub"
