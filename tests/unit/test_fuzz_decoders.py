"""Fuzzing both decoders and the frame reader (hypothesis, bounded to run in seconds).

Properties: whatever the bytes, decoding raises nothing but ProtocolError;
and the structure walk that runs before msgpack builds anything is exact, so
no frame that passes it builds more values, or nests deeper, than the bounds.
"""

import dataclasses
import math
import struct
import types
import typing

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lanpool.protocol import (
    AGENT_MESSAGES,
    CLIENT_MESSAGES,
    MAX_FRAME_BYTES,
    ErrorCode,
    FrameReader,
    ProtocolError,
    decode_agent_message,
    decode_client_message,
    encode_message,
)
from lanpool.protocol.framing import MAX_DEPTH, MAX_ELEMENTS, check_structure

DECODERS = {"agent": (decode_agent_message, AGENT_MESSAGES), "client": (decode_client_message, CLIENT_MESSAGES)}
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies ---------------------------------------------------------------------------

_hostile_numbers = st.sampled_from(
    [math.nan, math.inf, -math.inf, 1e308, -0.0, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), 2**31, -1, 0, 65536]
)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | _hostile_numbers
    | st.text(max_size=12)
    | st.binary(max_size=12)
    | st.sampled_from(["", "..", "../host_key", "a/b", "\x00", "\x1b]52;c;eA==\x07", "j" * 300])
)
_trees = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=6), children, max_size=5),
    max_leaves=30,
)


def _deep(depth: int, leaf=None):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


_deep_values = st.integers(0, MAX_DEPTH + 8).map(_deep)


