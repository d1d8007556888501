"""A job's shell on a direct TLS connection (agent/shell/direct.py, app/shell/direct.py): the
real client on a terminal, then the offer tried by hand from where it must stay shut (a guessed
token, no TLS, a second connection, an impostor's certificate, an offer left unused)."""

import asyncio
import os
import socket
import ssl
import threading
import time

import asyncssh
import pytest

from lanpool.agent.direct import DirectSender, _write_identity
from lanpool.app.runners.direct import DirectUnavailable
from lanpool.app.shell.channel import exec_command
from lanpool.app.shell.direct import connect
from lanpool.protocol import DirectOffer
from lanpool.protocol.shell_direct import parse_offer_line
from tests.harness import start_agent
from tests.test_docker_executor import _stop, submit, wait_for_line
from tests.test_job_shell import _connect
from tests.test_shell_terminal import CLIENT, _shell

WENT_DIRECT = "the terminal goes direct"


@pytest.fixture(autouse=True)
def _not_through_sshd(monkeypatch):
    """The direct TLS path itself: the one-time sshd, tried first where OpenSSH is installed,
    has its own tests (tests/test_shell_sshd.py)."""
    monkeypatch.setenv("LANPOOL_SSHD_SHELLS", "0")


def _started(agent, job_id: str) -> None:
    submit(agent, job_id, ["echo ready", "sleep 120"], "")
    wait_for_line(agent, job_id, "ready")


def _read_until(conn: ssl.SSLSocket, text: bytes, timeout: float = 20) -> bytes:
    conn.settimeout(timeout)
    seen = b""
    while text not in seen:
        part = conn.recv(4096)
        assert part, f"closed before {text!r}; got {seen[-300:]!r}"
        seen += part
    return seen


async def _offer(conn: asyncssh.SSHClientConnection, job_id: str, size=(80, 24)):
    proc = await conn.create_process(exec_command(job_id, [], True), term_type="xterm", term_size=size, encoding=None)
    line = await asyncio.wait_for(proc.stdout.readline(), 20)
    offer = parse_offer_line(line, job_id)
    assert offer is not None, line
    return proc, offer


# -- the real client on a terminal -------------------------------------------------------------------------


def test_ssh_goes_direct_into_a_process_job_output_and_exit_code(agent):
    _started(agent, "dj")
    code, out = _shell(agent, "dj", "echo direct-$((40+2)); exit 9")
    assert (code, b"direct-42" in out) == (9, True)
    assert WENT_DIRECT in agent.log_path.read_text()
    asyncio.run(_stop(agent, "dj", abort=True, grace_s=0))


def test_ssh_goes_direct_into_a_container_job(docker_agent, busybox_image):
    submit(docker_agent, "dbox", ["echo ready", "sleep 120"], busybox_image, env={"MY_VAR": "in-box"})
    wait_for_line(docker_agent, "dbox", "ready")
    code, out = _shell(docker_agent, "dbox", "echo box-$MY_VAR; exit 4")
    assert (code, b"box-in-box" in out) == (4, True)
    assert WENT_DIRECT in docker_agent.log_path.read_text()
    asyncio.run(_stop(docker_agent, "dbox", abort=True, grace_s=0))


def test_a_refused_port_falls_back_to_the_channel(agent, monkeypatch, tmp_path):
    _started(agent, "fb")
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: the connection is refused
    client = tmp_path / "client.py"
    client.write_text(
        "import dataclasses, lanpool.app.shell.direct as sd\n"
        "real = sd.connect\n"
        f"sd.connect = lambda host, offer: real(host, dataclasses.replace(offer, port={port}))\n" + CLIENT
    )
    monkeypatch.setattr("tests.test_shell_terminal.CLIENT", client.read_text())
    code, out = _shell(agent, "fb", "echo channel-$((1+1)); exit 5")
    assert (code, b"channel-2" in out) == (5, True)
    assert "no controller came; withdrawn" in agent.log_path.read_text()
    asyncio.run(_stop(agent, "fb", abort=True, grace_s=0))


def test_a_runner_that_cannot_listen_runs_the_shell_on_the_channel(tmp_path, controller_home):
    """--direct-ports names a taken port: no offer line, the shell's output comes on the channel."""
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    home = tmp_path / "runner-home"
    home.mkdir()
    (home / ".bashrc").write_text("PS1='job$ '\n")
    agent = start_agent(
        tmp_path / "agent", controller_home, extra_args=["--direct-ports", str(port)], extra_env={"HOME": str(home)}
    )
    try:
        _started(agent, "nl")
        code, out = _shell(agent, "nl", "echo listened-not; exit 8")
        assert (code, b"listened-not" in out, b"lanpool-direct" in out) == (8, True, False)
        assert "cannot listen" in agent.log_path.read_text()
        asyncio.run(_stop(agent, "nl", abort=True, grace_s=0))
    finally:
        agent.stop()
        taken.close()


