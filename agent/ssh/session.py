"""One lanpool channel: read client frames, act on them, reply and stream logs."""

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Generator
from typing import Any, cast

import asyncssh

from lanpool import __version__
from lanpool.agent.direct import DirectSender
from lanpool.agent.errors import JobError
from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.journal import artifact_page
from lanpool.agent.jobs.manager import JobManager
from lanpool.agent.jobs.owner import Owner
from lanpool.agent.shell.dev_sshd import docker_cli
from lanpool.agent.shell.dev_sshd import sshd_user as dev_sshd_user
from lanpool.agent.shell.sshd import sshd_offered
from lanpool.agent.ssh.pairing import PairingRefused, PairingResponder
from lanpool.agent.workspace.artifacts import Wanted, artifact_stream
from lanpool.agent.workspace.blobs import BlobCache, BlobPart
from lanpool.agent.workspace.spool import SpoolRecord
from lanpool.protocol import (
    PROTOCOL_VERSION,
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
    LogChunk,
    MissingBlobs,
    PairConfirm,
    PairStart,
    Ping,
    Pong,
    ProtocolError,
    PutBlob,
    StopJob,
    SubmitJob,
    decode_client_message,
    encode_message,
)
from lanpool.protocol.errors import clip
from lanpool.protocol.messages import ARTIFACT_PAGES, STATUS_ARTIFACTS, AgentMessage, ClientMessage, JobStatus
from lanpool.protocol.shell_sshd import DEV_SSHD, DEV_SSHD_CONTAINERS, DEV_SSHD_RELAY, SHELL_SSHD
from lanpool.protocol.transfer_messages import ARTIFACT_DIRECT

log = logging.getLogger(__name__)

# Log bytes per LogChunk frame: large enough that a fast job costs few SSH writes.
CHUNK_BYTES = 256 * 1024
# After a frame smaller than CHUNK_BYTES, a follower waits this long before reading the spool
# again: lines that keep coming then go in frames of ~this long's worth (a 1M-line flood took
# ~4,800 frames of ~21 KiB, each decoded and checked on its own by the controller), while a
# line after a quiet spell still goes at once.
COALESCE_S = 0.005
_READ_SIZE = 256 * 1024
_ERROR_CHARS = 1000  # of an Error reply's message
# A status listing more artifact files than this is made into its frame in a thread.
_INLINE_ARTIFACTS = 256


