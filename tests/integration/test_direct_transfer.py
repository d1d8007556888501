"""Artifacts on a TLS connection of their own, offered over SSH (agent/direct.py,
app/runners/direct.py).

Happy path against a real agent: a job's files come on the direct connection byte-exact;
LANPOOL_DIRECT_TRANSFERS=0 and an agent started with --no-direct-transfers keep them on the
channel; a runner whose offered port cannot be reached (a firewall) still delivers, on the
channel. Attacks, with the real sender and the real reader on loopback: a LAN peer that
connects first, without the token or without TLS, gets nothing and does not stop the
transfer; the controller sends its token to no certificate but the offered one; what comes
on the direct connection goes through the same checks as the channel (a path out of the
store, a frame past the bound, a stream cut short).
"""

import asyncio
import contextlib
import hashlib
import json
import socket
import ssl
import struct
import threading
import time
from pathlib import Path

import pytest

import lanpool.app.runners.direct as direct_pull
from lanpool.agent.direct import DirectSender, _write_identity
from lanpool.app.controller import Controller
from lanpool.app.errors import ArtifactsRefused, RunnerError, RunnerProtocolError
from lanpool.app.runners.direct import DirectUnavailable, fetch
from lanpool.app.transfer.pull import Writer
from lanpool.protocol import ArtifactData, ArtifactEnd, ArtifactsSent, DirectOffer, JobState, encode_message
from lanpool.protocol.framing import MAX_FRAME_BYTES

WORKFLOWS = (
    "workflows:\n  - name: big\n    commands:\n"
    "      - python3 -c \"import os; os.makedirs('out', exist_ok=True); open('out/big.bin','wb').write(os.urandom(5000000))\"\n"
    "      - echo made > out/note.txt\n"
    "    artifacts: [out]\n"
)


def _pulled_equals_the_jobs(cli, agent, ctl_home: Path) -> str:
    [entry] = json.loads(cli("headless", "status", "--json", check=True).stdout)
    [row] = entry["jobs"]
    assert row["status"] == "DONE", row
    workspace = agent.data_dir / "jobs" / row["job"] / "workspace"
    store = ctl_home / "artifacts" / row["job"]
    for name in ("out/big.bin", "out/note.txt"):
        assert (store / name).read_bytes() == (workspace / name).read_bytes(), name
    return str(row["job"])


def test_a_jobs_artifacts_come_on_the_direct_connection_byte_exact(agent, cli, make_project, controller_home):
    project = make_project(WORKFLOWS)
    cli("headless", "run", "big", "--runner", agent.address, cwd=project, check=True)
    job = _pulled_equals_the_jobs(cli, agent, controller_home)
    assert f"direct transfer of job {job}: " in agent.log_tail(20_000)


def test_LANPOOL_DIRECT_TRANSFERS_0_keeps_them_on_the_channel(agent, cli, make_project, controller_home, monkeypatch):
    monkeypatch.setenv(direct_pull.DIRECT_ENV, "0")
    project = make_project(WORKFLOWS)
    cli("headless", "run", "big", "--runner", agent.address, cwd=project, check=True)
    _pulled_equals_the_jobs(cli, agent, controller_home)
    assert "direct transfer" not in agent.log_tail(20_000)


def test_an_agent_without_direct_transfers_offers_none(tmp_path, cli, make_project, controller_home):
    from tests.harness import start_agent

    agent = start_agent(tmp_path / "nodirect", controller_home, extra_args=["--no-direct-transfers"])
    try:
        project = make_project(WORKFLOWS)
        cli("headless", "run", "big", "--runner", agent.address, cwd=project, check=True)
        _pulled_equals_the_jobs(cli, agent, controller_home)
        assert "direct transfer" not in agent.log_tail(20_000)
    finally:
        agent.stop()


