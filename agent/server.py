"""The agent's SSH server: public-key auth and the lanpool subsystem, and for an
authorized controller (never a pairing connection) two doors into a RUNNING job:
an exec request in one fixed grammar (agent/job_shell.py, with a PTY if asked) and
direct-tcpip to a port the job declared (agent/job_ports.py). Code and artifacts
travel inside the subsystem (content-addressed blobs up, streamed files back), so
there is no SFTP and no general file API; any other shell, exec, PTY use,
agent/X11/port forwarding and other channel types are refused.
"""

import asyncio
import logging
import os
import signal
import socket
import time
import weakref

import asyncssh

from agent import __version__
from agent.errors import AgentError
from agent.executors import ExecutorChoice, ProcessExecutor
from agent.gpu_telemetry import telemetry
from agent.gpus import GpuAllocator, detect_gpus
from agent.home import AgentHome
from agent.job_ports import declaring_job, forward_to
from agent.job_python import JobPythons
from agent.job_shell import ShellRequest, parse_exec, serve_exec
from agent.jobs import DEFAULT_GRACE_S, JobManager
from agent.keys import add_authorized_key, load_or_create_host_key
from agent.mdns import Advertiser, advertise_addresses, txt_record
from agent.pairing import CODE_TTL_S, Lockout, Pairing, PairingGrant, PairingResponder, PairingState
from agent.pythons import Pythons
from agent.resources import detect_resources
from agent.session import ChannelSession
from protocol import ENCRYPTION_ALGS, PROTOCOL_VERSION, SUBSYSTEM, key_text
from protocol.pairing import PAIRING_USER

log = logging.getLogger(__name__)


class _LanpoolSession(asyncssh.SSHServerProcess):
    """A session channel: the lanpool subsystem (without a PTY), or, for an authorized
    controller, `lanpool-exec JOB_ID [-- ARGV]` into a running job (with a PTY if asked).
    No SFTP, no shell, no other exec (so no scp)."""

    def __init__(self, agent: "Agent", conn: asyncssh.SSHServerConnection) -> None:
        super().__init__(agent._process, None, 0, False)  # no SFTP factory, no scp
        self._agent = agent
        self._peer_conn = conn
        self._pty = False
        self.shell_request: ShellRequest | None = None

    def _authorized(self) -> bool:
        return self._peer_conn not in self._agent.pairing_grants

    def shell_requested(self) -> bool:
        log.warning("refused a shell request from %s", _peer(self._peer_conn))
        return False

    def exec_requested(self, command: str) -> bool:
        request = parse_exec(command) if self._authorized() else None
        if request is None:
            log.warning("refused an exec request from %s", _peer(self._peer_conn))
            return False
        log.info("exec session from %s into job %s: %s", _peer(self._peer_conn), request.job_id, request.describe())
        self.shell_request = request
        return super().exec_requested(command)

    def pty_requested(self, term_type, term_size, term_modes) -> bool:
        # Only an exec into a job may follow (subsystem_requested refuses the subsystem on a PTY).
        self._pty = self._authorized()
        if not self._pty:
            log.warning("refused a PTY request from %s", _peer(self._peer_conn))
        return self._pty

    def subsystem_requested(self, subsystem: str) -> bool:
        if subsystem == SUBSYSTEM and not self._pty:
            return super().subsystem_requested(subsystem)
        log.warning("refused the %r subsystem%s", subsystem[:64], " on a PTY" if self._pty else "")
        return False


def _peer(conn: asyncssh.SSHServerConnection) -> str:
    peer = conn.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if peer else "?"


