"""The agent's SSH surface: who may connect, and what a connection may open.

Public-key auth only: the normal user needs a key in authorized_keys, and the
connection is then that controller's (its Owner: it reaches its own jobs only,
agent/jobs/owner.py); PAIRING_USER is accepted with any key while a pairing code is
active, and such a connection is pairing-only (agent/ssh/pairing.py). Session channels carry the
lanpool subsystem, or for an authorized controller an exec into a RUNNING job
(agent/shell/into_job.py); direct-tcpip reaches a port a running job declared
(agent/shell/ports.py). Everything else (shell, SFTP/scp, agent/X11/remote
forwarding, other channel types) is refused and logged.

What a channel then does is the agent's (`AgentSide.serve_channel`,
agent.daemon.Agent): this module imports nothing of the agent's lifecycle.
"""

import asyncio
import logging
import time
import weakref
from typing import Protocol

import asyncssh
from asyncssh.connection import SSHConnection
from asyncssh.misc import TermModes, TermSize

from lanpool.agent.gang.hub import GangHub
from lanpool.agent.home import AgentHome
from lanpool.agent.jobs.manager import JobManager
from lanpool.agent.jobs.owner import Owner
from lanpool.agent.shell.into_job import ShellRequest, parse_exec
from lanpool.agent.shell.ports import Forward, declaring_job, forward_to
from lanpool.agent.ssh.keys import ControllerKeys
from lanpool.agent.ssh.pairing import Pairing, PairingGrant, PairingState
from lanpool.protocol import ENCRYPTION_ALGS, GANG_SUBSYSTEM, GANG_USER_PREFIX, SUBSYSTEM, key_text
from lanpool.protocol.pairing import PAIRING_USER
from lanpool.protocol.runtime.ssh_transport import install as install_ssh_transport

log = logging.getLogger(__name__)

install_ssh_transport()  # no ignore packet before each AEAD packet (protocol/runtime/ssh_transport.py)

# Keyed by any connection: a channel knows its connection only as an SSHConnection.
Grants = weakref.WeakKeyDictionary[SSHConnection, PairingGrant]


class AgentSide(Protocol):
    """What the SSH server asks of the agent (agent.daemon.Agent)."""

    home: AgentHome
    pairing: Pairing
    manager: JobManager | None
    # Pairing-only connections, with the key and code each authenticated with.
    pairing_grants: Grants
    # Controllers' connections, with the controller each authenticated as (what owns jobs).
    owners: weakref.WeakKeyDictionary[SSHConnection, Owner]
    # Gang-only connections (agent.gang.hub): user gang-<id>, password = the gang's token.
    gang_grants: weakref.WeakKeyDictionary[SSHConnection, str]
    gang: GangHub | None

    async def serve_channel(self, process: asyncssh.SSHServerProcess[bytes]) -> None: ...


async def listen(agent: AgentSide, host: str, port: int, host_key: asyncssh.SSHKey) -> asyncssh.SSHAcceptor:
    """The SSH server on host:port, with every door this module does not open shut in asyncssh too."""
    return await asyncssh.create_server(
        lambda: AgentSSHServer(agent),
        host,
        port,
        server_host_keys=[host_key],
        encoding=None,
        # Sessions come from AgentSSHServer.session_requested (LanpoolSession).
        allow_scp=False,
        # Larger SSH packets and window than asyncssh's 32 KiB / 2 MiB: blobs come in at the
        # link's speed instead of a Python round of packet work per 32 KiB.
        window=8 * 1024 * 1024,
        max_pktsize=256 * 1024,
        agent_forwarding=False,
        x11_forwarding=False,
        allow_pty=True,  # for exec into a job only: see LanpoolSession.pty_requested
        # No line editor: with encoding=None it never edits, but it wraps every session channel
        # (a proxy per call on each keystroke and its echo); the job's PTY does the editing.
        line_editor=False,
        password_auth=True,  # for gang-<id> users only (AgentSSHServer.password_auth_supported)
        kbdint_auth=False,
        host_based_auth=False,
        gss_host=None,
        encryption_algs=ENCRYPTION_ALGS,
        keepalive_interval=15,
        reuse_address=True,
    )


class LanpoolSession(asyncssh.SSHServerProcess[bytes]):
    """A session channel: the lanpool subsystem (without a PTY), or, for an authorized
    controller, `lanpool-exec JOB_ID [-- ARGV]` into a running job (with a PTY if asked).
    No SFTP, no shell, no other exec (so no scp)."""

    def __init__(self, agent: AgentSide, conn: asyncssh.SSHServerConnection) -> None:
        super().__init__(agent.serve_channel, None, 0, False)  # no SFTP factory, no scp
        self._agent = agent
        self._peer_conn = conn
        self._pty = False
        self.shell_request: ShellRequest | None = None

    def _authorized(self) -> bool:
        return self._peer_conn in self._agent.owners

    def shell_requested(self) -> bool:
        log.warning("refused a shell request from %s", peer_name(self._peer_conn))
        return False

    def exec_requested(self, command: str) -> bool:
        request = parse_exec(command) if self._authorized() else None
        if request is None:
            log.warning("refused an exec request from %s", peer_name(self._peer_conn))
            return False
        log.info("exec session from %s into job %s: %s", peer_name(self._peer_conn), request.job_id, request.describe())
        self.shell_request = request
        return super().exec_requested(command)

    def pty_requested(self, term_type: str, term_size: TermSize, term_modes: TermModes) -> bool:
        # Only an exec into a job may follow (subsystem_requested refuses the subsystem on a PTY).
        self._pty = self._authorized()
        if not self._pty:
            log.warning("refused a PTY request from %s", peer_name(self._peer_conn))
        return self._pty

    def subsystem_requested(self, subsystem: str) -> bool:
        # A gang connection may open its barrier and nothing else; no other connection may open that.
        wanted = GANG_SUBSYSTEM if self._peer_conn in self._agent.gang_grants else SUBSYSTEM
        if subsystem == wanted and not self._pty:
            return super().subsystem_requested(subsystem)
        log.warning("refused the %r subsystem%s", subsystem[:64], " on a PTY" if self._pty else "")
        return False


