"""A hostile runner for tests: a real asyncssh server on 127.0.0.1 (port 0, a generated
host key) serving the `lanpool` subsystem with the real protocol encoder, and SFTP
in a temp dir (as agents do today), that misbehaves on request.

It runs its own event loop in a thread, so a test can drive the controller in-process
(asyncio.run) or as a subprocess (`app headless ...`) against it.

Each job it knows is a `Script`: the log it streams, the state it ends in, the
artifact files it streams back (GetArtifacts), and the misbehaviours to add:
- `extra_chunks`: LogChunks sent along with the job's own (another job's id,
  another node's number);
- `raw_status`: the final status as a hand-made map (e.g. an unknown state),
  sent with `encode_frame` since the JobStatus dataclass validates;
- `files` / `declared`: the bytes served for each path (honestly, from the offset
  asked) and the files the status declares (any paths, any sizes);
- `artifact_frames`: hand-made messages sent instead of the honest stream;
- `cut_after`: the channel closes after this many artifact bytes (a drop);
- `page` / `total_lie`: the final status lists `declared` a page at a time, each page
  saying `total_lie` files in all (JobStatus.artifacts_total) when it is set.
Jobs submitted by a controller get `default_script` (with their own id).
"""

import asyncio
import dataclasses
import io
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
import pytest

from lanpool.protocol import (
    PROTOCOL_VERSION,
    ArtifactData,
    ArtifactEnd,
    ArtifactFile,
    ArtifactsSent,
    Attach,
    ClientHello,
    Error,
    ErrorCode,
    FrameReader,
    GetArtifacts,
    GetStatus,
    HaveBlobs,
    Hello,
    JobAccepted,
    JobStatus,
    LogChunk,
    MissingBlobs,
    ProtocolError,
    StopJob,
    SubmitJob,
    decode_client_message,
    encode_frame,
    encode_message,
)

BASHRC = b"# the user's own .bashrc\n"  # in the fake $HOME of tests (conftest `home`): no runner may touch it


@dataclass
class Script:
    """What the runner says about one job."""

    job_id: str = ""
    log: bytes = b"hello from the hostile runner\n"
    stream: str = "out"
    state: str = "DONE"
    exit_code: int | None = 0
    extra_chunks: list[LogChunk] = field(default_factory=list)
    raw_status: dict | None = None  # replaces the final JobStatus (unknown state...)
    status_job_id: str | None = None  # the final status names this job instead
    files: dict[str, bytes] = field(default_factory=dict)  # streamed on GetArtifacts
    declared: list[tuple[str, int]] = field(default_factory=list)
    artifact_frames: list | None = None  # messages sent instead of the honest stream
    cut_after: int | None = None  # close the channel after this many artifact bytes
    slow_s: float = 0.0  # a pause after each artifact part (a slow link)
    page: int = 0  # the final status lists `declared` this many at a time (0: all at once)
    total_lie: int | None = None  # the artifacts_total each page says instead of the truth


@dataclass
class Counters:
    connections: int = 0
    attaches: int = 0
    downloads: int = 0
    artifact_requests: list = field(default_factory=list)  # each GetArtifacts' [(path, offset)]
    artifact_bytes: int = 0  # artifact data sent
    status_pages: list = field(default_factory=list)  # each GetStatus' artifacts_from, past the first page


class _Server(asyncssh.SSHServer):
    def __init__(self, runner: "HostileRunner") -> None:
        self._runner = runner

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._runner.counters.connections += 1

    def begin_auth(self, username: str) -> bool:
        return not self._runner.accept_any_key  # False: no authentication at all, any key "works"

    def public_key_auth_supported(self) -> bool:
        return True


class _LyingSFTP(asyncssh.SFTPServer):
    """SFTP in the transfer dir that reports `runner.size_lie` as every file's size."""

    def __init__(self, chan, runner: "HostileRunner") -> None:
        super().__init__(chan, chroot=str(runner.transfer))
        self._runner = runner

    def _lie(self, result):
        if self._runner.size_lie is None:
            return result
        attrs = result if isinstance(result, asyncssh.SFTPAttrs) else asyncssh.SFTPAttrs.from_local(result)
        attrs.size = self._runner.size_lie
        return attrs

    def stat(self, path):
        return self._lie(super().stat(path))

    def lstat(self, path):
        return self._lie(super().lstat(path))

    def fstat(self, file_obj):
        return self._lie(super().fstat(file_obj))