def test_an_unreachable_offered_port_falls_back_to_the_channel(agent, cli, make_project, controller_home, monkeypatch):
    """A firewall that lets only the SSH port through: the connection is refused, nothing was
    sent or taken, and the pull goes on the channel."""
    project = make_project(WORKFLOWS)
    out = cli("headless", "run", "big", "--runner", agent.address, "-d", "--json", cwd=project, check=True)
    job_id = json.loads(out.stdout.strip().splitlines()[-1])["jobs"][0]["job_id"]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: a real ECONNREFUSED
    real_connect = socket.create_connection
    tried: list[int] = []

    def firewalled(address, *args, **kwargs):
        tried.append(address[1])
        return real_connect((address[0], closed_port), *args, **kwargs)

    monkeypatch.setattr(direct_pull.socket, "create_connection", firewalled)
    ctl = Controller()
    try:
        job = asyncio.run(asyncio.wait_for(ctl.follow(job_id, follow=True), 60))
        assert job.state is JobState.DONE and job.artifacts_pulled == 1, job.error
    finally:
        ctl.close()
    assert tried, "the controller did not try the direct connection"
    _pulled_equals_the_jobs(cli, agent, controller_home)


# -- attacks on loopback: the real sender, the real reader ----------------------------------------------


def _frames(*msgs) -> list[bytes]:
    return [encode_message(m) for m in msgs]


def _offer(tmp_path: Path, frames: list[bytes]) -> tuple[DirectSender, DirectOffer]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    sender = DirectSender(tmp_path)
    offer = sender.offer("127.0.0.1", "job-1", lambda: (f for f in frames))
    assert offer is not None
    return sender, offer


def _collect(offer: DirectOffer) -> list:
    got: list = []
    fetch("127.0.0.1", offer, got.extend, "runner r", 10.0)
    return got


def test_a_peer_without_the_token_gets_nothing_and_the_transfer_goes_on(tmp_path):
    secret = b"model weights " * 1000
    sender, offer = _offer(tmp_path, _frames(ArtifactData("job-1", "m.bin", 0, secret), ArtifactsSent("job-1")))
    try:
        # 1: TLS, but a token guessed: closed without a byte of the stream.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with context.wrap_socket(socket.create_connection(("127.0.0.1", offer.port), timeout=10)) as peer:
            peer.sendall(b"x" * len(offer.token))
            received = b""
            try:
                while chunk := peer.recv(65536):
                    received += chunk
            except (OSError, ssl.SSLError):
                pass
        assert received == b""
        # 2: no TLS at all, and gone.
        with socket.create_connection(("127.0.0.1", offer.port), timeout=10) as plain:
            plain.sendall(b"GET / HTTP/1.0\r\n\r\n")
        # The real controller still gets all of it.
        got = _collect(offer)
        assert [type(m) for m in got] == [ArtifactData, ArtifactsSent] and got[0].data == secret
    finally:
        sender.close()


def test_connections_without_the_token_do_not_use_the_offer_up(tmp_path):
    """A LAN peer (or a scanner) that connects first, many times, some silent: the real
    controller, coming last, still gets its transfer. Each connection is checked on its own,
    so a silent one holds no other up."""
    sender, offer = _offer(tmp_path, _frames(ArtifactsSent("job-1")))
    silent = [socket.create_connection(("127.0.0.1", offer.port), timeout=10) for _ in range(3)]
    try:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        for _ in range(12):  # more than the 8 tries an offer used to allow
            with context.wrap_socket(socket.create_connection(("127.0.0.1", offer.port), timeout=10)) as peer:
                peer.sendall(b"x" * len(offer.token))
                with contextlib.suppress(OSError, ssl.SSLError):
                    assert peer.recv(65536) == b""
        started = time.monotonic()
        assert [type(m) for m in _collect(offer)] == [ArtifactsSent]
        assert time.monotonic() - started < 10  # not behind the silent ones (3 x 5 s of handshake time)
    finally:
        for s in silent:
            s.close()
        sender.close()


def test_the_offer_serves_one_transfer_only(tmp_path):
    sender, offer = _offer(tmp_path, _frames(ArtifactsSent("job-1")))
    try:
        assert [type(m) for m in _collect(offer)] == [ArtifactsSent]
        with pytest.raises(DirectUnavailable):  # the listener is closed: even the token is no use now
            _collect(offer)
    finally:
        sender.close()