class _AgentSSHServer(asyncssh.SSHServer):
    """Public-key auth. The normal user needs a key in authorized_keys; PAIRING_USER
    is accepted with any key while a pairing code is active, and such a connection
    is pairing-only (agent/pairing.py), bound to that code."""

    def __init__(self, agent: "Agent") -> None:
        self._agent = agent
        self._conn: asyncssh.SSHServerConnection | None = None
        self._peer = "?"
        self._offered: tuple[str, PairingState] | None = None  # last pairing key accepted, with its code
        self._expiry: asyncio.TimerHandle | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        peer = conn.get_extra_info("peername")
        self._peer = str(peer[0]) if peer else "?"
        log.info("connection from %s", self._peer)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._expiry is not None:
            self._expiry.cancel()

    def begin_auth(self, username: str) -> bool:
        assert self._conn is not None
        self._offered = None
        if username == PAIRING_USER:
            # No authorized_keys here: every key goes through validate_public_key,
            # which is how the key the client proves is known.
            self._conn.set_authorized_keys(None)
            return True
        # Re-read on every connection, so `app agent authorize` needs no restart.
        keys = self._agent.home.authorized_keys
        self._conn.set_authorized_keys(None)
        if keys.exists():
            try:
                self._conn.set_authorized_keys(str(keys))
            except (OSError, ValueError) as exc:
                log.error("cannot read %s: %s", keys, exc)
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        # Reached for keys not in authorized_keys, and for every key of PAIRING_USER.
        if username != PAIRING_USER:
            return False
        state = self._agent.pairing.current()
        if state is None:
            log.info("pairing connection from %s refused: no pairing code is active", self._peer)
            return False
        # asyncssh calls this again for the signed request right before checking the
        # signature: the last key recorded before auth_completed is the proven one.
        self._offered = (key_text(key.export_public_key().decode()), state)
        return True

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def host_based_auth_supported(self) -> bool:
        return False

    def auth_completed(self) -> None:
        assert self._conn is not None
        if self._conn.get_extra_info("username") != PAIRING_USER:
            log.info("controller authenticated from %s", self._peer)
            return
        assert self._offered is not None
        key, state = self._offered
        self._agent.pairing_grants[self._conn] = PairingGrant(key, state, self._peer)
        # A pairing connection lives no longer than the code it authenticated with.
        self._expiry = asyncio.get_running_loop().call_later(max(0.0, state.expires_at - time.time()), self._expire)
        log.info("pairing-only connection from %s", self._peer)

    def _expire(self) -> None:
        if self._conn is not None:
            log.info("closing the pairing connection from %s: its code expired", self._peer)
            self._conn.close()

    def session_requested(self) -> asyncssh.SSHServerSession:
        assert self._conn is not None, "sessions come after connection_made"
        return self._agent.new_session(self._conn)

    # Every other channel type and global request: refused, and logged.
    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int):  # noqa: ANN201
        assert self._conn is not None
        manager = self._agent.manager
        job = None
        if self._conn not in self._agent.pairing_grants and manager is not None:
            job = declaring_job(manager, dest_host, dest_port)
        if job is None:
            log.warning(
                "refused port forwarding (direct-tcpip) to %s:%d from %s: not a port a running job declared",
                dest_host[:64],
                dest_port,
                self._peer,
            )
            return False
        log.info("forwarding port %d of job %s to %s", dest_port, job.record.job_id, self._peer)
        return forward_to(job, dest_port)

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        log.warning("refused remote port forwarding (tcpip-forward) from %s", self._peer)
        return False

    def unix_connection_requested(self, dest_path: str) -> bool:
        log.warning("refused UNIX socket forwarding from %s", self._peer)
        return False

    def unix_server_requested(self, listen_path: str) -> bool:
        log.warning("refused UNIX socket forwarding from %s", self._peer)
        return False

    def tun_requested(self, unit: int | None) -> bool:
        log.warning("refused TUN forwarding from %s", self._peer)
        return False

    def tap_requested(self, unit: int | None) -> bool:
        log.warning("refused TAP forwarding from %s", self._peer)
        return False


def build_executors(
    mode: str, home: AgentHome, volumes: list[str] | None = None, job_python: str | None = None
) -> ExecutorChoice:
    """The executors of `--executor MODE`: Docker when asked and an engine answers now; process
    jobs in environments on `job_python` (`--job-python`, default the agent's own interpreter)."""
    docker = None
    if mode == "docker" or (mode == "auto" and _engine_may_exist()):
        from agent.executors.docker import DockerExecutor, DockerUnavailable, parse_volume

        try:
            mounts = [parse_volume(v) for v in volumes or []]
        except ValueError as exc:
            raise AgentError(f"--docker-volume: {exc}") from None
        try:
            docker = DockerExecutor.connect(str(home.root), mounts)
        except DockerUnavailable as exc:
            if mode == "docker":
                raise AgentError(f"--executor docker: {exc}") from None
            log.warning("%s; jobs run as plain processes", exc)
    pythons = JobPythons(Pythons.discover(job_python), home.pyenvs)
    return ExecutorChoice(mode, ProcessExecutor(pythons), docker)


