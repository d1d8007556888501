"""protocol/runtime/ssh_transport.py: no empty SSH_MSG_IGNORE before each packet of an AEAD connection (asyncssh's
countermeasure for CBC's chained IVs), and the countermeasure kept where a cipher without AEAD is
negotiated. Counted on the receiving side, against a real agent (its own process) and in-process."""

import asyncio

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
