"""protocol/runtime/ssh_transport.py: no empty SSH_MSG_IGNORE before each packet of an AEAD connection (asyncssh's
countermeasure for CBC's chained IVs), and the countermeasure kept where a cipher without AEAD is
negotiated. Counted on the receiving side, against a real agent (its own process) and in-process.
And the immediate ACK asked for on every read (TCP_QUICKACK: an OpenSSH client's handshake)."""

import asyncio
import socket
from types import SimpleNamespace

import asyncssh
import pytest
from asyncssh.connection import SSHConnection
from asyncssh.constants import MSG_IGNORE

from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.protocol.runtime import ssh_transport
from lanpool.protocol.wire import ENCRYPTION_ALGS


@pytest.fixture
def ignores(monkeypatch):
    """How many SSH_MSG_IGNORE packets this process's connections received."""
    seen = {"n": 0}
    original = SSHConnection._packet_handlers[MSG_IGNORE]  # asyncssh dispatches through this table

    def counted(self, pkttype, pktid, packet):
        seen["n"] += 1
        return original(self, pkttype, pktid, packet)

    monkeypatch.setitem(SSHConnection._packet_handlers, MSG_IGNORE, counted)
    return seen


async def _exchange(agent, algs: list[str]) -> str:
    """Connect with `algs`, open the lanpool subsystem and close it; the cipher that was negotiated."""
    key = load_or_create_client_key(ControllerHome.default().key)
    async with asyncssh.connect(
        agent.host,
        agent.port,
        username="lanpool",
        client_keys=[key],
        known_hosts=None,
        agent_path=None,
        config=[],
        encryption_algs=algs,
    ) as conn:
        proc = await conn.create_process(subsystem="lanpool", encoding=None)
        proc.stdin.write_eof()
        await asyncio.wait_for(proc.wait(), 20)
        return conn.get_extra_info("send_cipher")


def test_an_aead_connection_to_a_real_agent_brings_no_ignore_packets(agent, ignores):
    assert ssh_transport.install()
    cipher = asyncio.run(_exchange(agent, ENCRYPTION_ALGS))
    assert cipher == "aes128-gcm@openssh.com"
    assert ignores["n"] == 0


def test_a_connection_without_aead_keeps_asyncssh_countermeasure(agent, ignores):
    assert ssh_transport.install()
    cipher = asyncio.run(_exchange(agent, ["aes128-ctr"]))  # lanpool's last choice: CTR and a MAC
    assert cipher == "aes128-ctr"
    assert ignores["n"] > 0  # the agent still sent one before each of its packets


def test_install_is_idempotent_and_both_ends_in_one_process_send_none(ignores):
    assert ssh_transport.install() and ssh_transport.install()
    wrapped = SSHConnection.send_packet

    async def main() -> int:
        key, host_key = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))

        class Server(asyncssh.SSHServer):
            def begin_auth(self, username):
                return True

            def public_key_auth_supported(self):
                return True

            def validate_public_key(self, username, k):
                return k.public_data == key.public_data

        async def handle(process):
            process.stdout.write(b"x" * 300_000)  # many packets each way
            process.exit(0)

        server = await asyncssh.create_server(
            Server,
            "127.0.0.1",
            0,
            server_host_keys=[host_key],
            process_factory=handle,
            encoding=None,
            encryption_algs=ENCRYPTION_ALGS,
        )
        port = server.sockets[0].getsockname()[1]
        try:
            async with asyncssh.connect(
                "127.0.0.1",
                port,
                username="u",
                client_keys=[key],
                known_hosts=None,
                agent_path=None,
                config=[],
                encryption_algs=ENCRYPTION_ALGS,
            ) as conn:
                result = await conn.run("x", encoding=None)
                return len(result.stdout)
        finally:
            server.close()

    assert asyncio.run(main()) == 300_000
    assert SSHConnection.send_packet is wrapped  # installed once, not wrapped again
    assert ignores["n"] == 0


class _Transport:
    def __init__(self, sock):
        self.sock = sock

    def get_extra_info(self, name):
        return self.sock if name == "socket" else None


@pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's")
def test_quick_ack_asks_for_an_immediate_ack_on_tcp_and_leaves_other_sockets():
    # Without it an OpenSSH client (Nagle on without a terminal) waits up to 40 ms for our
    # delayed ACK at two steps of every handshake (ssh_transport's docstring).
    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname()) as client, server.accept()[0] as ours:
            ours.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
            assert ours.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 0
            ssh_transport.quick_ack(SimpleNamespace(_transport=_Transport(ours)))
            assert ours.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 1
            client.sendall(b"x")
    a, b = socket.socketpair()
    with a, b:  # not TCP: nothing asked, nothing raised
        ssh_transport.quick_ack(SimpleNamespace(_transport=_Transport(a)))
    ssh_transport.quick_ack(SimpleNamespace(_transport=None))  # a connection already closed


@pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's")
def test_every_read_of_a_real_connection_asks_for_the_quick_ack(agent, monkeypatch):
    assert ssh_transport.install()
    calls = []
    original = ssh_transport.quick_ack
    monkeypatch.setattr(ssh_transport, "quick_ack", lambda conn: calls.append(conn) or original(conn))
    asyncio.run(_exchange(agent, ENCRYPTION_ALGS))
    assert len(calls) >= 3 and all(isinstance(conn, SSHConnection) for conn in calls)
