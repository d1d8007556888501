"""What an SSH client can ask the agent for: the lanpool subsystem and nothing else
(no SFTP either: files travel inside the subsystem). Real asyncssh clients
against a real agent; after each attack the agent still serves."""

import asyncio
import subprocess
import sys

import asyncssh
import pytest
from asyncssh.packet import Boolean, String, UInt32

from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.app.runners.client import RunnerSession
from lanpool.protocol import (
    PROTOCOL_VERSION,
    Attach,
    ClientHello,
    Error,
    ErrorCode,
    GetStatus,
    Hello,
    PairStart,
    Ping,
    Pong,
    StopJob,
    SubmitJob,
)
from lanpool.protocol.pairing import PAIRING_USER
from tests.harness import lanpool_env
from tests.raw_channel import RawChannel


def _key() -> asyncssh.SSHKey:
    return load_or_create_client_key(ControllerHome.default().key)


def _connect(agent, *, pairing: bool, key: asyncssh.SSHKey | None = None, **options):
    return asyncssh.connect(
        agent.host,
        agent.port,
        username=PAIRING_USER if pairing else "lanpool",
        client_keys=[key or _key()],
        known_hosts=None,
        agent_path=None,
        config=[],
        **options,
    )


def _issue_code(agent) -> None:
    subprocess.run(
        [sys.executable, "-m", "lanpool.app.cli.main", "agent", "pair", "--data-dir", str(agent.data_dir)],
        env=lanpool_env(ControllerHome.default().root),
        capture_output=True,
        check=True,
    )


async def _still_serves(agent) -> None:
    async with await RunnerSession.open(agent.host, agent.port, _key(), None) as session:
        assert session.hello.name == "test-runner"


# -- everything but the lanpool subsystem (SFTP included) is refused ----------------------------------


async def _refusals(agent, pairing: bool) -> list[str]:
    """Each request a client may make beyond the lanpool subsystem; returns those NOT refused."""
    accepted = []
    async with _connect(
        agent, pairing=pairing, key=asyncssh.generate_private_key("ssh-ed25519") if pairing else None
    ) as conn:
        attempts = {
            "exec": lambda: conn.run("cat /etc/hostname"),
            "shell": lambda: conn.create_process(),
            "pty": lambda: conn.create_process(subsystem="lanpool", term_type="xterm"),
            "other subsystem": lambda: conn.create_process(subsystem="netconf"),
            "direct-tcpip": lambda: conn.open_connection("127.0.0.1", agent.port),
            "tcpip-forward": lambda: conn.forward_remote_port("127.0.0.1", 0, "127.0.0.1", agent.port),
            "direct-streamlocal": lambda: conn.open_unix_connection("/run/docker.sock"),
            "streamlocal-forward": lambda: conn.forward_remote_path("/tmp/lanpool-test.sock", "/tmp/x.sock"),
            "tun": lambda: conn.open_tun(),
        }
        # No SFTP for anyone, authorized or not: there is no file API to confine.
        attempts["sftp"] = lambda: conn.start_sftp_client()
        for what, attempt in attempts.items():
            try:
                await attempt()
            except (asyncssh.ChannelOpenError, asyncssh.ChannelListenError, asyncssh.SFTPError):
                continue
            accepted.append(what)
        # Requests on an open lanpool channel: asyncssh's client sends these without asking for
        # a reply, so ask with want_reply as OpenSSH's server answers them.
        proc = await conn.create_process(subsystem="lanpool", encoding=None)
        if await proc.channel._make_request(b"auth-agent-req@openssh.com"):
            accepted.append("agent forwarding")
        if await proc.channel._make_request(
            b"x11-req", Boolean(False), String(b"MIT-MAGIC-COOKIE-1"), String(b"00" * 16), UInt32(0)
        ):
            accepted.append("X11 forwarding")
    return accepted


@pytest.mark.parametrize("pairing", [False, True], ids=["authorized", "pairing-only"])
def test_only_the_lanpool_subsystem_is_served(agent, pairing):
    if pairing:
        _issue_code(agent)
    assert asyncio.run(_refusals(agent, pairing)) == []
    asyncio.run(_still_serves(agent))
    log = agent.log_path.read_text()
    assert "refused an exec request" in log and "refused port forwarding" in log


# -- a pairing-only connection pairs and does nothing else -----------------------------------------


async def _pairing_only(agent) -> None:
    async with _connect(agent, pairing=True, key=asyncssh.generate_private_key("ssh-ed25519")) as conn:
        proc = await conn.create_process(subsystem="lanpool", encoding=None)
        chan = RawChannel(proc)

        assert isinstance(await chan.recv(), Hello)
        chan.send(ClientHello(PROTOCOL_VERSION, "test"))
        for msg in (GetStatus("j-1"), StopJob("j-1"), Attach("j-1"), SubmitJob("j-2", "r", "w", ["cat /etc/hostname"])):
            chan.send(msg)
            reply = await chan.recv()
            assert isinstance(reply, Error) and reply.code == ErrorCode.NOT_PAIRED, (msg, reply)
        chan.send(Ping(5))
        assert await chan.recv() == Pong(5)
        # Pairing for another key than the one this connection proved: refused, connection closed.
        chan.send(PairStart(b"A" + bytes(32), _key().export_public_key().decode().strip()))
        reply = await chan.recv()
        assert isinstance(reply, Error) and "not the key this connection authenticated with" in reply.message
        await asyncio.wait_for(conn.wait_closed(), 5)


def test_a_pairing_connection_may_only_pair(agent):
    _issue_code(agent)
    asyncio.run(_pairing_only(agent))
    assert not (agent.data_dir / "jobs" / "j-2").exists()
    asyncio.run(_still_serves(agent))