class HostileRunner:
    def __init__(
        self, root: Path, controller_public_key: str | None, name: str = "hostile", accept_any_key: bool = False
    ) -> None:
        self.root = root
        self.transfer = root / "transfer"
        for sub in ("snapshots", "artifacts", "inputs"):
            (self.transfer / sub).mkdir(parents=True, exist_ok=True)
        self.name = name
        self.accept_any_key = accept_any_key
        self._authorized = controller_public_key
        self.scripts: dict[str, Script] = {}
        self.default_script = Script()
        self.counters = Counters()
        self.size_lie: int | None = None  # SFTP reports this size for every file
        self.features: list[str] = []  # Hello's
        self.host = "127.0.0.1"
        self.port = 0
        self.host_key = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncssh.SSHAcceptor | None = None

    # -- life ---------------------------------------------------------------------------

    def start(self) -> "HostileRunner":
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"hostile-{self.name}", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    async def _start(self) -> None:
        key = asyncssh.generate_private_key("ssh-ed25519")
        self.host_key = " ".join(key.export_public_key().decode().split()[:2])
        authorized = asyncssh.import_authorized_keys(self._authorized) if self._authorized else None
        self._server = await asyncssh.create_server(
            lambda: _Server(self),
            self.host,
            0,
            server_host_keys=[key],
            authorized_client_keys=authorized,
            process_factory=self._serve,
            encoding=None,
            allow_scp=False,
            sftp_factory=lambda chan: _LyingSFTP(chan, self),
        )
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        if self._loop is None:
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(30)
        self._loop.close()
        self._loop = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # -- what it says -----------------------------------------------------------------------

    def add(self, script: Script) -> Script:
        """Know a job."""
        self.scripts[script.job_id] = script
        return script

    def _status(self, script: Script, state: str | None = None, start: int = 0) -> bytes:
        if script.raw_status is not None and state is None:
            return encode_frame({"t": "job_status", "job_id": script.job_id, **script.raw_status})
        declared = [ArtifactFile(p, s) for p, s in script.declared]
        total = len(declared) if script.page else 0
        if script.page:
            declared = declared[start : start + script.page]
        return encode_message(
            JobStatus(
                job_id=script.status_job_id or script.job_id,
                state=state or script.state,
                exit_code=script.exit_code if state is None else None,
                started_at=1.0,
                finished_at=2.0 if state is None else None,
                log_lines=script.log.count(b"\n"),
                artifacts=declared if state is None else [],
                artifacts_total=(total if script.total_lie is None else script.total_lie) if state is None else 0,
            )
        )

    async def _serve(self, process: asyncssh.SSHServerProcess) -> None:
        if process.subsystem != "lanpool":
            process.exit(1)
            return
        write = process.stdout.write
        write(
            encode_message(
                Hello(PROTOCOL_VERSION, "0-hostile", self.name, {"gpus": 8, "gpu_name": "H100"}, self.features)
            )
        )
        reader = FrameReader()
        try:
            while data := await process.stdin.read(1 << 20):
                for body in reader.feed(data):
                    try:
                        msg = decode_client_message(body)
                    except ProtocolError as exc:
                        write(encode_message(Error(exc.code, exc.message)))
                        continue
                    if isinstance(msg, GetArtifacts) and msg.job_id in self.scripts:
                        if not await self._artifacts(self.scripts[msg.job_id], msg, process):
                            return  # a drop: the channel closes half-way
                        continue
                    await self._answer(msg, write)
                    await process.stdout.drain()
        except (OSError, asyncssh.Error, ProtocolError):
            pass
        finally:
            process.exit(0)

    async def _artifacts(self, script: Script, msg: GetArtifacts, process) -> bool:
        """Stream the job's files (or its hand-made frames); False when it cut the channel."""
        asked = [(r.path, r.offset) for r in msg.files] or [(p, 0) for p in script.files]
        self.counters.artifact_requests.append(asked)
        if script.artifact_frames is not None:
            out = [encode_message(m) if not isinstance(m, bytes) else m for m in script.artifact_frames]
            process.stdout.write(b"".join(out))
            await process.stdout.drain()
            return True
        for path, offset in asked:
            data = script.files.get(path, b"")
            for at in range(offset, len(data), 64 * 1024):
                part = data[at : at + 64 * 1024]
                if script.cut_after is not None and self.counters.artifact_bytes + len(part) > script.cut_after:
                    await process.stdout.drain()
                    process.channel.get_connection().close()  # the connection drops mid-file
                    return False
                process.stdout.write(encode_message(ArtifactData(script.job_id, path, at, part)))
                self.counters.artifact_bytes += len(part)
                if script.slow_s:
                    await process.stdout.drain()
                    await asyncio.sleep(script.slow_s)
            process.stdout.write(encode_message(ArtifactEnd(script.job_id, path, len(data))))
        process.stdout.write(encode_message(ArtifactsSent(script.job_id)))
        await process.stdout.drain()
        return True

    async def _answer(self, msg, write) -> None:
        if isinstance(msg, ClientHello):
            return
        if isinstance(msg, HaveBlobs):  # claims every blob: nothing is uploaded to it
            write(encode_message(MissingBlobs([])))
            return
        if isinstance(msg, SubmitJob):
            script = self.add(dataclasses.replace(self.default_script, job_id=msg.job_id))
            write(encode_message(JobAccepted(msg.job_id, f"/nowhere/{msg.job_id}")))
            write(self._status(script, "RUNNING"))
            return
        job_id = getattr(msg, "job_id", "")
        script = self.scripts.get(job_id)
        if script is None:
            write(encode_message(Error(ErrorCode.UNKNOWN_JOB, f"no job {job_id}", job_id)))
            return
        if isinstance(msg, Attach):
            self.counters.attaches += 1
            frames = [encode_message(m) for m in script.extra_chunks]
            if script.log and msg.from_seq == 0:
                frames.insert(0, encode_message(LogChunk(job_id, 0, script.stream, script.log)))
            frames.append(self._status(script))
            write(b"".join(frames))
        elif isinstance(msg, GetStatus) and msg.artifacts_from:
            self.counters.status_pages.append(msg.artifacts_from)
            write(self._status(script, start=msg.artifacts_from))
        elif isinstance(msg, (GetStatus, StopJob)):
            write(self._status(script))


