"""Bounds on what a peer's frame may make the other side build, and on what an
error reply echoes: unit checks of the decoders, then a real agent under attack.
The in-process part (unit); the rest: tests/integration/test_protocol_bounds.py."""

import struct

import msgpack
import pytest

from lanpool.protocol import (
    MAX_FRAME_BYTES,
    ErrorCode,
    FrameReader,
    Ping,
    ProtocolError,
    SubmitJob,
    decode_agent_message,
    decode_client_message,
    encode_message,
)
from lanpool.protocol.errors import clip
from lanpool.protocol.framing import MAX_DEPTH, MAX_ELEMENTS, check_structure


def _frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _ping_with(extra: bytes, key: bytes = b"x") -> bytes:
    """A valid ping map carrying one extra (ignored) field whose value is `extra`, already packed."""
    return b"\x83\xa1t\xa4ping\xa5nonce\x01" + msgpack.packb(key.decode()) + extra


def _array32(n: int, item: bytes) -> bytes:
    return b"\xdd" + n.to_bytes(4, "big") + item * n


def _error(decode, body) -> ProtocolError:
    with pytest.raises(ProtocolError) as exc:
        decode(body)
    assert not exc.value.fatal
    return exc.value


def test_a_valid_frame_passes_the_walk():
    body = encode_message(SubmitJob("j-1", "r", "w", ["echo"] * 500, env={f"K{i}": "v" for i in range(2000)}))[4:]
    check_structure(body)
    assert decode_client_message(body).env["K1999"] == "v"


@pytest.mark.parametrize(
    "item",
    [b"\x80", b"\x90", b"\xc0", b"\xa0", b"\x01"],
    ids=["empty-maps", "empty-lists", "nils", "empty-strs", "ints"],
)
def test_a_frame_of_16mib_tiny_values_is_refused_before_anything_is_built(item, monkeypatch):
    body = _ping_with(_array32(MAX_FRAME_BYTES - 32, item))
    assert len(body) <= MAX_FRAME_BYTES
    built = []
    monkeypatch.setattr(msgpack, "unpackb", lambda *a, **kw: built.append(1))
    err = _error(decode_client_message, body)
    assert err.code == ErrorCode.BAD_FRAME and f"more than {MAX_ELEMENTS} values" in err.message
    assert built == []  # refused by the walk: msgpack never ran


def test_the_element_bound_counts_keys_values_and_containers():
    # The ping map, its 3 keys and 2 values, the array: 7 values, then the array's items.
    check_structure(_ping_with(_array32(MAX_ELEMENTS - 7, b"\xc0")))
    with pytest.raises(ProtocolError, match="more than"):
        check_structure(_ping_with(_array32(MAX_ELEMENTS - 6, b"\xc0")))


def test_nesting_past_the_depth_bound_is_refused():
    ok = _ping_with(b"\x91" * (MAX_DEPTH - 1) + b"\xc0")  # the message map is level 1
    assert decode_client_message(ok) == Ping(1)
    err = _error(decode_client_message, _ping_with(b"\x91" * MAX_DEPTH + b"\xc0"))
    assert err.code == ErrorCode.BAD_FRAME and "deeper" in err.message
    deep = _ping_with(b"\x91" * (MAX_FRAME_BYTES - 64) + b"\xc0")
    assert "deeper" in _error(decode_client_message, deep).message


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("single", [False, True], ids=["float64", "float32"])
def test_non_finite_floats_anywhere_in_a_frame_are_refused(value, single):
    body = msgpack.packb({"t": "stop", "job_id": "j", "grace_s": value}, use_single_float=single)
    assert "non-finite" in _error(decode_client_message, body).message
    ignored = msgpack.packb({"t": "ping", "nonce": 1, "later": [value]}, use_single_float=single)
    assert _error(decode_client_message, ignored).code == ErrorCode.BAD_FRAME


def test_extension_types_are_refused():
    body = msgpack.packb({"t": "ping", "nonce": 1, "x": msgpack.ExtType(5, b"abc")})
    assert "extension" in _error(decode_client_message, body).message


@pytest.mark.parametrize(
    "payload",
    [
        b"\x82\xa1t\xa4ping\xa5nonce",  # a map short of its last value
        b"\x81\xa1t\xdb\xff\xff\xff\xff",  # a str32 longer than the frame
        b"\x81\xa1t\xdd\xff\xff\xff\xff",  # an array32 claiming 4 G items
        b"\x81\xa1t\xdf\x00\x00",  # a map16 header cut short
        b"\x81\xa1t\xcb\x00",  # a float64 cut short
    ],
    ids=["map", "str32", "array32", "map16", "float64"],
)
def test_lengths_past_the_end_of_the_frame_are_refused(payload):
    assert _error(decode_client_message, payload).code == ErrorCode.BAD_FRAME


def test_trailing_bytes_are_refused():
    assert (
        "after the message" in _error(decode_client_message, msgpack.packb({"t": "ping", "nonce": 1}) + b"\xc0").message
    )


