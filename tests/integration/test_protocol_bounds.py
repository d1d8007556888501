"""Bounds on what a peer's frame may make the other side build, and on what an
error reply echoes: unit checks of the decoders, then a real agent under attack.
The part with real agents and the CLI (integration); the rest: tests/unit/test_protocol_bounds.py."""

import asyncio
import subprocess
import sys

import asyncssh
import msgpack
import pytest

from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.protocol import (
    MAX_FRAME_BYTES,
    Error,
    ErrorCode,
    FrameReader,
    Hello,
    Ping,
    Pong,
    SubmitJob,
    decode_agent_message,
    decode_client_message,
    encode_message,
)
from lanpool.protocol.framing import MAX_ELEMENTS
from tests.harness import REPO
from tests.unit.test_protocol_bounds import _array32, _frame, _ping_with

_RSS_PROBE = """
import resource, sys
from lanpool.protocol import ProtocolError, decode_client_message
body = b"\\x83\\xa1t\\xa4ping\\xa5nonce\\x01\\xa1x\\xdd" + (__N__).to_bytes(4, "big") + b"\\x80" * __N__
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    decode_client_message(body)
except ProtocolError:
    pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.parametrize("n", [MAX_FRAME_BYTES - 32, MAX_ELEMENTS - 7], ids=["16MiB-refused", "at-the-bound"])
def test_decoding_a_frame_of_empty_maps_costs_little_memory(n):
    """The issue's case: 16 MiB of empty maps raised RSS by ~1.2 GiB; the most the bound lets through is ~70 MiB."""
    out = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE.replace("__N__", str(n))],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
        timeout=120,
    ).stdout
    assert int(out) < 128 * 1024, f"peak RSS grew by {int(out) // 1024} MiB"


async def _channel(agent):
    key = load_or_create_client_key(ControllerHome.default().key)
    conn = await asyncssh.connect(
        agent.host, agent.port, username="x", client_keys=[key], known_hosts=None, agent_path=None, config=[]
    )
    proc = await conn.create_process(subsystem="lanpool", encoding=None)
    return conn, proc, FrameReader(), []


async def _next(chan, timeout: float = 10):
    _conn, proc, reader, pending = chan
    while not pending:
        data = await asyncio.wait_for(proc.stdout.read(1 << 20), timeout)
        if not data:
            return None
        pending.extend(reader.feed(data))
    return decode_agent_message(pending.pop(0))


async def _served(agent) -> None:
    """Another controller gets a Hello and a Pong within a few seconds."""
    chan = await _channel(agent)
    try:
        assert isinstance(await _next(chan, 5), Hello)
        chan[1].stdin.write(encode_message(Ping(99)))
        assert await _next(chan, 5) == Pong(99)
    finally:
        chan[0].close()


async def _hostile_frames(agent) -> None:
    chan = await _channel(agent)
    await _next(chan)
    proc = chan[1]
    for item in (b"\x80", b"\x90"):  # 16 MiB of empty maps, then of empty lists
        proc.stdin.write(_frame(_ping_with(_array32(MAX_FRAME_BYTES - 32, item))))
        err = await _next(chan, 30)
        assert isinstance(err, Error) and err.code == ErrorCode.BAD_FRAME and "values" in err.message
        await _served(agent)  # meanwhile, others are served
    proc.stdin.write(_frame(_ping_with(b"\x91" * (MAX_FRAME_BYTES - 64) + b"\xc0")))
    assert "deeper" in (await _next(chan, 30)).message
    proc.stdin.write(encode_message(Ping(3)))  # the hostile channel itself still works
    assert await _next(chan) == Pong(3)
    chan[0].close()


def test_hostile_frames_are_refused_and_the_agent_serves_others(agent):
    rss_before = _rss_kib(agent.proc.pid)
    asyncio.run(_hostile_frames(agent))
    assert agent.proc.poll() is None
    # Refused before anything was built: far from the ~1.2 GiB such a frame used to cost.
    assert _rss_kib(agent.proc.pid) - rss_before < 256 * 1024


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))


async def _huge_job_id(agent) -> None:
    chan = await _channel(agent)
    await _next(chan)
    huge = "j" * (MAX_FRAME_BYTES - 200)
    for body in (
        {"t": "get_status", "job_id": huge},
        {"t": "stop", "job_id": huge},
        {"t": "submit", "job_id": huge, "run_name": "r", "workflow": "w", "commands": ["x"]},
    ):
        payload = msgpack.packb(body, use_bin_type=True)
        assert len(payload) <= MAX_FRAME_BYTES
        chan[1].stdin.write(_frame(payload))
        _conn, proc, reader, pending = chan
        data = b""
        while not pending:
            data = await asyncio.wait_for(proc.stdout.read(1 << 20), 30)
            assert data
            pending.extend(reader.feed(data))
        raw = pending.pop(0)
        assert len(raw) < 2000  # the reply is short: no echo of the 16 MB id
        err = decode_agent_message(raw)
        assert isinstance(err, Error) and err.code == ErrorCode.INVALID_MESSAGE and "job_id" in err.message
    chan[1].stdin.write(encode_message(Ping(4)))
    assert await _next(chan) == Pong(4)
    chan[0].close()
    await _served(agent)


def test_a_16mb_job_id_gets_a_short_error_and_the_agent_keeps_serving(agent):
    asyncio.run(_huge_job_id(agent))
    assert agent.proc.poll() is None


async def _nan_resources(agent) -> None:
    chan = await _channel(agent)
    await _next(chan)
    for i, cpu in enumerate(("nan", "inf", "1e309", "-1", "0", "NaN", "99999999")):
        chan[1].stdin.write(encode_message(SubmitJob(f"j{i}", "r", "w", ["sleep 20"], resources={"cpu": cpu})))
        err = await _next(chan, 30)
        assert isinstance(err, Error) and err.code == ErrorCode.BAD_REQUEST, err
        assert err.message.startswith("resources.cpu: ") and "not a valid number" in err.message
        assert err.job_id == f"j{i}"
    chan[1].stdin.write(encode_message(SubmitJob("m", "r", "w", ["sleep 20"], resources={"memory_mb": "inf"})))
    assert "resources.memory_mb" in (await _next(chan, 30)).message
    chan[1].stdin.write(encode_message(SubmitJob("s", "r", "w", ["sleep 20"], resources={"shm_size": "9" * 17 + "g"})))
    assert "resources.shm_size" in (await _next(chan, 30)).message
    # A valid job runs alongside, and every new controller is still greeted.
    chan[1].stdin.write(encode_message(SubmitJob("ok", "r", "w", ["sleep 20"], resources={"cpu": "1.5"})))
    accepted = await _next(chan, 30)
    assert accepted.job_id == "ok", accepted
    for _ in range(2):
        await _served(agent)
    chan[1].stdin.write(
        encode_message(decode_client_message({"t": "stop", "job_id": "ok", "abort": True, "grace_s": 0}))
    )
    chan[0].close()


def test_non_finite_resources_are_refused_and_other_controllers_are_served(agent):
    asyncio.run(_nan_resources(agent))
    assert agent.proc.poll() is None
