"""A job's log burst on a TLS connection of its own (agent/ssh/log_direct.py, app/runners/log_direct.py).

Against a real agent and the real controller: a flood comes direct, every line stored once
and in order; LANPOOL_DIRECT_TRANSFERS=0 keeps it on the channel; a LAN peer that connects
to the offered port first gets nothing; a refused port or an impostor's certificate falls
back to the channel; a direct connection cut mid-stream is re-attached, nothing lost or
twice. With the real sender and reader on loopback: only LogChunk frames are taken, within
the frame bound, and a stream that ends without a TLS close is a lost connection.
"""

import asyncio
import contextlib
import json
import socket
import sqlite3
import ssl
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import lanpool.app.runners.direct as direct_pull
import lanpool.app.runners.log_direct as log_direct
from lanpool.agent.direct import DirectSender, _write_identity
from lanpool.app.controller import Controller
from lanpool.app.errors import RunnerError, RunnerProtocolError
from lanpool.app.jobs.own_output import OwnOutput
from lanpool.app.runners.log_direct import LogReader
from lanpool.protocol import DirectOffer, JobState, JobStatus, LogChunk, encode_message
from lanpool.protocol.framing import MAX_FRAME_BYTES

LINES = 200_000
# One write of every line: the spool has a backlog of ~20 MB at once, which is a burst.
FLOOD = (
    "workflows:\n  - name: flood\n    commands:\n"
    f"      - python3 -c \"import sys; sys.stdout.write(''.join('%010d %s\\\\n' % (i, 'x' * 88) for i in range({LINES})))\"\n"
)


def _stored_lines(controller_home: Path, job: str) -> list[bytes]:
    """Every stored line of the job's out stream, in seq order; the seqs contiguous from 0."""
    conn = sqlite3.connect(f"file:{controller_home / 'lanpool.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT seq, n_lines, stream, data FROM log_chunks WHERE job_id = ? ORDER BY node, seq", (job,)
        ).fetchall()
    finally:
        conn.close()
    lines, expect = [], 0
    for seq, n_lines, stream, data in rows:
        assert seq == expect, f"a gap or an overlap at seq {seq} (expected {expect})"
        expect = seq + n_lines
        if stream == "out":
            lines += data.splitlines()
    return lines