def peer_name(conn: asyncssh.SSHServerConnection) -> str:
    peer = conn.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if peer else "?"


class AgentSSHServer(asyncssh.SSHServer):
    """Public-key auth. The normal user needs a key in authorized_keys; PAIRING_USER
    is accepted with any key while a pairing code is active, and such a connection
    is pairing-only (agent/ssh/pairing.py), bound to that code."""

    def __init__(self, agent: AgentSide) -> None:
        self._agent = agent
        self._conn: asyncssh.SSHServerConnection | None = None
        self._peer = "?"
        self._offered: tuple[str, PairingState] | None = None  # last pairing key accepted, with its code
        self._expiry: asyncio.TimerHandle | None = None
        self._gang_user = False  # the username is gang-<id>: password (the gang token) only
        self._owner: Owner | None = None  # the controller whose key was last found authorized
        self._controllers: ControllerKeys | None = None  # authorized_keys, read as auth begins

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
        self._gang_user = username.startswith(GANG_USER_PREFIX)
        if self._gang_user:
            self._conn.set_authorized_keys(None)  # no key logs in as a gang member
            return True
        if username == PAIRING_USER:
            # No authorized_keys here: every key goes through validate_public_key,
            # which is how the key the client proves is known.
            self._conn.set_authorized_keys(None)
            return True
        # No authorized_keys handed to asyncssh either: every key comes to validate_public_key,
        # which is how this server knows which controller proved itself (its jobs' owner).
        self._owner = None
        self._conn.set_authorized_keys(None)
        self._controllers = ControllerKeys.read(self._agent.home.authorized_keys)  # once a connection, as asyncssh did
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        # asyncssh calls this for a key offered, and again for the signed request right before
        # checking its signature: the last key recorded before auth_completed is the proven one.
        if self._gang_user:
            return False
        if username != PAIRING_USER:
            self._owner = self._controllers.owner(key, self._peer) if self._controllers else None
            return self._owner is not None
        state = self._agent.pairing.current()
        if state is None:
            log.info("pairing connection from %s refused: no pairing code is active", self._peer)
            return False
        # asyncssh calls this again for the signed request right before checking the
        # signature: the last key recorded before auth_completed is the proven one.
        self._offered = (key_text(key.export_public_key().decode()), state)
        return True

    def password_auth_supported(self) -> bool:
        return self._gang_user

    def validate_password(self, username: str, password: str) -> bool:
        gang = self._agent.gang
        if not self._gang_user or gang is None:
            return False
        return gang.authorize(username[len(GANG_USER_PREFIX) :], password, self._peer)

    def kbdint_auth_supported(self) -> bool:
        return False

    def host_based_auth_supported(self) -> bool:
        return False

    def auth_completed(self) -> None:
        assert self._conn is not None
        username = str(self._conn.get_extra_info("username"))
        if self._gang_user:
            self._agent.gang_grants[self._conn] = username[len(GANG_USER_PREFIX) :]
            log.info("gang-only connection from %s for gang %s", self._peer, username[len(GANG_USER_PREFIX) :])
            return
        if username != PAIRING_USER:
            assert self._owner is not None
            self._agent.owners[self._conn] = self._owner
            label = f" ({self._owner.label})" if self._owner.label else ""
            log.info("controller %s%s authenticated from %s", self._owner.fingerprint, label, self._peer)
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

    def session_requested(self) -> asyncssh.SSHServerSession[bytes]:
        assert self._conn is not None, "sessions come after connection_made"
        # A pairing-only connection is told apart inside the subsystem (it may only pair).
        return LanpoolSession(self._agent, self._conn)

    # Every other channel type and global request: refused, and logged.
    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> Forward | bool:
        assert self._conn is not None
        manager = self._agent.manager
        job = None
        owner = self._agent.owners.get(self._conn)
        if owner is not None and manager:
            job = declaring_job(manager, dest_host, dest_port, owner)
        if job is None:
            log.warning(
                "refused port forwarding (direct-tcpip) to %s:%d from %s: not a port a running job declared",
                dest_host[:64],
                dest_port,
                self._peer,
            )
            return False
        log.info("forwarding port %d of job %s to %s", dest_port, job.record.job_id, self._peer)
        return forward_to(self._conn, job, dest_port)

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
