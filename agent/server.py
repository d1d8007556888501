"""The agent's SSH server: public-key auth only, the lanpool subsystem, and SFTP."""

import asyncio
import logging
import os
import signal
import socket
import time
import weakref

import asyncssh

from agent import __version__
from protocol import PROTOCOL_VERSION
from agent.errors import AgentError
from agent.executors import ExecutorChoice, ProcessExecutor
from agent.gpus import GpuAllocator, detect_gpus
from agent.home import AgentHome
from agent.jobs import DEFAULT_GRACE_S, JobManager
from agent.keys import add_authorized_key, key_text, load_or_create_host_key
from agent.mdns import Advertiser, advertise_addresses, txt_record
from agent.pairing import CODE_TTL_S, Pairing
from agent.resources import detect_resources
from agent.session import ChannelSession

log = logging.getLogger(__name__)

SUBSYSTEM = "lanpool"
# aes128-gcm first: 2-2.4x faster streaming than chacha20 on these CPUs (FINDINGS.md).
ENCRYPTION_ALGS = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com", "aes128-ctr"]
DEFAULT_PORT = 7422


class _AgentSSHServer(asyncssh.SSHServer):
    """Public-key auth; while a pairing code is active, also password auth with that
    code, which opens a pairing-only connection."""

    def __init__(self, home: AgentHome, pairing: Pairing, pairing_conns: "weakref.WeakSet") -> None:
        self._home = home
        self._pairing = pairing
        self._pairing_conns = pairing_conns
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        peer = conn.get_extra_info("peername")
        log.info("connection from %s", peer[0] if peer else "?")

    def begin_auth(self, username: str) -> bool:
        # Re-read on every connection, so `app agent authorize` needs no restart.
        keys = self._home.authorized_keys
        if self._conn is not None and keys.exists():
            try:
                self._conn.set_authorized_keys(str(keys))
            except (OSError, ValueError) as exc:
                log.error("cannot read %s: %s", keys, exc)
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return self._pairing.active

    async def validate_password(self, username: str, password: str) -> bool:
        peer = self._conn.get_extra_info("peername") if self._conn else None
        if self._pairing.check(password, peer[0] if peer else "?"):
            self._pairing_conns.add(self._conn)
            return True
        await asyncio.sleep(1.0)  # each wrong guess costs the guesser a second
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def auth_completed(self) -> None:
        log.info("controller authenticated")


def build_executors(mode: str, home: AgentHome, volumes: list[str] | None = None) -> ExecutorChoice:
    """The executors of `--executor MODE`: Docker when asked and an engine answers now."""
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
    return ExecutorChoice(mode, ProcessExecutor(), docker)


def _engine_may_exist() -> bool:
    # Skips importing the Docker SDK (~0.2 s) on machines plainly without an engine.
    return bool(os.environ.get("DOCKER_HOST")) or os.path.exists("/var/run/docker.sock")