def _every_line_once(controller_home: Path, job: str) -> None:
    lines = _stored_lines(controller_home, job)
    assert len(lines) == LINES
    for i in (0, 1, LINES // 2, LINES - 1):
        assert lines[i].startswith(b"%010d " % i), lines[i][:20]
    assert [int(line[:10]) for line in lines] == list(range(LINES))


def _run(cli, agent, project: Path) -> str:
    cli("headless", "run", "flood", "--runner", agent.address, cwd=project, check=True, timeout=180)
    [entry] = json.loads(cli("headless", "status", "--json", check=True).stdout)
    [row] = entry["jobs"]
    assert row["status"] == "DONE", row
    return str(row["job"])


def _submitted(cli, agent, project: Path) -> str:
    """A flood started detached: the controller in this process follows it."""
    out = cli("headless", "run", "flood", "--runner", agent.address, "-d", "--json", cwd=project, check=True)
    return str(json.loads(out.stdout.strip().splitlines()[-1])["jobs"][0]["job_id"])


def _follow(job_id: str) -> None:
    ctl = Controller()
    try:
        job = asyncio.run(asyncio.wait_for(ctl.follow(job_id, follow=True, pull=False), 120))
        assert job.state is JobState.DONE, job.error
    finally:
        ctl.close()


def test_a_log_flood_comes_direct_every_line_once_in_order(agent, cli, make_project, controller_home):
    job = _run(cli, agent, make_project(FLOOD))
    _every_line_once(controller_home, job)
    assert f"direct transfer of job {job}: " in agent.log_tail(50_000)


def test_LANPOOL_DIRECT_TRANSFERS_0_keeps_the_flood_on_the_channel(
    agent, cli, make_project, controller_home, monkeypatch
):
    monkeypatch.setenv(direct_pull.DIRECT_ENV, "0")
    job = _run(cli, agent, make_project(FLOOD))
    _every_line_once(controller_home, job)
    assert "direct transfer" not in agent.log_tail(50_000)


def test_a_peer_without_the_token_gets_no_line_and_the_controller_gets_all(
    agent, cli, make_project, controller_home, monkeypatch
):
    job_id = _submitted(cli, agent, make_project(FLOOD))
    heard: list[bytes] = []
    real_connect = LogReader.connect

    def peer_first(host: str, offer: DirectOffer, where: str) -> LogReader:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with context.wrap_socket(socket.create_connection((host, offer.port), timeout=10)) as peer:
            peer.sendall(b"x" * len(offer.token))  # a guessed token
            data = b""
            try:
                while chunk := peer.recv(65536):
                    data += chunk
            except (OSError, ssl.SSLError):
                pass
            heard.append(data)
        return real_connect(host, offer, where)

    monkeypatch.setattr(LogReader, "connect", staticmethod(peer_first))
    _follow(job_id)
    assert heard and heard == [b""] * len(heard)
    _every_line_once(controller_home, job_id)
    assert "without its token" in agent.log_tail(50_000)


@pytest.mark.parametrize("answer", ["refused", "impostor"])
def test_an_unusable_offered_port_falls_back_to_the_channel(
    agent, cli, make_project, controller_home, monkeypatch, tmp_path, answer
):
    """A firewall that lets only SSH through (refused), or a LAN peer on the port with a
    certificate of its own: nothing taken, the rest comes on the channel, nothing twice."""
    job_id = _submitted(cli, agent, make_project(FLOOD))
    listener = socket.create_server(("127.0.0.1", 0))
    if answer == "refused":
        port = listener.getsockname()[1]
        listener.close()  # nothing listens there now: a real ECONNREFUSED
    else:
        port = listener.getsockname()[1]
        pem = tmp_path / "impostor.pem"
        _write_identity(pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pem)

        def impostor() -> None:
            conn, _ = listener.accept()
            conn.settimeout(10)
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    while tls.recv(4096):
                        raise AssertionError("the controller sent its token to an impostor")
            except (OSError, ssl.SSLError):
                pass

        threading.Thread(target=impostor, daemon=True).start()
    real_connect = socket.create_connection
    tried: list[int] = []

    def elsewhere(address, *args, **kwargs):
        tried.append(address[1])
        return real_connect((address[0], port), *args, **kwargs)

    monkeypatch.setattr(log_direct.socket, "create_connection", elsewhere)
    try:
        _follow(job_id)
    finally:
        listener.close()
    assert tried, "the controller did not try the direct connection"
    _every_line_once(controller_home, job_id)


def test_a_direct_connection_cut_mid_stream_is_reattached_nothing_lost_or_twice(
    agent, cli, make_project, controller_home, monkeypatch
):
    job_id = _submitted(cli, agent, make_project(FLOOD))
    real_read = LogReader.read_batch
    reads = {"n": 0}

    def cut_once(self: LogReader) -> list[LogChunk] | None:
        reads["n"] += 1
        if reads["n"] == 3:
            socket.socket.shutdown(self._conn, socket.SHUT_RDWR)  # cut: no TLS close
        return real_read(self)

    monkeypatch.setattr(LogReader, "read_batch", cut_once)
    _follow(job_id)
    assert reads["n"] > 3
    _every_line_once(controller_home, job_id)


# -- the reader against the real sender on loopback ------------------------------------------------


@contextlib.contextmanager
def _offer(tmp_path: Path, frames) -> Iterator[DirectOffer]:
    """A runner's direct sender offering `frames` as job-1's log burst, closed after the block."""
    sender = DirectSender(tmp_path)
    try:
        offer = sender.offer("127.0.0.1", "job-1", frames)
        assert offer is not None
        yield offer
    finally:
        sender.close()


def _read_all(offer: DirectOffer) -> list[LogChunk]:
    reader = LogReader.connect("127.0.0.1", offer, "runner r")
    got: list[LogChunk] = []
    try:
        while (batch := reader.read_batch()) is not None:
            got += batch
    finally:
        reader.close()
    return got


def _chunk(seq: int, job: str = "job-1") -> LogChunk:
    return LogChunk(job, seq, "out", b"line %d\n" % seq)


def test_the_reader_takes_log_chunks_until_a_clean_close(tmp_path):
    with _offer(tmp_path, lambda: (encode_message(_chunk(i)) for i in range(5))) as offer:
        assert [m.seq for m in _read_all(offer)] == [0, 1, 2, 3, 4]


def test_anything_but_a_log_chunk_on_the_direct_connection_is_refused(tmp_path):
    status = JobStatus("job-1", "DONE")
    with _offer(tmp_path, lambda: (encode_message(m) for m in (_chunk(0), status))) as offer:
        with pytest.raises(RunnerProtocolError, match="sent JobStatus on the direct log connection"):
            _read_all(offer)


def test_another_jobs_lines_on_the_direct_connection_are_dropped_like_on_the_channel(tmp_path):
    with _offer(tmp_path, lambda: (encode_message(m) for m in (_chunk(0), _chunk(1, "job-2")))) as offer:
        got = _read_all(offer)
    own = OwnOutput("job-1", 0, "runner r")
    rows, _final = own.take(got)
    assert [r[2] for r in rows] == [0] and own.dropped == 1


def test_a_frame_past_the_bound_is_refused_before_it_is_read(tmp_path):
    with _offer(tmp_path, lambda: (f for f in [struct.pack(">I", MAX_FRAME_BYTES + 1) + b"\x00" * 64])) as offer:
        with pytest.raises(RunnerProtocolError, match="frame of"):
            _read_all(offer)


def test_a_stream_that_ends_without_a_tls_close_is_a_lost_connection(tmp_path):
    """The runner's transfer cut (its generator fails: no close_notify is sent): what came is
    kept by the caller, and the end is an error, not a clean end of the burst."""

    def cut():
        yield encode_message(_chunk(0))
        raise OSError("disk gone")

    with _offer(tmp_path, cut) as offer:
        reader = LogReader.connect("127.0.0.1", offer, "runner r")
        try:
            first = reader.read_batch()
            assert first is not None and [m.seq for m in first] == [0]
            with pytest.raises(RunnerError, match="lost runner r's direct log connection"):
                reader.read_batch()
        finally:
            reader.close()
