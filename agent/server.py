"""The agent's SSH server: public-key auth only, the lanpool subsystem, and SFTP."""

import asyncio
import logging
import os
import signal
import socket

import asyncssh

from agent import __version__
from agent.executors import ProcessExecutor
from agent.home import AgentHome
from agent.jobs import DEFAULT_GRACE_S, JobManager
from agent.keys import load_or_create_host_key
from agent.resources import detect_resources
from agent.session import ChannelSession

log = logging.getLogger(__name__)

SUBSYSTEM = "lanpool"
# aes128-gcm first: 2-2.4x faster streaming than chacha20 on these CPUs (FINDINGS.md).
ENCRYPTION_ALGS = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com", "aes128-ctr"]
DEFAULT_PORT = 7422


class _AgentSSHServer(asyncssh.SSHServer):
    def __init__(self, home: AgentHome) -> None:
        self._home = home
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
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def auth_completed(self) -> None:
        log.info("controller authenticated")


class Agent:
    def __init__(self, home: AgentHome, name: str, host: str, port: int, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.home = home
        self.name = name
        self.host = host
        self.port = port
        self.manager = JobManager(home, ProcessExecutor(), grace_s)
        self.resources = detect_resources()
        self._server: asyncssh.SSHAcceptor | None = None

    async def start(self) -> None:
        self.home.create()
        host_key = load_or_create_host_key(self.home.host_key)
        if not self.home.authorized_keys.exists():
            self.home.authorized_keys.touch(mode=0o600)
        self.manager.load_journal()
        self._server = await asyncssh.create_server(
            lambda: _AgentSSHServer(self.home),
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
        self.home.write_info({
            "pid": os.getpid(), "name": self.name, "host": self.host, "port": self.port,
            "version": __version__, "host_key": host_key.export_public_key().decode().strip(),
        })
        log.info("agent %s listening on %s:%d", self.name, self.host, self.port)

    def _sftp(self, chan: asyncssh.SSHServerChannel) -> asyncssh.SFTPServer:
        # Confined to transfer/: snapshots in, packed artifacts out, nothing else.
        return asyncssh.SFTPServer(chan, chroot=str(self.home.transfer))

    async def _process(self, process: asyncssh.SSHServerProcess) -> None:
        if process.subsystem != SUBSYSTEM:
            process.stderr.write(b"lanpool agent: only the 'lanpool' and 'sftp' subsystems are served\n")
            process.exit(1)
            return
        await ChannelSession(process, self.manager, self.name, self.resources).run()

    async def close(self, grace_s: float) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self.manager.shutdown(grace_s)
        self.home.info_file.unlink(missing_ok=True)


async def serve(home: AgentHome, name: str | None, host: str, port: int, grace_s: float) -> None:
    """Run an agent until SIGINT/SIGTERM."""
    agent = Agent(home, name or socket.gethostname(), host, port, grace_s)
    await agent.start()
    print(f"lanpool agent {agent.name} listening on {agent.host}:{agent.port} (data dir {home.root})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await agent.close(grace_s)