def _valid_value(tp) -> st.SearchStrategy:
    """Values of a field's declared type, mostly inside the bounds (ids are id-like)."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return st.one_of([_valid_value(t) for t in typing.get_args(tp)])
    if tp is type(None):
        return st.none()
    if origin is list:
        return st.lists(_valid_value(typing.get_args(tp)[0]), max_size=4)
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        return st.dictionaries(_valid_value(key_tp), _valid_value(val_tp), max_size=4)
    if dataclasses.is_dataclass(tp):
        return _valid_body(tp)
    return {
        int: st.integers(0, 1000),
        float: st.floats(0, 1000),
        bool: st.booleans(),
        bytes: st.binary(max_size=16),
        str: st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,10}", fullmatch=True),
    }[tp]


def _valid_body(cls) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls)
    fields = {f.name: _valid_value(hints[f.name]) for f in dataclasses.fields(cls)}
    body = st.fixed_dictionaries(fields)
    return body.map(lambda b: {**b, "t": cls.TAG}) if hasattr(cls, "TAG") else body


def _bodies(registry) -> st.SearchStrategy:
    return st.one_of([_valid_body(cls) for cls in registry.values()])


@st.composite
def _mutated_body(draw, registry):
    """A valid body with some fields replaced by hostile values, or some added."""
    body = draw(_bodies(registry))
    for key in draw(st.lists(st.sampled_from(sorted(body)), max_size=3)):
        body[key] = draw(_trees | _deep_values | _hostile_numbers)
    body.update(draw(st.dictionaries(st.text(max_size=6), _trees, max_size=2)))
    return body


_splices = st.sampled_from(
    [
        b"\xdd\xff\xff\xff\xff",  # array32 of 4 G items
        b"\xdf\x7f\xff\xff\xff",  # map32 of 2 G pairs
        b"\xdb\xff\xff\xff\xff",  # str32 of 4 GiB
        b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00",  # NaN
        b"\xca\x7f\x80\x00\x00",  # float32 inf
        b"\xc7\x01\x05x",  # ext8
        b"\xd6\xff\x00\x00\x00\x00",  # timestamp ext
        b"\x91" * (MAX_DEPTH + 2),
        b"\xc1",
        b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff",  # uint64 max
    ]
)


@st.composite
def _mutated_bytes(draw, registry):
    """The packed bytes of a valid body, then cut, spliced, overwritten."""
    data = bytearray(msgpack.packb(draw(_bodies(registry)), use_bin_type=True))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "splice", "cut", "insert"]))
        pos = draw(st.integers(0, len(data)))
        if op == "flip" and data:
            data[min(pos, len(data) - 1)] = draw(st.integers(0, 255))
        elif op == "splice":
            data[pos:pos] = draw(_splices)
        elif op == "cut":
            del data[pos:]
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


# -- helpers -----------------------------------------------------------------------------


def _count(value) -> int:
    """Values msgpack builds for `value`: itself, and every key and item under it."""
    if isinstance(value, dict):
        return 1 + sum(_count(k) + _count(v) for k, v in value.items())
    if isinstance(value, list):
        return 1 + sum(_count(v) for v in value)
    return 1


def _depth(value) -> int:
    """Levels of non-empty containers (an empty one is a leaf, as for the walk)."""
    if isinstance(value, dict) and value:
        return 1 + max(max(_depth(k), _depth(v)) for k, v in value.items())
    if isinstance(value, list) and value:
        return 1 + max(_depth(v) for v in value)
    return 0


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _sane(value, key: str = "") -> bool:
    if isinstance(value, bool) or value is None or isinstance(value, bytes):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    if isinstance(value, str):
        return key not in ("job_id", "name", "run_name", "workflow") or (
            len(value) <= 256 and value.isprintable() and "/" not in value[:1] and ".." != value
        )
    if isinstance(value, dict):
        return all(_sane(k, key) and _sane(v, k if not key else key) for k, v in value.items())
    return all(_sane(v, key) for v in value)


def _decode_only_protocol_errors(decode, body: bytes) -> None:
    try:
        msg = decode(body)
    except ProtocolError as exc:
        assert not exc.fatal
        assert exc.code in (ErrorCode.BAD_FRAME, ErrorCode.UNKNOWN_MESSAGE, ErrorCode.INVALID_MESSAGE)
        assert len(exc.message) < 1000  # an error never grows with the input
    else:
        assert _sane(dataclasses.asdict(msg)), msg  # finite, int64, no control characters in ids
        assert encode_message(msg)


# -- the walk is exact -------------------------------------------------------------------


@FAST
@given(tree=_trees | _deep_values, elements_delta=st.integers(-2, 2), depth_delta=st.integers(-2, 2))
def test_the_walk_passes_exactly_the_trees_within_the_bounds(tree, elements_delta, depth_delta):
    # Bounds around the tree's own size and depth: the off-by-ones are where a walk goes wrong.
    max_elements = max(0, _count(tree) + elements_delta)
    max_depth = max(0, _depth(tree) + depth_delta)
    packed = msgpack.packb(tree, use_bin_type=True)
    within = _count(tree) <= max_elements and _depth(tree) <= max_depth and _finite(tree)
    try:
        check_structure(packed, max_elements, max_depth)
    except ProtocolError as exc:
        assert exc.code == ErrorCode.BAD_FRAME
        assert not within, exc.message
    else:
        assert within
        built = msgpack.unpackb(packed, raw=False, strict_map_key=False)
        assert _count(built) <= max_elements and _depth(built) <= max_depth


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    n=st.integers(MAX_ELEMENTS - 10, MAX_FRAME_BYTES - 64) | st.integers(MAX_ELEMENTS - 10, MAX_ELEMENTS + 10),
    item=st.sampled_from([b"\x80", b"\x90", b"\xc0", b"\xa0"]),
)
def test_a_frame_up_to_16mib_never_builds_more_than_the_bound(n, item):
    body = b"\x82\xa1t\xa4ping\xa1x\xdd" + n.to_bytes(4, "big") + item * n
    built = []
    real = msgpack.unpackb

    def counting(*args, **kwargs):
        value = real(*args, **kwargs)
        built.append(_count(value))
        return value

    msgpack.unpackb = counting
    try:
        _decode_only_protocol_errors(decode_client_message, body)
    finally:
        msgpack.unpackb = real
    assert all(count <= MAX_ELEMENTS for count in built)
    assert bool(built) == (n + 5 <= MAX_ELEMENTS)  # built only when within the bound


# -- the decoders raise nothing but ProtocolError ---------------------------------------------


@pytest.mark.parametrize("side", DECODERS)
@FAST
@given(data=st.data())
def test_random_trees_as_bodies(side, data):
    decode, registry = DECODERS[side]
    tag = data.draw(st.sampled_from(sorted(registry)) | st.text(max_size=4))
    tagged = st.dictionaries(st.text(max_size=6), _trees, max_size=6).map(lambda d: {**d, "t": tag})
    tree = data.draw(_trees | _deep_values | tagged)
    _decode_only_protocol_errors(decode, msgpack.packb(tree, use_bin_type=True))


@pytest.mark.parametrize("side", DECODERS)
@FAST
@given(data=st.data())
def test_valid_bodies_with_hostile_fields(side, data):
    decode, registry = DECODERS[side]
    body = data.draw(_mutated_body(registry))
    _decode_only_protocol_errors(decode, msgpack.packb(body, use_bin_type=True))
    try:  # the dict path too (tests and in-process callers)
        decode(body)
    except ProtocolError:
        pass


@pytest.mark.parametrize("side", DECODERS)
@FAST
@given(data=st.data())
def test_mutated_frames(side, data):
    decode, registry = DECODERS[side]
    _decode_only_protocol_errors(decode, data.draw(_mutated_bytes(registry)))


@pytest.mark.parametrize("side", DECODERS)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_valid_bodies_round_trip(side, data):
    decode, registry = DECODERS[side]
    body = data.draw(_bodies(registry))
    try:
        msg = decode(msgpack.packb(body, use_bin_type=True))
    except ProtocolError as exc:
        assert exc.code == ErrorCode.INVALID_MESSAGE  # e.g. a state that is not a JobState
        return
    assert decode(encode_message(msg)[4:]) == msg


@FAST
@given(
    chunks=st.lists(st.binary(max_size=40) | st.integers(0, 2**32 - 1).map(lambda n: struct.pack(">I", n)), max_size=12)
)
def test_the_frame_reader_only_raises_fatal_frame_too_large(chunks):
    reader = FrameReader(max_frame=64)
    try:
        for chunk in chunks:
            for body in reader.feed(chunk):
                assert len(body) <= 64
                for decode, _ in DECODERS.values():
                    _decode_only_protocol_errors(decode, body)
    except ProtocolError as exc:
        assert exc.fatal and exc.code == ErrorCode.FRAME_TOO_LARGE
    assert reader.pending < 4 + 64