def test_the_controller_sends_its_token_to_no_other_certificate(tmp_path):
    """An impostor on the offered port (with a certificate of its own) learns nothing."""
    _sender, real = _offer(tmp_path / "real", [])
    pem = tmp_path / "impostor.pem"
    _write_identity(pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pem)
    listener = socket.create_server(("127.0.0.1", 0))
    heard: list[bytes] = []

    def impostor() -> None:
        conn, _ = listener.accept()
        conn.settimeout(10)
        try:
            with context.wrap_socket(conn, server_side=True) as tls:
                data = b""
                while chunk := tls.recv(4096):
                    data += chunk
                heard.append(data)
        except (OSError, ssl.SSLError):
            heard.append(b"")

    thread = threading.Thread(target=impostor)
    thread.start()
    offer = DirectOffer("job-1", listener.getsockname()[1], real.cert_sha256, real.token)
    with pytest.raises(DirectUnavailable, match="not the runner's"):
        _collect(offer)
    thread.join(10)
    listener.close()
    _sender.close()
    assert heard == [b""]


def _writer(tmp_path: Path) -> tuple[Writer, Path]:
    staging = tmp_path / "store" / "job-1.part"
    staging.mkdir(parents=True)
    return Writer(staging, "", {"ok.bin": 3}, {"ok.bin": 0}), staging


def test_a_path_out_of_the_store_on_the_direct_connection_is_refused(tmp_path):
    writer, staging = _writer(tmp_path)
    sender, offer = _offer(tmp_path, _frames(ArtifactData("job-1", "../../escape.txt", 0, b"pwn")))
    try:
        with pytest.raises(ArtifactsRefused):
            fetch("127.0.0.1", offer, writer.take, "runner r", 10.0)
    finally:
        writer.close()
        sender.close()
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "store" / "escape.txt").exists()
    assert list(staging.iterdir()) == []


def test_a_frame_past_the_bound_is_refused_before_it_is_read(tmp_path):
    head = struct.pack(">I", MAX_FRAME_BYTES + 1)
    sender, offer = _offer(tmp_path, [head + b"\x00" * 64])
    try:
        with pytest.raises(RunnerProtocolError, match="frame of"):
            _collect(offer)
    finally:
        sender.close()


def test_a_stream_cut_short_is_a_lost_connection_and_keeps_what_arrived(tmp_path):
    writer, staging = _writer(tmp_path)
    first = encode_message(ArtifactData("job-1", "ok.bin", 0, b"ab"))
    sender, offer = _offer(tmp_path, [first, encode_message(ArtifactEnd("job-1", "ok.bin", 3))[:7]])
    try:
        with pytest.raises(RunnerError, match="middle of a frame"):
            fetch("127.0.0.1", offer, writer.take, "runner r", 10.0)
    finally:
        writer.close()
        sender.close()
    assert (staging / "ok.bin").read_bytes() == b"ab"  # resumed from byte 2 next time


def test_the_agents_identity_is_private_and_its_digest_is_what_it_offers(tmp_path):
    sender, offer = _offer(tmp_path, _frames(ArtifactsSent("job-1")))
    try:
        pem = tmp_path / "direct-tls.pem"
        assert pem.stat().st_mode & 0o077 == 0
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with context.wrap_socket(socket.create_connection(("127.0.0.1", offer.port), timeout=10)) as peer:
            cert = peer.getpeercert(binary_form=True) or b""
        assert hashlib.sha256(cert).hexdigest() == offer.cert_sha256
    finally:
        sender.close()


def test_direct_ports_keep_transfers_in_the_range_a_firewall_opens(tmp_path):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    base = probe.getsockname()[1]
    probe.close()
    ports = range(base, base + 2)
    sender = DirectSender(tmp_path, ports)
    try:
        offers = [
            sender.offer("127.0.0.1", f"job-{i}", lambda: (f for f in _frames(ArtifactsSent("job-1"))))
            for i in range(3)
        ]
        taken = [o.port for o in offers if o is not None]
        # two fit in the range; the third is streamed on its channel instead (None), never elsewhere
        assert sorted(taken) == list(ports) and offers.count(None) == 1
    finally:
        sender.close()


def test_a_bad_direct_ports_option_is_one_line(tmp_path, controller_home):
    import subprocess

    from tests.harness import APP_MODULE, lanpool_env

    res = subprocess.run(
        [*APP_MODULE, "agent", "serve", "--data-dir", str(tmp_path / "a"), "--no-mdns", "--direct-ports", "9000-80"],
        env=lanpool_env(controller_home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 1 and res.stderr.strip().splitlines() == [
        "app agent: error: --direct-ports '9000-80': ports are 1 to 65535, the first no larger than the last"
    ]
