"""Mutual pairing (a PAKE over the short code, bound to both keys) against a real agent,
and the attacks on it: wrong codes, a fake runner, a relay in the middle, replayed
pairing connections, label injection. After each, the agent still serves.
The part with real agents and the CLI (integration); the rest: tests/unit/test_pairing.py."""

import asyncio
import json
import sqlite3
import subprocess
import time

import asyncssh
import pytest

from lanpool.app.errors import RunnerError, RunnerRefused
from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.app.runners.client import RunnerSession
from lanpool.protocol import (
    PROTOCOL_VERSION,
    ClientHello,
    Error,
    FrameReader,
    Hello,
    PairConfirm,
    PairReply,
    PairStart,
    decode_client_message,
    encode_message,
)
from lanpool.protocol import key_text as host_key_text
from lanpool.protocol.pairing import PAIRING_USER, ControllerPake, PairingFailed, RunnerPake
from tests.harness import APP_MODULE, lanpool_env, start_agent
from tests.raw_channel import RawChannel


def _agent_cli(*args: str) -> str:
    return subprocess.run(
        [*APP_MODULE, "agent", *args],
        env=lanpool_env(ControllerHome.default().root),
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _status(agent) -> dict:
    return json.loads(_agent_cli("status", "--data-dir", str(agent.data_dir), "--json"))


def _new_code(agent, ttl_min: float = 15) -> str:
    """`app agent pair` on the runner: a new code replaces the current one."""
    out = _agent_cli("pair", "--data-dir", str(agent.data_dir), "--ttl", str(ttl_min))
    return out.split("pairing code: ")[1].split()[0]


def _authorized(agent) -> list[str]:
    return [line for line in (agent.data_dir / "authorized_keys").read_text().splitlines() if line.strip()]


def _key() -> asyncssh.SSHKey:
    return load_or_create_client_key(ControllerHome.default().key)


def _public(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


async def _pair(host: str, port: int, key: asyncssh.SSHKey, code: str, label: str = "laptop") -> str:
    """The controller's own pairing path (app/runners/client.py)."""
    async with await RunnerSession.open(host, port, key, None, pairing=True) as session:
        return await session.pair(code, _public(key), label)


async def _hello(agent, key: asyncssh.SSHKey) -> Hello:
    """A normal (authorized) controller connection: the agent still serves."""
    async with await RunnerSession.open(agent.host, agent.port, key, None) as session:
        return session.hello


@pytest.fixture
def fresh_agent(tmp_path, controller_home):
    """An agent nobody is authorized on: it shows a pairing code."""
    a = start_agent(tmp_path / "agent", controller_home, authorize=False, name="pair-runner")
    yield a
    a.stop()


def test_mutual_pairing_authorizes_the_key_once_and_pins_the_runner(fresh_agent, cli):
    code = _status(fresh_agent)["pairing_code"]
    assert code and _authorized(fresh_agent) == []

    res = cli("headless", "runners", "pair", fresh_agent.address, code.lower())  # case does not matter
    assert res.returncode == 0, res.stderr
    assert "paired with runner pair-runner" in res.stderr

    (line,) = _authorized(fresh_agent)
    assert line.startswith(host_key_text(_public(_key()))) and "lanpool:" in line
    assert _status(fresh_agent)["pairing_code"] is None  # used once
    # The controller pinned the key it saw on the pairing connection (the one the PAKE bound) and trusts it.
    host_key = (fresh_agent.data_dir / "host_key.pub").read_text()
    with sqlite3.connect(ControllerHome.default().db) as db:
        row = db.execute("SELECT host_key, trusted FROM runners WHERE name = 'pair-runner'").fetchone()
    assert row == (host_key_text(host_key), 1)
    assert asyncio.run(_hello(fresh_agent, _key())).name == "pair-runner"


def test_already_paired_controller_does_not_use_up_a_new_code(fresh_agent):
    key = _key()
    assert (
        asyncio.run(_pair(fresh_agent.host, fresh_agent.port, key, _status(fresh_agent)["pairing_code"]))
        == "pair-runner"
    )
    code2 = _new_code(fresh_agent)
    assert asyncio.run(_pair(fresh_agent.host, fresh_agent.port, key, code2)) == "pair-runner"
    assert _status(fresh_agent)["pairing_code"] == code2  # still there for the controller it was meant for
    assert len(_authorized(fresh_agent)) == 1


def test_no_active_code_refuses_pairing_connections(fresh_agent):
    asyncio.run(_pair(fresh_agent.host, fresh_agent.port, _key(), _status(fresh_agent)["pairing_code"]))
    other = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(RunnerRefused, match="no active pairing code"):
        asyncio.run(_pair(fresh_agent.host, fresh_agent.port, other, "ABCD-EFGH"))
    assert len(_authorized(fresh_agent)) == 1


async def _raw_attempt(agent, key: asyncssh.SSHKey, code: str, local: str = "127.0.0.1", label: str = "raw") -> str:
    """A pairing attempt from the address `local`: 'paired', 'wrong' or the agent's refusal."""
    async with asyncssh.connect(
        agent.host,
        agent.port,
        username=PAIRING_USER,
        client_keys=[key],
        known_hosts=None,
        agent_path=None,
        config=[],
        local_addr=(local, 0),
    ) as conn:
        host_key = host_key_text(conn.get_server_host_key().export_public_key().decode())
        proc = await conn.create_process(subsystem="lanpool", encoding=None)
        chan = RawChannel(proc)

        assert isinstance(await chan.recv(), Hello)
        chan.send(ClientHello(PROTOCOL_VERSION, "test"))
        pake = ControllerPake(code, _public(key), host_key)
        chan.send(PairStart(pake.message, _public(key)))
        reply = await chan.recv()
        if isinstance(reply, Error):
            return reply.message
        try:
            proof = pake.check_runner(reply.pake, reply.confirm)
        except PairingFailed:
            return "wrong"
        proc.stdin.write(encode_message(PairConfirm(proof, label)))  # as sent, not cleaned as app/ does
        reply = await chan.recv()
        return "paired" if not isinstance(reply, Error) else reply.message


def test_wrong_code_is_one_line(fresh_agent, cli):
    res = cli("headless", "runners", "pair", fresh_agent.address, "AAAA-BBBB")
    assert res.returncode == 3
    assert res.stderr.strip().splitlines() == [
        f"app: error: runner {fresh_agent.address} could not prove the pairing code: wrong code, or someone in "
        "the middle"
    ]
    assert _authorized(fresh_agent) == []


def test_wrong_codes_lock_out_only_their_address(fresh_agent):
    code = _status(fresh_agent)["pairing_code"]
    guesser = asyncssh.generate_private_key("ssh-ed25519")
    t0 = time.monotonic()
    for guess in ("AAAA-AAAA", "BBBB-BBBB", "CCCC-CCCC", "DDDD-DDDD", "EEEE-EEEE"):
        assert asyncio.run(_raw_attempt(fresh_agent, guesser, guess, "127.0.0.2")) == "wrong"
    assert time.monotonic() - t0 >= 4, "each guess after a wrong one waits a second"
    # That address is locked now, even with the right code...
    refused = asyncio.run(_raw_attempt(fresh_agent, guesser, code, "127.0.0.2"))
    assert "locked" in refused and "127.0.0.2" in refused
    # ...and nobody else is.
    assert asyncio.run(_pair(fresh_agent.host, fresh_agent.port, _key(), code)) == "pair-runner"
    assert _authorized(fresh_agent)[0].startswith(host_key_text(_public(_key())))
    log = fresh_agent.log_path.read_text()
    assert "wrong pairing code from 127.0.0.2" in log and "pairing locked for 60s for that address" in log
    assert asyncio.run(_hello(fresh_agent, _key())).name == "pair-runner"


class _AnyKey(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return True


async def _serve(handler) -> tuple[asyncssh.SSHAcceptor, int, str]:
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.create_server(
        _AnyKey, "127.0.0.1", 0, server_host_keys=[host_key], encoding=None, process_factory=handler
    )
    return server, server.sockets[0].getsockname()[1], host_key_text(host_key.export_public_key().decode())


async def _fake_runner_session(label: str) -> tuple[list, bytes, str]:
    """A runner that knows no code guesses one, answers correctly otherwise; returns
    what the controller sent it, and the controller's error."""
    received: list = []
    raw = bytearray()

    async def handler(process: asyncssh.SSHServerProcess) -> None:
        process.stdout.write(encode_message(Hello(PROTOCOL_VERSION, "9", "gpu-box", {"gpus": 8})))
        reader = FrameReader()
        while data := await process.stdin.read(65536):
            raw.extend(data)
            for body in reader.feed(data):
                msg = decode_client_message(body)
                received.append(msg)
                if isinstance(msg, PairStart):
                    pake = RunnerPake("ZZZZ-ZZZZ", msg.public_key, own_key, msg.pake)
                    process.stdout.write(encode_message(PairReply(pake.message, pake.proof)))
        process.exit(0)

    server, port, own_key = await _serve(handler)
    try:
        with pytest.raises(RunnerRefused) as err:
            await _pair("127.0.0.1", port, _key(), "HJKM-NPQR", label=label)
        await asyncio.sleep(0.2)  # whatever the controller might still send arrives
    finally:
        server.close()
    return received, bytes(raw), str(err.value)


def test_a_fake_runner_gets_nothing_usable(controller_home):
    received, raw, error = asyncio.run(_fake_runner_session(label="secret-laptop-name"))
    assert error.endswith("could not prove the pairing code: wrong code, or someone in the middle")
    # The controller sent its hello and its PAKE half (nothing to test a guess of the code
    # against offline), and stopped: no proof, no label.
    assert [type(m) for m in received] == [ClientHello, PairStart]
    assert b"secret-laptop-name" not in raw


async def _relay_session(agent, rewrite_key: bool) -> str:
    """A relay between the controller and the real agent, with its own host key and its
    own client key (its upstream leaves from 127.0.0.3). Returns the controller's error."""
    relay_key = asyncssh.generate_private_key("ssh-ed25519")

    async def handler(process: asyncssh.SSHServerProcess) -> None:
        async with asyncssh.connect(
            agent.host,
            agent.port,
            username=PAIRING_USER,
            client_keys=[relay_key],
            known_hosts=None,
            agent_path=None,
            config=[],
            local_addr=("127.0.0.3", 0),
        ) as up:
            upstream = await up.create_process(subsystem="lanpool", encoding=None)

            async def down() -> None:
                while data := await upstream.stdout.read(65536):
                    process.stdout.write(data)

            task = asyncio.create_task(down())
            reader = FrameReader()
            while data := await process.stdin.read(65536):
                for body in reader.feed(data):
                    msg = decode_client_message(body)
                    if isinstance(msg, PairStart) and rewrite_key:  # else the agent sees the key mismatch
                        msg = PairStart(msg.pake, _public(relay_key))
                    upstream.stdin.write(encode_message(msg))
            task.cancel()
        process.exit(0)

    server, port, _ = await _serve(handler)
    try:
        with pytest.raises(RunnerRefused) as err:
            await _pair("127.0.0.1", port, _key(), _status(agent)["pairing_code"])
    finally:
        server.close()
    return str(err.value)


@pytest.mark.parametrize("rewrite_key", [False, True], ids=["relay-forwards", "relay-rewrites-key"])
def test_a_relay_in_the_middle_cannot_complete_pairing(fresh_agent, rewrite_key):
    code = _status(fresh_agent)["pairing_code"]
    error = asyncio.run(_relay_session(fresh_agent, rewrite_key))
    if rewrite_key:  # the PAKE identities differ on the two sides: no proof verifies
        assert error.endswith("could not prove the pairing code: wrong code, or someone in the middle")
    else:
        assert "not the key this connection authenticated with" in error
    assert _authorized(fresh_agent) == []
    assert _status(fresh_agent)["pairing_code"] == code  # not used up by the relay
    # The real controller, connecting directly, pairs with the same code.
    assert asyncio.run(_pair(fresh_agent.host, fresh_agent.port, _key(), code)) == "pair-runner"
    assert asyncio.run(_hello(fresh_agent, _key())).name == "pair-runner"


async def _replay(agent) -> None:
    key = _key()
    early = await RunnerSession.open(agent.host, agent.port, key, None, pairing=True)  # while code 1 is active
    code2 = _new_code(agent)  # code 1 replaced, meant for someone else
    with pytest.raises(RunnerRefused, match="expired or was replaced"):
        await early.pair(code2, _public(key), "replay")
    await asyncio.wait_for(early.conn.wait_closed(), 5)  # and the agent closed that connection
    assert _authorized(agent) == []
    assert await _pair(agent.host, agent.port, key, code2) == "pair-runner"  # a new connection can


def test_a_connection_opened_for_one_code_cannot_complete_the_next(fresh_agent):
    asyncio.run(_replay(fresh_agent))
    assert asyncio.run(_hello(fresh_agent, _key())).name == "pair-runner"


async def _outlive(agent) -> None:
    key = _key()
    _new_code(agent, ttl_min=0.05)  # 3 s
    session = await RunnerSession.open(agent.host, agent.port, key, None, pairing=True)
    t0 = time.monotonic()
    await asyncio.wait_for(session.conn.wait_closed(), 10)  # closed by the agent when its code expires
    assert time.monotonic() - t0 < 4
    code2 = _new_code(agent)
    with pytest.raises(RunnerError, match="lost"):  # the closed connection completes nothing
        await session.pair(code2, _public(key), "late")
    assert await _pair(agent.host, agent.port, key, code2) == "pair-runner"


def test_pairing_connections_close_when_their_code_expires(fresh_agent):
    asyncio.run(_outlive(fresh_agent))
    assert "its code expired" in fresh_agent.log_path.read_text()


def test_label_cannot_add_lines_to_authorized_keys(fresh_agent):
    evil_key = asyncssh.generate_private_key("ssh-ed25519")
    evil = _public(evil_key)
    code = _status(fresh_agent)["pairing_code"]
    # Control characters: the message is refused as it is decoded.
    refused = asyncio.run(_raw_attempt(fresh_agent, _key(), code, label=f"laptop\n{evil} evil\r\n"))
    assert "control or invisible characters" in refused
    assert _authorized(fresh_agent) == []
    # Line and paragraph separators, odd spaces: invisible, refused the same way.
    refused = asyncio.run(_raw_attempt(fresh_agent, _key(), code, label=f"laptop\u2028{evil}\u2029\u00a0x"))
    assert "control or invisible characters" in refused
    # Quotes, an option and a key in plain text: cleaned by the runner into one short comment.
    label = f'laptop {evil} command="sh" {evil}'
    assert asyncio.run(_raw_attempt(fresh_agent, _key(), code, label=label)) == "paired"
    (line,) = _authorized(fresh_agent)  # exactly one line
    assert line.startswith(host_key_text(_public(_key())) + " lanpool:laptop ssh-ed25519 ")
    assert '"' not in line and len(line.split(" ", 2)[2]) <= len("lanpool:") + 64
    # The key smuggled into the label cannot log in; the paired one can.
    with pytest.raises(asyncssh.PermissionDenied):
        asyncio.run(_hello_raw(fresh_agent, evil_key))
    assert asyncio.run(_hello(fresh_agent, _key())).name == "pair-runner"


async def _hello_raw(agent, key: asyncssh.SSHKey) -> None:
    async with asyncssh.connect(
        agent.host, agent.port, username="lanpool", client_keys=[key], known_hosts=None, agent_path=None, config=[]
    ):
        pass


def test_probing_an_unpaired_agent_is_not_an_error_in_its_log(fresh_agent, cli, make_project):
    """Controllers that do not know it yet reach it (a run, the runners list, a bare TCP check,
    a key it does not know): all normal for a fresh agent, none an ERROR in its log."""
    import socket

    project = make_project("workflows:\n  - name: a\n    commands: [echo a]\n")
    for _ in range(2):
        assert cli("headless", "run", "a", "--runner", fresh_agent.address, cwd=project).returncode == 3
        cli("headless", "runners", check=True)
        socket.create_connection(("127.0.0.1", fresh_agent.port), timeout=10).close()

    async def stranger() -> None:
        with pytest.raises(asyncssh.PermissionDenied):
            await asyncssh.connect(
                "127.0.0.1",
                fresh_agent.port,
                username="lanpool",
                known_hosts=None,
                client_keys=[asyncssh.generate_private_key("ssh-ed25519")],
                agent_path=None,
            )

    asyncio.run(stranger())
    assert fresh_agent.proc.poll() is None
    time.sleep(0.5)  # the agent logs a closed connection after the client has gone
    log = fresh_agent.log_path.read_text()
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]