class Agent:
    def __init__(self, home: AgentHome, name: str, host: str, port: int, grace_s: float = DEFAULT_GRACE_S,
                 executor: str = "auto", docker_volumes: list[str] | None = None, *, mdns: bool = True,
                 mdns_interfaces: list[str] | None = None, pairing_ttl_s: float = CODE_TTL_S) -> None:
        self.home = home
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
        self._pairing_conns: weakref.WeakSet = weakref.WeakSet()
        self.mdns_addresses = advertise_addresses(host, mdns_interfaces) if mdns else []
        self._advertiser: Advertiser | None = None
        self._host_key_text = ""
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        self.home.create()
        host_key = load_or_create_host_key(self.home.host_key)
        if not self.home.authorized_keys.exists():
            self.home.authorized_keys.touch(mode=0o600)
        executors = await asyncio.to_thread(build_executors, self.executor_mode, self.home, self.docker_volumes)
        gpus = await asyncio.to_thread(detect_gpus)
        self.manager = JobManager(self.home, executors, self.grace_s, GpuAllocator([g.index for g in gpus]))
        self.resources = detect_resources(gpus, executors.kind)
        await self.manager.load_journal()
        self.manager.listeners.append(self._on_jobs_changed)
        self._server = await asyncssh.create_server(
            lambda: _AgentSSHServer(self.home, self.pairing, self._pairing_conns),
            self.host,
            self.port,
            server_host_keys=[host_key],
            process_factory=self._process,
            encoding=None,
            sftp_factory=self._sftp,
            allow_scp=False,
            encryption_algs=ENCRYPTION_ALGS,
            keepalive_interval=15,
            reuse_address=True,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        # "type base64" only: the comment is not part of the key and would break comparisons.
        self._host_key_text = key_text(host_key.export_public_key().decode())
        if not self.home.authorized_keys.read_text().strip() and not self.pairing.active:
            self.pairing.issue()
        self.home.write_info({
            "pid": os.getpid(), "name": self.name, "host": self.host, "port": self.port,
            "version": __version__, "host_key": self._host_key_text, "mdns": self.mdns_addresses,
        })
        if self.mdns_addresses:
            self._advertiser = Advertiser(self.name, self.port, self.mdns_addresses)
            await self._advertiser.start(self._txt())
        log.info("agent %s listening on %s:%d (executor %s)", self.name, self.host, self.port,
                 self.resources.get("executor"))

    def resources_now(self) -> dict[str, int | str]:
        """What the machine has and, right now, what is free: for Hello and the TXT record."""
        usage = self.manager.usage() if self.manager else {}
        cpus, memory = int(self.resources.get("cpus", 0)), int(self.resources.get("memory_mb", 0))
        return {
            **self.resources,
            "gpus_free": usage.get("gpus_free", int(self.resources.get("gpus", 0))),
            "cpus_free": max(0, cpus - usage.get("cpus_reserved", 0)),
            "memory_free_mb": max(0, memory - usage.get("memory_reserved_mb", 0)),
            "running": usage.get("running", 0),
        }

    def _txt(self) -> dict[str, str]:
        return txt_record(self.name, __version__, PROTOCOL_VERSION, self._host_key_text, self.resources_now())

    def _on_jobs_changed(self) -> None:
        if self._advertiser is not None:
            task = asyncio.ensure_future(self._advertiser.update(self._txt()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _pair(self, public_key: str, label: str) -> None:
        """A controller proved the pairing code: authorize its key, spend the code."""
        if not self.pairing.active:
            raise ValueError("the pairing code expired meanwhile: ask for a new one (`app agent pair`)")
        add_authorized_key(self.home.authorized_keys, public_key, comment=f"lanpool:{label}" if label else "")
        self.pairing.consume()
        log.warning("paired with a new controller%s", f" ({label})" if label else "")

    def _sftp(self, chan: asyncssh.SSHServerChannel) -> asyncssh.SFTPServer:
        # Confined to transfer/: snapshots in, packed artifacts out, nothing else.
        # A pairing-only connection gets an empty directory.
        if chan.get_connection() in self._pairing_conns:
            empty = self.home.root / "empty"
            empty.mkdir(exist_ok=True)
            return asyncssh.SFTPServer(chan, chroot=str(empty))
        return asyncssh.SFTPServer(chan, chroot=str(self.home.transfer))

    async def _process(self, process: asyncssh.SSHServerProcess) -> None:
        if process.subsystem != SUBSYSTEM:
            process.stderr.write(b"lanpool agent: only the 'lanpool' and 'sftp' subsystems are served\n")
            process.exit(1)
            return
        pairing_only = process.channel.get_connection() in self._pairing_conns
        await ChannelSession(process, self.manager, self.name, self.resources_now,
                             self._pair if pairing_only else None).run()

    async def close(self, grace_s: float) -> None:
        if self._advertiser is not None:
            await self._advertiser.close()  # unregister first: controllers see it go at once
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self.manager is not None:
            await self.manager.shutdown(grace_s)
        self.home.info_file.unlink(missing_ok=True)


async def serve(home: AgentHome, name: str | None, host: str, port: int, grace_s: float,
                executor: str = "auto", docker_volumes: list[str] | None = None, *, mdns: bool = True,
                mdns_interfaces: list[str] | None = None, pairing_ttl_s: float = CODE_TTL_S) -> None:
    """Run an agent until SIGINT/SIGTERM."""
    agent = Agent(home, name or socket.gethostname(), host, port, grace_s, executor, docker_volumes,
                  mdns=mdns, mdns_interfaces=mdns_interfaces, pairing_ttl_s=pairing_ttl_s)
    await agent.start()
    print(f"lanpool agent {agent.name} listening on {agent.host}:{agent.port} (data dir {home.root}, "
          f"jobs with an image run as {'containers' if agent.resources['executor'] == 'docker' else 'processes'})",
          flush=True)
    print(f"mDNS: {'announced on ' + ', '.join(agent.mdns_addresses) if agent.mdns_addresses else 'off'}", flush=True)
    code = agent.pairing.current()
    if code is not None:
        print(f"pairing code: {code.code} (valid {int(code.expires_at - time.time()) // 60} min): on the controller run "
              f"`app headless runners pair {agent.name} {code.code}`", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await agent.close(grace_s)