def tar_bytes(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    """An uncompressed tar of hand-made members (data for regular files, None for the rest)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.mtime = kind, linkname, mode, 1_700_000_000
    return info


def trust(store, runner: HostileRunner) -> dict:
    """Put `runner` in the controller's store as a runner the user trusts (as `runners add`
    would, with its host key pinned); returns its row."""
    import inspect

    params = inspect.signature(store.upsert_runner).parameters
    extra = {"trusted": True} if "trusted" in params else {}
    store.upsert_runner(runner.name, runner.host, runner.port, runner.host_key, **extra)
    return store.runner(runner.name)


def trusted_runner(tmp_path: Path, ctl, name: str = "hostile") -> HostileRunner:
    """A started HostileRunner at tmp_path/name whose host key the controller `ctl` pins."""
    runner = HostileRunner(tmp_path / name, ctl.client_key.export_public_key().decode(), name=name).start()
    trust(ctl.store, runner)
    return runner


@pytest.fixture
def hostile(tmp_path: Path, ctl):
    """trusted_runner for the test's controller (`ctl`), stopped after the test; a test module
    imports it to use it."""
    runner = trusted_runner(tmp_path, ctl)
    yield runner
    runner.stop()


def seed_job(
    store,
    runner_row: dict,
    job_id: str,
    *,
    run_name: str | None = None,
    nodes: list[dict] | None = None,
    state: str = "RUNNING",
    artifacts: list[str] | None = None,
) -> None:
    """A job this controller submitted to `runner_row` (or to `nodes`, one runner row per node)."""
    run_name = run_name or f"run-{job_id}"
    store.create_run(run_name, "wf", "/nowhere")
    spec = {"commands": ["true"], "artifacts": artifacts or [], "nodes": len(nodes) if nodes else 1}
    store.create_job(job_id, run_name, "wf", runner_row, spec)
    store.set_job_status(job_id, state, started_at=1.0)
    for k, row in enumerate(nodes or []):
        store.set_node(job_id, k, row, state)