def test_lanpool_direct_shells_0_keeps_the_shell_on_the_channel(agent, monkeypatch):
    _started(agent, "off")
    monkeypatch.setenv("LANPOOL_DIRECT_SHELLS", "0")
    code, out = _shell(agent, "off", "echo plain; exit 3")
    assert (code, b"plain" in out) == (3, True)
    assert WENT_DIRECT not in agent.log_path.read_text()
    asyncio.run(_stop(agent, "off", abort=True, grace_s=0))


# -- by hand: resize, Ctrl-C, and the attacks ----------------------------------------------------------------


def test_resize_and_ctrl_c_reach_the_job_on_the_direct_path(agent):
    _started(agent, "rc")

    async def go() -> int | None:
        async with _connect(agent) as conn:
            proc, offer = await _offer(conn, "rc", size=(80, 24))
            sock = await asyncio.to_thread(connect, agent.host, offer)
            sock.sendall(b"stty size; echo mark-$((1+0))\n")
            assert b"24 80" in await asyncio.to_thread(_read_until, sock, b"mark-1")
            proc.change_terminal_size(132, 43)
            await asyncio.sleep(0.5)
            sock.sendall(b"stty size; echo mark-$((1+1))\n")
            assert b"43 132" in await asyncio.to_thread(_read_until, sock, b"mark-2")
            started = time.monotonic()
            sock.sendall(b"sleep 60\n")
            await asyncio.sleep(1.0)
            sock.sendall(b"\x03")  # Ctrl-C: the job's terminal interrupts the sleep
            sock.sendall(b"echo after-$((2+1))\n")
            await asyncio.to_thread(_read_until, sock, b"after-3")
            assert time.monotonic() - started < 30
            sock.sendall(b"exit 6\n")
            await asyncio.wait_for(proc.wait_closed(), 20)
            sock.close()
            return proc.exit_status

    assert asyncio.run(go()) == 6
    asyncio.run(_stop(agent, "rc", abort=True, grace_s=0))


def _closed_on_us(sock: socket.socket) -> bool:
    """The runner closed this connection having sent nothing (an end, or a reset: both)."""
    try:
        return sock.recv(100) == b""
    except (ssl.SSLError, OSError):
        return True


def _tls_client() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def test_a_guessed_token_and_a_peer_without_tls_get_nothing_and_one_connection_only(agent, tmp_path):
    _started(agent, "atk")
    marker = tmp_path / "pwned"

    async def go() -> None:
        async with _connect(agent) as conn:
            proc, offer = await _offer(conn, "atk")
            # No TLS: a plain TCP peer writes what would be a token and a command; it is closed.
            plain = socket.create_connection((agent.host, offer.port), timeout=10)
            plain.sendall(os.urandom(32) + f"touch {marker}\n".encode())
            assert await asyncio.to_thread(_closed_on_us, plain)
            plain.close()
            # TLS with a guessed token: closed, its bytes never reach the PTY.
            guess = _tls_client().wrap_socket(socket.create_connection((agent.host, offer.port), timeout=10))
            guess.sendall(os.urandom(32) + f"touch {marker}\n".encode())
            assert await asyncio.to_thread(_closed_on_us, guess)
            guess.close()
            # The real controller still gets its shell...
            sock = await asyncio.to_thread(connect, agent.host, offer)
            sock.sendall(b"echo real-$((3+4))\n")
            await asyncio.to_thread(_read_until, sock, b"real-7")
            # ...and the offer served it only: the port no longer takes connections.
            with pytest.raises(OSError):
                socket.create_connection((agent.host, offer.port), timeout=5).close()
            sock.sendall(b"exit 0\n")
            await asyncio.wait_for(proc.wait_closed(), 20)
            sock.close()

    asyncio.run(go())
    time.sleep(0.5)
    assert not marker.exists()
    assert "without its token; closed" in agent.log_path.read_text()
    asyncio.run(_stop(agent, "atk", abort=True, grace_s=0))


def test_an_impostor_certificate_hears_no_token(tmp_path):
    """Whoever holds the offered port with another certificate reads nothing from the controller."""
    _write_identity(tmp_path / "impostor.pem")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "impostor.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    heard: list[bytes] = []

    def serve() -> None:
        raw, _ = listener.accept()
        raw.settimeout(5)
        try:
            with context.wrap_socket(raw, server_side=True) as conn:
                while part := conn.recv(100):
                    heard.append(part)
        except (OSError, ssl.SSLError):
            pass

    thread = threading.Thread(target=serve)
    thread.start()
    offer = DirectOffer("j", listener.getsockname()[1], "ab" * 32, os.urandom(32))  # the runner's digest
    with pytest.raises(DirectUnavailable, match="certificate that is not the runner's"):
        connect("127.0.0.1", offer)
    thread.join(10)
    listener.close()
    assert heard == []


def test_an_offer_expires_unused_and_its_port_closes(tmp_path):
    sender = DirectSender(tmp_path)
    opened = sender.listen_once("127.0.0.1", "expiring")
    assert opened is not None
    once, offer = opened
    assert once.accept(ttl_s=0.5) is None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", offer.port), timeout=5).close()
    once.done()