def _engine_may_exist() -> bool:
    # Skips importing the Docker SDK (~0.2 s) on machines plainly without an engine.
    return bool(os.environ.get("DOCKER_HOST")) or os.path.exists("/var/run/docker.sock")


class Agent:
    def __init__(
        self,
        home: AgentHome,
        name: str,
        host: str,
        port: int,
        grace_s: float = DEFAULT_GRACE_S,
        executor: str = "auto",
        docker_volumes: list[str] | None = None,
        *,
        mdns: bool = True,
        mdns_interfaces: list[str] | None = None,
        pairing_ttl_s: float = CODE_TTL_S,
        blob_cache_size: int | None = None,
        job_python: str | None = None,
    ) -> None:
        self.home = home
        self.job_python = job_python
        self.blob_cache_size = blob_cache_size
        self.name = name
        self.host = host
        self.port = port
        self.grace_s = grace_s
        self.executor_mode = executor
        self.docker_volumes = list(docker_volumes or [])
        self.manager: JobManager | None = None
        self.resources: dict[str, int | str] = {}  # fixed: what the machine has
        self._server: asyncssh.SSHAcceptor | None = None
        self.pairing = Pairing(home.root / "pairing.json", pairing_ttl_s)
        self.lockout = Lockout()
        # Pairing-only connections, with the key and code each authenticated with.
        self.pairing_grants: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._pairing_exchanges: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.mdns_addresses = advertise_addresses(host, mdns_interfaces) if mdns else []
        self._advertiser: Advertiser | None = None
        self._host_key_text = ""
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        self.home.create()
        host_key = load_or_create_host_key(self.home.host_key)
        if not self.home.authorized_keys.exists():
            self.home.authorized_keys.touch(mode=0o600)
        executors = await asyncio.to_thread(
            build_executors, self.executor_mode, self.home, self.docker_volumes, self.job_python
        )
        gpus = await asyncio.to_thread(detect_gpus)
        self.manager = JobManager(self.home, executors, self.grace_s, GpuAllocator([g.index for g in gpus]))
        if self.blob_cache_size is not None:
            self.manager.blobs.budget = self.blob_cache_size
        self.manager.blobs.create()
        pythons = executors.process.pythons.pythons if isinstance(executors.process, ProcessExecutor) else None
        self.resources = detect_resources(gpus, executors.kind, pythons.versions() if pythons else "")
        await self.manager.load_journal()
        self.manager.listeners.append(self._on_jobs_changed)
        self._server = await asyncssh.create_server(
            lambda: _AgentSSHServer(self),
            self.host,
            self.port,
            server_host_keys=[host_key],
            encoding=None,
            # Sessions come from _AgentSSHServer.session_requested (new_session).
            allow_scp=False,
            # Larger SSH packets and window than asyncssh's 32 KiB / 2 MiB: blobs come in at the
            # link's speed instead of a Python round of packet work per 32 KiB.
            window=8 * 1024 * 1024,
            max_pktsize=256 * 1024,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_pty=True,  # for exec into a job only: see _LanpoolSession.pty_requested
            password_auth=False,
            kbdint_auth=False,
            host_based_auth=False,
            gss_host=None,
            encryption_algs=ENCRYPTION_ALGS,
            keepalive_interval=15,
            reuse_address=True,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        # "type base64" only: the comment is not part of the key and would break comparisons.
        self._host_key_text = key_text(host_key.export_public_key().decode())
        if not self.home.authorized_keys.read_text().strip() and not self.pairing.active:
            self.pairing.issue()
        self.home.write_info(
            {
                "pid": os.getpid(),
                "name": self.name,
                "host": self.host,
                "port": self.port,
                "version": __version__,
                "host_key": self._host_key_text,
                "mdns": self.mdns_addresses,
            }
        )
        if self.mdns_addresses:
            self._advertiser = Advertiser(self.name, self.port, self.mdns_addresses)
            await self._advertiser.start(self._txt())
        log.info(
            "agent %s listening on %s:%d (executor %s)", self.name, self.host, self.port, self.resources.get("executor")
        )

    def resources_now(self) -> dict[str, int | str]:
        """What the machine has and, right now, what is free: for Hello and the TXT record."""
        try:
            usage = self.manager.usage() if self.manager else {}
        except Exception:  # this feeds every Hello: a bookkeeping bug must not lock every controller out
            log.exception("cannot count what running jobs hold")
            usage = {}
        cpus, memory = int(self.resources.get("cpus", 0)), int(self.resources.get("memory_mb", 0))
        return {
            **self.resources,
            "gpus_free": usage.get("gpus_free", int(self.resources.get("gpus", 0))),
            "cpus_free": max(0, cpus - usage.get("cpus_reserved", 0)),
            "memory_free_mb": max(0, memory - usage.get("memory_reserved_mb", 0)),
            "running": usage.get("running", 0),
            "queued": usage.get("queued", 0),  # the runner's own queue (agent.queue)
            **telemetry().resources(),  # "gpu_util": percent per GPU now (agent.gpu_telemetry)
        }

    def _txt(self) -> dict[str, str]:
        return txt_record(self.name, __version__, PROTOCOL_VERSION, self._host_key_text, self.resources_now())

    def _on_jobs_changed(self) -> None:
        if self._advertiser is not None:
            task = asyncio.ensure_future(self._advertiser.update(self._txt()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _authorize(self, public_key: str, label: str) -> bool:
        """A controller proved the pairing code: authorize its key (False: it already was)."""
        return add_authorized_key(self.home.authorized_keys, public_key, comment=f"lanpool:{label}" if label else "")

    def new_session(self, conn: asyncssh.SSHServerConnection) -> asyncssh.SSHServerSession:
        # A pairing-only connection is told apart inside the subsystem (it may only pair).
        return _LanpoolSession(self, conn)

    async def _process(self, process: asyncssh.SSHServerProcess) -> None:
        # asyncssh hands the session itself (a _LanpoolSession) to the process factory.
        request = process.shell_request if isinstance(process, _LanpoolSession) else None
        if request is not None and self.manager is not None:
            await serve_exec(process, self.manager, request)
            return
        if process.subsystem != SUBSYSTEM:  # _LanpoolSession lets nothing else through
            process.exit(1)
            return
        conn = process.channel.get_connection()
        grant = self.pairing_grants.get(conn)
        exchange = None
        if grant is not None:  # one pairing attempt per connection, whatever the channel
            exchange = self._pairing_exchanges.get(conn)
            if exchange is None:
                exchange = PairingResponder(
                    self.pairing, self.lockout, grant, self._host_key_text, self.name, self._authorize
                )
                self._pairing_exchanges[conn] = exchange
        assert self.manager is not None, "channels are served only after start()"
        await ChannelSession(process, self.manager, self.name, self.resources_now, exchange).run()

    async def close(self, grace_s: float) -> None:
        if self._advertiser is not None:
            await self._advertiser.close()  # unregister first: controllers see it go at once
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self.manager is not None:
            await self.manager.shutdown(grace_s)
        self.home.info_file.unlink(missing_ok=True)


async def serve(
    home: AgentHome,
    name: str | None,
    host: str,
    port: int,
    grace_s: float,
    executor: str = "auto",
    docker_volumes: list[str] | None = None,
    *,
    mdns: bool = True,
    mdns_interfaces: list[str] | None = None,
    pairing_ttl_s: float = CODE_TTL_S,
    blob_cache_size: int | None = None,
    job_python: str | None = None,
) -> None:
    """Run an agent until SIGINT/SIGTERM."""
    agent = Agent(
        home,
        name or socket.gethostname(),
        host,
        port,
        grace_s,
        executor,
        docker_volumes,
        mdns=mdns,
        mdns_interfaces=mdns_interfaces,
        pairing_ttl_s=pairing_ttl_s,
        blob_cache_size=blob_cache_size,
        job_python=job_python,
    )
    await agent.start()
    print(
        f"lanpool agent {agent.name} listening on {agent.host}:{agent.port} (data dir {home.root}, "
        f"jobs with an image run as {'containers' if agent.resources['executor'] == 'docker' else 'processes'})",
        flush=True,
    )
    print(f"mDNS: {'announced on ' + ', '.join(agent.mdns_addresses) if agent.mdns_addresses else 'off'}", flush=True)
    code = agent.pairing.current()
    if code is not None:
        print(
            f"pairing code: {code.code} (valid {int(code.expires_at - time.time()) // 60} min): on the controller run "
            f"`app headless runners pair {agent.name} {code.code}`",
            flush=True,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await agent.close(grace_s)