def test_a_log_chunk_near_the_frame_limit_still_decodes():
    data = b"x" * (MAX_FRAME_BYTES - 100) + b"\n"
    frame = _frame(
        msgpack.packb({"t": "log", "job_id": "j", "seq": 0, "stream": "out", "data": data}, use_bin_type=True)
    )
    (body,) = FrameReader().feed(frame)
    assert decode_agent_message(body).data == data


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"t": "attach", "job_id": "j", "from_seq": 2**64 - 1}, "attach.from_seq: out of range"),
        ({"t": "attach", "job_id": "j", "from_seq": -1}, "attach.from_seq: out of range"),
        ({"t": "stop", "job_id": "j", "grace_s": 1e300}, "stop.grace_s: out of range"),
        ({"t": "stop", "job_id": "j", "grace_s": -1.0}, "stop.grace_s: out of range"),
        ({"t": "stop", "job_id": "j", "grace_s": float("nan")}, "stop.grace_s: must be a finite number"),
        ({"t": "ping", "nonce": 2**63}, "ping.nonce: out of range"),
        ({"t": "client_hello", "protocol_version": -1, "client_version": "x"}, "protocol_version: out of range"),
        ({"t": "stop", "job_id": "../../host_key"}, "stop.job_id: must be letters"),
        ({"t": "stop", "job_id": "a/b"}, "stop.job_id: must be letters"),
        ({"t": "stop", "job_id": ".."}, "stop.job_id: must be letters"),
        ({"t": "stop", "job_id": "j" * 129}, "stop.job_id: 129 characters, at most 128"),
        (
            {"t": "submit", "job_id": "j", "run_name": "r\x1b]52;c;eA==\x07", "workflow": "w", "commands": ["x"]},
            "submit.run_name: holds control or invisible characters",
        ),
        (
            {
                "t": "submit",
                "job_id": "j",
                "run_name": "r",
                "workflow": "w",
                "commands": ["x"],
                "resources": {"cpu": -1},
            },
            "submit.resources['cpu']: out of range",
        ),
        (
            {
                "t": "submit",
                "job_id": "j",
                "run_name": "r",
                "workflow": "w",
                "commands": ["x"],
                "resources": {"cpu": 2**60},
            },
            "submit.resources['cpu']: out of range",
        ),
        (
            {
                "t": "submit",
                "job_id": "j",
                "run_name": "r",
                "workflow": "w",
                "commands": ["x"],
                "resources": {"cpu": float("inf")},
            },
            "expected int | str, got float",
        ),
    ],
)
def test_client_fields_out_of_range_are_invalid(body, fragment):
    err = _error(decode_client_message, body)
    assert err.code == ErrorCode.INVALID_MESSAGE
    assert fragment in err.message


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"t": "log", "job_id": "j", "seq": 2**64 - 1, "stream": "out", "data": b""}, "log.seq: out of range"),
        ({"t": "log", "job_id": "j", "seq": 0, "stream": "out", "data": b"", "node": -1}, "log.node: out of range"),
        ({"t": "job_status", "job_id": "j", "state": "DONE", "exit_code": 2**40}, "exit_code: out of range"),
        ({"t": "job_status", "job_id": "j", "state": "DONE", "started_at": float("inf")}, "must be a finite number"),
        (
            {"t": "job_status", "job_id": "j", "state": "DONE", "artifacts": [{"path": "a", "size": -5}]},
            "artifacts[0].size: out of range",
        ),
        ({"t": "job_status", "job_id": "j", "state": "X" * 10**6}, "job_status.state: 1000000 characters"),
        (
            {"t": "hello", "protocol_version": 2, "agent_version": "1", "name": "gpu\x1b[2J"},
            "hello.name: holds control",
        ),
        (
            {"t": "hello", "protocol_version": 2, "agent_version": "1", "name": "n", "resources": {"gpus": -3}},
            "hello.resources['gpus']: out of range",
        ),
    ],
)
def test_agent_fields_out_of_range_are_invalid(body, fragment):
    err = _error(decode_agent_message, body)
    assert err.code == ErrorCode.INVALID_MESSAGE
    assert fragment in err.message


def test_values_in_range_still_decode():
    assert decode_client_message({"t": "stop", "job_id": "a1.b_c-d", "grace_s": 0}).grace_s == 0.0
    status = decode_agent_message({"t": "job_status", "job_id": "j", "state": "FAILED", "exit_code": -9})
    assert status.exit_code == -9
    assert decode_agent_message({"t": "error", "code": "x", "message": "two\nlines"}).message == "two\nlines"
    assert decode_client_message({"t": "ping", "nonce": 2**63 - 1}).nonce == 2**63 - 1


@pytest.mark.parametrize(
    "body",
    [
        {"t": "x" * 10**6},
        {"t": "stop", "job_id": "x" * 10**6},
        {"t": "job_status", "job_id": "j", "state": "Q" * 10**6},
        {"t": "submit", "job_id": "j", "run_name": "r", "workflow": "w", "commands": ["x"], "env": {"K" * 10**6: 5}},
    ],
)
def test_error_messages_never_echo_a_long_value(body):
    for decode in (decode_client_message, decode_agent_message):
        with pytest.raises(ProtocolError) as exc:
            decode(body)
        assert len(exc.value.message) < 400


def test_clip_bounds_and_says_how_long():
    assert clip("short") == "short"
    clipped = clip("y" * 10**6)
    assert len(clipped) < 250 and "1000000 characters" in clipped