class ChannelSession:
    """Serves one `lanpool` subsystem channel until the client closes it."""

    def __init__(
        self,
        process: asyncssh.SSHServerProcess[bytes],
        manager: JobManager,
        name: str,
        resources: Callable[[], dict[str, Any]],
        pairing: PairingResponder | None = None,
        direct: DirectSender | None = None,
        *,
        owner: Owner | None,
        dev_host_key: str = "",
    ) -> None:
        """`pairing` is set on pairing-only connections: they may run the pairing
        exchange (and say hello, and ping), nothing else. `direct`: artifacts may go on a
        connection of their own (agent/direct.py). `owner`: the controller the connection
        authenticated as; its requests reach its own jobs only (agent/jobs/owner.py)."""
        self._proc = process
        self._manager = manager
        self._name = name
        self._resources = resources
        self._pairing = pairing
        self._direct = direct
        self._owner = owner
        self._dev_host_key = dev_host_key  # base64 of the dev sshd's host key ("": none offered)
        self._streams: set[asyncio.Task[None]] = set()
        self._write_lock = asyncio.Lock()
        self._blobs: BlobCache = manager.blobs
        self._part: BlobPart | None = None  # the blob being received (one at a time, parts in order)
        # Blobs this channel was told are here, or sent: kept from eviction until it submits or closes.
        self._offered: set[str] = set()
        self.blobs_stored = 0  # blobs this channel received whole (tests count uploads with it)
        self._pages = False  # the controller reads a long artifact list a page at a time (ClientHello)

    async def run(self) -> None:
        reader = FrameReader()
        try:
            features = []
            if self._direct is not None:
                features.append(ARTIFACT_DIRECT)
            sshd_user = sshd_host_key = ""
            if self._direct is not None and sshd_offered():  # its listener is in the direct connections' ports
                features.append(SHELL_SSHD)
                user = dev_sshd_user() if self._dev_host_key and self._pairing is None else ""
                if user:  # what an `ssh-config` entry needs
                    features.append(DEV_SSHD)
                    features.append(DEV_SSHD_RELAY)
                    if docker_cli():
                        features.append(DEV_SSHD_CONTAINERS)
                    sshd_user, sshd_host_key = user, self._dev_host_key
            await self._send(
                Hello(
                    PROTOCOL_VERSION,
                    __version__,
                    self._name,
                    self._resources(),
                    features,
                    sshd_user=sshd_user,
                    sshd_host_key=sshd_host_key,
                )
            )
            while True:
                data = await self._proc.stdin.read(_READ_SIZE)
                if not data:
                    break
                try:
                    bodies = reader.feed(data)
                except ProtocolError as exc:  # cannot find the next frame: reply, close
                    log.warning("closing channel: %s", exc.message)
                    await self._send(Error(exc.code, exc.message))
                    break
                for body in bodies:
                    await self._handle_body(body)
        except (OSError, asyncssh.Error) as exc:
            log.info("channel ended: %s: %s", type(exc).__name__, exc)
        finally:
            if self._pairing is not None:
                self._pairing.end()  # an attempt left unproven counts as a wrong code
            for task in self._streams:
                task.cancel()
            if self._part is not None:  # an upload the controller never finished
                self._blobs.drop(self._part)
            self._blobs.unpin(self._offered)
            self._blobs.evict()
            with contextlib.suppress(Exception):
                self._proc.exit(0)

    async def _handle_body(self, body: bytes) -> None:
        try:
            msg = decode_client_message(body)
        except ProtocolError as exc:  # one bad message: reply, keep serving
            await self._send(Error(exc.code, clip(exc.message, _ERROR_CHARS)))
            return
        try:
            await self._dispatch(msg)
        except JobError as exc:
            # Clipped: a reply never grows with what the peer sent (a 16 MB id must not make a 16 MB reply).
            await self._send(Error(exc.code, clip(exc.message, _ERROR_CHARS), clip(getattr(msg, "job_id", ""))))
        except (OSError, asyncssh.Error) as exc:
            if self._proc.is_closing():
                raise  # the channel itself went: nothing more can be said on it
            # A local failure (a disk full, a file gone while staging, a refused connection to a
            # gang's node 0) is this request's: say so, and keep serving, rather than end the
            # channel with no reason the controller can show ("closed the connection").
            log.exception("request %s failed", type(msg).__name__)
            await self._send(_internal_error(msg, exc))
        except Exception as exc:  # a bug in one request must not end the channel
            log.exception("request %s failed", type(msg).__name__)
            await self._send(_internal_error(msg, exc))

    async def _dispatch(self, msg: ClientMessage) -> None:
        if self._pairing is not None and not isinstance(msg, (ClientHello, PairStart, PairConfirm, Ping)):
            raise JobError(
                ErrorCode.NOT_PAIRED,
                "this connection is for pairing only: pair first (`app headless runners pair NAME CODE`)",
            )
        if isinstance(msg, (PairStart, PairConfirm)):
            await self._pair(msg)
        elif isinstance(msg, ClientHello):
            self._pages = ARTIFACT_PAGES in msg.features
            if msg.protocol_version != PROTOCOL_VERSION:
                await self._send(
                    Error(
                        ErrorCode.VERSION_MISMATCH,
                        f"runner speaks protocol {PROTOCOL_VERSION}, controller {msg.protocol_version}: "
                        "install the same lanpool version on both",
                    )
                )
        elif isinstance(msg, HaveBlobs):
            missing = self._blobs.missing(msg.sha256s)
            self._pin(set(msg.sha256s) - set(missing))
            await self._send(MissingBlobs(missing))
        elif isinstance(msg, PutBlob):
            await self._put_blob(msg)
        elif isinstance(msg, SubmitJob):
            job = await self._manager.submit(msg, self._owner)
            self._blobs.unpin(self._offered)  # staged: the workspace holds copies now
            self._offered = set()
            await self._send(JobAccepted(msg.job_id, str(job.dir / "workspace"), ports=list(job.record.ports)))
            await self._send_status(job)
        elif isinstance(msg, StopJob):
            job = self._manager.stop(msg.job_id, msg.abort, msg.grace_s, self._owner)
            await self._send_status(job)
        elif isinstance(msg, GetStatus):
            await self._send_status(self._manager.get(msg.job_id, self._owner), msg.artifacts_from)
        elif isinstance(msg, Attach):
            job = self._manager.get(msg.job_id, self._owner)
            task = asyncio.create_task(self._stream(job, msg.from_seq, msg.follow, msg.states))
            self._streams.add(task)
            task.add_done_callback(self._streams.discard)
        elif isinstance(msg, GetArtifacts):
            job = self._manager.get(msg.job_id, self._owner)
            wanted = self._artifact_ranges(job, msg)
            if msg.direct and self._direct is not None:
                offer = self._offer_direct(job, wanted)
                if offer is not None:
                    await self._send(offer)
                    return
            task = asyncio.create_task(self._send_artifacts(job, wanted))
            self._streams.add(task)
            task.add_done_callback(self._streams.discard)
        elif isinstance(msg, Ping):
            await self._send(Pong(msg.nonce))

    def _pin(self, names: set[str]) -> None:
        names = names - self._offered
        self._blobs.pin(names)
        self._offered |= names

    async def _put_blob(self, msg: PutBlob) -> None:
        part = self._part
        if part is not None and part.sha256 != msg.sha256:
            self._part = None
            self._blobs.drop(part)
            raise JobError(
                ErrorCode.BAD_REQUEST, f"blob {msg.sha256[:12]} started before blob {part.sha256[:12]} was whole"
            )
        if part is None:
            if msg.offset != 0:
                raise JobError(
                    ErrorCode.BAD_REQUEST, f"blob {msg.sha256[:12]}: part at offset {msg.offset} of no upload"
                )
            self._part = part = self._blobs.begin(msg.sha256, msg.size)
        try:
            whole = self._blobs.write(part, msg.offset, msg.size, msg.data)
        except BaseException:
            self._part = None
            raise
        if whole:
            self._part = None
            self.blobs_stored += 1
            self._pin({msg.sha256})
            await self._send(BlobStored(msg.sha256))

    async def _pair(self, msg: PairStart | PairConfirm) -> None:
        if self._pairing is None:
            raise JobError(ErrorCode.BAD_REQUEST, "this controller is already authorized: nothing to pair")
        try:
            reply = await (self._pairing.start(msg) if isinstance(msg, PairStart) else self._pairing.confirm(msg))
        except PairingRefused as exc:
            await self._send(Error(exc.code, exc.message))
            if exc.close:  # of no further use: the expired, locked out or wrong
                self._proc.channel.get_connection().close()
            return
        await self._send(reply)

    async def _stream(self, job: Job, cursor: int, follow: bool, states: bool = False) -> None:
        """Send the log from `cursor`, following until the job ends, then its status. With
        `states`, each change of its state is sent as it happens too (QUEUED -> RUNNING, a
        retry's QUEUED): a follower's view is the runner's, not the one it had at submit."""
        job_id = job.record.job_id
        sent = ""  # the state last sent
        try:
            while True:
                changed = job.changed  # taken before reading, so no wake-up is missed
                records = job.spool.read(cursor, CHUNK_BYTES)
                if records:
                    await self._write(_chunk_frames(job_id, records))
                    cursor = records[-1].seq + records[-1].n_lines
                    if follow and sum(len(r.data) for r in records) < CHUNK_BYTES:
                        await asyncio.sleep(COALESCE_S)
                    continue
                if job.record.terminal or not follow:
                    await self._send_status(job)
                    return
                if states and job.shown_state() != sent:
                    sent = job.shown_state()
                    await self._send_status(job)
                await changed.wait()
        except (OSError, asyncssh.Error, ConnectionError):
            return

    @staticmethod
    def _artifact_ranges(job: Job, msg: GetArtifacts) -> Wanted:
        """(path, offset, listed size) of each file asked for: only files in the job's list,
        and only offsets inside them (a resumed pull)."""
        if not job.record.terminal:
            raise JobError(ErrorCode.BAD_REQUEST, f"job {msg.job_id} has not ended: its artifacts are not listed yet")
        listed = {f["path"]: int(f["size"]) for f in job.record.artifact_files}
        if not msg.files:
            return [(path, 0, size) for path, size in listed.items()]
        wanted = []
        for r in msg.files:
            if r.path not in listed:
                raise JobError(ErrorCode.BAD_REQUEST, f"{r.path!r} is not an artifact of job {msg.job_id}")
            size = listed[r.path]
            if not 0 <= r.offset <= size:
                raise JobError(
                    ErrorCode.BAD_REQUEST, f"offset {r.offset} is outside artifact {r.path!r} ({size} bytes)"
                )
            wanted.append((r.path, r.offset, size))
        return wanted

    def _offer_direct(self, job: Job, wanted: Wanted) -> DirectOffer | None:
        """A DirectOffer for this transfer, listening where the controller reached this
        runner; None: stream it on the channel."""
        assert self._direct is not None
        sockname = self._proc.channel.get_extra_info("sockname")
        if not sockname:
            return None
        job_id, workspace = job.record.job_id, job.dir / "workspace"
        return self._direct.offer(str(sockname[0]), job_id, lambda: artifact_stream(workspace, job_id, wanted))

    async def _send_artifacts(self, job: Job, wanted: Wanted) -> None:
        """The artifact stream (agent/workspace/artifacts.py artifact_stream) on this channel."""
        try:
            await self._send_batches(artifact_stream(job.dir / "workspace", job.record.job_id, wanted))
        except (OSError, asyncssh.Error, ConnectionError):
            return

    async def _send_batches(self, batches: Generator[bytes | bytearray, None, None]) -> None:
        """Write an artifact_stream generator out, reading the next buffer (in a thread: the
        reads stay off the event loop) while this one is encrypted and sent."""
        ahead: asyncio.Future[bytes | bytearray | None] = asyncio.ensure_future(asyncio.to_thread(next, batches, None))
        try:
            while (batch := await ahead) is not None:
                ahead = asyncio.ensure_future(asyncio.to_thread(next, batches, None))
                # asyncssh takes any bytes-like and copies it once into its send buffer
                await self._write(cast(bytes, batch))
        finally:
            if ahead.done():
                batches.close()
            else:  # the channel went mid-read: close the generator once its thread is out of it

                def close(done: "asyncio.Future[bytes | bytearray | None]") -> None:
                    if not done.cancelled():
                        done.exception()  # taken: a read that failed as the channel went is no news
                    batches.close()

                ahead.add_done_callback(close)

    async def _send_status(self, job: Job, artifacts_from: int = 0) -> None:
        """The job's status: its artifact list a page long (STATUS_ARTIFACTS) to a controller that
        reads pages, whole to one that does not. A long list is made into the frame in a thread:
        on the loop, a status of 150k files stalled every other connection of this agent for
        over a second (scripts/bench-artifact-status)."""
        limit = STATUS_ARTIFACTS if self._pages else None
        files = job.record.artifact_files
        if len(files) <= _INLINE_ARTIFACTS:
            await self._send(job.status(artifacts_from, limit))
            return
        # The rest of the status is taken here, where the record changes; the list is replaced
        # whole when the job ends, never changed in place, so the thread reads the one taken here.
        head = job.status(artifacts_from, 0)
        await self._write(await asyncio.to_thread(_status_frame, head, files, artifacts_from, limit))

    async def _send(self, msg: AgentMessage) -> None:
        await self._write(encode_message(msg))

    async def _write(self, data: bytes) -> None:
        async with self._write_lock:  # frames from concurrent streams must not interleave
            self._proc.stdout.write(data)
            await self._proc.stdout.drain()


def _chunk_frames(job_id: str, records: list[SpoolRecord]) -> bytes:
    """A spool read's records as LogChunk frames."""
    return b"".join(encode_message(LogChunk(job_id, r.seq, r.stream, r.data, at=r.at)) for r in records)


def _status_frame(head: JobStatus, files: list[dict[str, Any]], start: int, limit: int | None) -> bytes:
    """`head` with its page of `files` (journal.artifact_page), as a frame (in a thread)."""
    artifacts, total = artifact_page(files, start, limit)
    return encode_message(dataclasses.replace(head, artifacts=artifacts, artifacts_total=total))


def _internal_error(msg: ClientMessage, exc: BaseException) -> Error:
    """The reply to a request the runner failed on for its own reasons (the controller shows it)."""
    return Error(
        ErrorCode.INTERNAL,
        clip(f"the runner failed on this request: {exc}", _ERROR_CHARS),
        clip(getattr(msg, "job_id", "")),
    )
