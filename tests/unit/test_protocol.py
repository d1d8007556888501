"""The wire protocol: framing, the two decoders, and how they treat bad input."""

import dataclasses
import struct

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lanpool
from lanpool.protocol import (
    AGENT_MESSAGES,
    CLIENT_MESSAGES,
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    ArtifactData,
    ArtifactEnd,
    ArtifactFile,
    ArtifactRange,
    ArtifactsSent,
    Attach,
    BlobStored,
    ClientHello,
    DirectOffer,
    Error,
    ErrorCode,
    FileEntry,
    FrameReader,
    GetArtifacts,
    GetStatus,
    HaveBlobs,
    Hello,
    JobAccepted,
    JobState,
    JobStatus,
    LogChunk,
    MissingBlobs,
    PairConfirm,
    Paired,
    PairReply,
    PairStart,
    Ping,
    Pong,
    ProtocolError,
    PutBlob,
    StopJob,
    SubmitJob,
    decode_agent_message,
    decode_client_message,
    encode_frame,
    encode_message,
)

AGENT_SAMPLES = [
    Hello(
        protocol_version=PROTOCOL_VERSION,
        agent_version="0.1.0",
        name="gpu-box",
        resources={"gpus": 2, "gpu_name": "RTX 4090", "memory_mb": 64000},
    ),
    JobAccepted(job_id="j-1", workspace="/var/lib/lanpool/jobs/j-1/workspace"),
    LogChunk(job_id="j-1", seq=17, stream="err", data=b"line one\n\xff\x00binary\n", node=3),
    JobStatus(
        job_id="j-1",
        state="DONE",
        exit_code=0,
        submitted_at=1.5,
        started_at=2.25,
        finished_at=3.0,
        error="",
        log_lines=42,
        artifacts=[ArtifactFile("model.ckpt", 1234), ArtifactFile("logs/metrics.csv", 0)],
    ),
    JobStatus(job_id="j-2", state="FAILED", exit_code=None, error="could not start: no such file"),
    Error(code=ErrorCode.UNKNOWN_JOB, message="no job j-9", job_id="j-9"),
    PairReply(pake=b"B" + bytes(32), confirm=bytes(range(32))),
    Paired(name="gpu-box"),
    Pong(nonce=2**40),
    MissingBlobs(sha256s=["0" * 64, "ab" * 32]),
    BlobStored(sha256="f" * 64),
    ArtifactData(job_id="j-1", path="out/model.pt", offset=2**33, data=b"\x00\xff" * 100),
    ArtifactEnd(job_id="j-1", path="out/model.pt", size=2**33 + 200),
    ArtifactsSent(job_id="j-1"),
    DirectOffer(job_id="j-1", port=40123, cert_sha256="c" * 64, token=bytes(range(32))),
]

CLIENT_SAMPLES = [
    ClientHello(protocol_version=PROTOCOL_VERSION, client_version="0.1.0"),
    SubmitJob(
        job_id="j-1",
        run_name="pink-fly-1",
        workflow="train",
        commands=["echo hi", "python train.py"],
        env={"LR": "0.001", "DEBUG": "true"},
        artifacts=["model.ckpt", "logs"],
        files=[
            FileEntry(path="src/train.py", sha256="ab" * 32, size=120, mode=0o755),
            FileEntry(path="src/data", link="../data"),
        ],
        working_dir="src",
    ),
    StopJob(job_id="j-1", abort=True, grace_s=2.5),
    StopJob(job_id="j-1"),
    Attach(job_id="j-1", from_seq=100, follow=False),
    GetStatus(job_id="j-1"),
    PairStart(pake=b"A" + bytes(32), public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ"),
    PairConfirm(confirm=bytes(32), label="laptop"),
    Ping(nonce=7),
    HaveBlobs(sha256s=["0" * 64]),
    PutBlob(sha256="a" * 64, offset=0, size=3, data=b"abc"),
    GetArtifacts(job_id="j-1", files=[ArtifactRange(path="out/model.pt", offset=1024)]),
    GetArtifacts(job_id="j-1", direct=True),
]


def _body(msg) -> dict:
    """The message map that the frame of `msg` carries."""
    frame = encode_message(msg)
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    return msgpack.unpackb(frame[4:], raw=False)


def _through_reader(msg) -> bytes | dict:
    """What a FrameReader hands out for the frame of `msg`."""
    (body,) = FrameReader().feed(encode_message(msg))
    return body


def _raw_frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _code(exc_info) -> ErrorCode:
    return exc_info.value.code


# -- round trips -----------------------------------------------------------------


def test_samples_cover_every_message_type():
    assert {type(m) for m in AGENT_SAMPLES} == set(AGENT_MESSAGES.values())
    assert {type(m) for m in CLIENT_SAMPLES} == set(CLIENT_MESSAGES.values())


@pytest.mark.parametrize("msg", AGENT_SAMPLES, ids=lambda m: type(m).__name__)
def test_agent_messages_round_trip(msg):
    decoded = decode_agent_message(_through_reader(msg))
    assert decoded == msg
    assert type(decoded) is type(msg)


@pytest.mark.parametrize("msg", CLIENT_SAMPLES, ids=lambda m: type(m).__name__)
def test_client_messages_round_trip(msg):
    decoded = decode_client_message(_through_reader(msg))
    assert decoded == msg
    assert type(decoded) is type(msg)


def test_nested_artifact_files_decode_as_dataclasses():
    status = decode_agent_message(_body(AGENT_SAMPLES[3]))
    assert all(isinstance(a, ArtifactFile) for a in status.artifacts)
    assert status.artifacts[0].path == "model.ckpt" and status.artifacts[0].size == 1234


def test_int_is_accepted_where_a_float_is_declared():
    body = _body(StopJob("j", grace_s=1.0))
    body["grace_s"] = 3
    msg = decode_client_message(body)
    assert msg.grace_s == 3.0 and isinstance(msg.grace_s, float)


@pytest.mark.parametrize("msg", AGENT_SAMPLES, ids=lambda m: type(m).__name__)
def test_agent_messages_are_unknown_to_the_client_decoder(msg):
    with pytest.raises(ProtocolError) as exc:
        decode_client_message(_through_reader(msg))
    assert _code(exc) == ErrorCode.UNKNOWN_MESSAGE


@pytest.mark.parametrize("msg", CLIENT_SAMPLES, ids=lambda m: type(m).__name__)
def test_client_messages_are_unknown_to_the_agent_decoder(msg):
    with pytest.raises(ProtocolError) as exc:
        decode_agent_message(_through_reader(msg))
    assert _code(exc) == ErrorCode.UNKNOWN_MESSAGE


def test_log_chunk_counts_its_lines():
    assert LogChunk("j", 0, "out", b"a\nb\nc\n").n_lines == 3
    assert LogChunk("j", 0, "out", b"").n_lines == 0


# -- framing -----------------------------------------------------------------------


def test_frame_reader_fed_one_byte_at_a_time():
    stream = b"".join(encode_message(m) for m in CLIENT_SAMPLES)
    reader = FrameReader()
    bodies = []
    for i in range(len(stream)):
        bodies += reader.feed(stream[i : i + 1])
    assert [decode_client_message(b) for b in bodies] == CLIENT_SAMPLES
    assert reader.pending == 0


def test_partial_frame_is_pending_until_complete():
    frame = encode_message(Ping(1))
    reader = FrameReader()
    assert reader.feed(frame[:-1]) == []
    assert reader.pending == len(frame) - 1
    assert len(reader.feed(frame[-1:])) == 1
    assert reader.pending == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    picks=st.lists(st.integers(0, len(AGENT_SAMPLES) - 1), min_size=1, max_size=8),
    data=st.data(),
)
def test_arbitrary_splits_yield_the_messages_in_order(picks, data):
    messages = [AGENT_SAMPLES[i] for i in picks]
    stream = b"".join(encode_message(m) for m in messages)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(stream)), max_size=20)))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=False)]
    assert b"".join(pieces) == stream
    reader = FrameReader()
    bodies = []
    for piece in pieces:
        bodies += reader.feed(piece)
    assert [decode_agent_message(b) for b in bodies] == messages
    assert reader.pending == 0


def test_oversized_length_prefix_is_fatal_before_the_body_arrives():
    reader = FrameReader()
    with pytest.raises(ProtocolError) as exc:
        reader.feed(struct.pack(">I", MAX_FRAME_BYTES + 1))  # the header alone
    assert _code(exc) == ErrorCode.FRAME_TOO_LARGE
    assert exc.value.fatal is True


def test_custom_frame_limit_is_enforced():
    reader = FrameReader(max_frame=16)
    assert len(reader.feed(_raw_frame(msgpack.packb({"t": "ping", "nonce": 1})))) == 1  # 15 bytes
    with pytest.raises(ProtocolError) as exc:
        reader.feed(struct.pack(">I", 17))
    assert _code(exc) == ErrorCode.FRAME_TOO_LARGE and exc.value.fatal


def test_a_frame_at_the_limit_is_accepted():
    payload = msgpack.packb({"t": "ping", "nonce": 1})
    assert len(FrameReader(max_frame=len(payload)).feed(_raw_frame(payload))) == 1


def test_encode_refuses_a_message_over_the_limit():
    with pytest.raises(ProtocolError) as exc:
        encode_frame({"t": "log", "data": b"x" * (MAX_FRAME_BYTES + 1)})
    assert _code(exc) == ErrorCode.FRAME_TOO_LARGE


def _decode_all(bodies, decode) -> list:
    """Each body decoded, or the ErrorCode of the ProtocolError it raised."""
    out = []
    for body in bodies:
        try:
            out.append(decode(body))
        except ProtocolError as exc:
            assert not exc.fatal
            out.append(exc.code)
    return out


def test_non_msgpack_body_is_a_bad_frame_and_the_reader_goes_on():
    reader = FrameReader()
    bad = _raw_frame(b"\xc1\xc1\xc1")  # 0xc1 is never used in MessagePack
    bodies = reader.feed(bad + encode_message(Ping(5)))
    assert _decode_all(bodies, decode_client_message) == [ErrorCode.BAD_FRAME, Ping(5)]
    assert reader.pending == 0


def test_bad_frame_error_is_not_fatal():
    (body,) = FrameReader().feed(_raw_frame(b"\xc1"))
    with pytest.raises(ProtocolError) as exc:
        decode_client_message(body)
    assert _code(exc) == ErrorCode.BAD_FRAME
    assert exc.value.fatal is False


def test_frames_around_a_bad_frame_are_not_lost():
    stream = encode_message(Ping(1)) + _raw_frame(b"\xc1") + encode_message(Ping(2))
    bodies = FrameReader().feed(stream)
    assert _decode_all(bodies, decode_client_message) == [Ping(1), ErrorCode.BAD_FRAME, Ping(2)]


@pytest.mark.parametrize(
    "value",
    [[1, 2, 3], "just a string", 42, None, {"nonce": 1}, {"t": 5}, {b"t": "ping"}, {"t": None}],
    ids=["list", "str", "int", "nil", "no-tag", "int-tag", "bytes-key-tag", "nil-tag"],
)
def test_msgpack_that_is_not_a_tagged_map_is_a_bad_frame(value):
    for decode in (decode_client_message, decode_agent_message):
        (body,) = FrameReader().feed(_raw_frame(msgpack.packb(value, use_bin_type=True)))
        with pytest.raises(ProtocolError) as exc:
            decode(body)
        assert _code(exc) == ErrorCode.BAD_FRAME
        assert not exc.value.fatal


@pytest.mark.parametrize(
    "payload",
    [msgpack.packb({1: "x", "t": "ping"}), msgpack.packb({"t": "ping", "nonce": 1}) + b"\x00", b""],
    ids=["int-key", "trailing-bytes", "empty"],
)
def test_other_undecodable_bodies_are_bad_frames(payload):
    (body,) = FrameReader().feed(_raw_frame(payload))
    with pytest.raises(ProtocolError) as exc:
        decode_client_message(body)
    assert _code(exc) == ErrorCode.BAD_FRAME


# -- decoding errors ---------------------------------------------------------------


@pytest.mark.parametrize("tag", ["nope", "", "HELLO", "hello "])
def test_unknown_tag(tag):
    with pytest.raises(ProtocolError) as exc:
        decode_agent_message({"t": tag})
    assert _code(exc) == ErrorCode.UNKNOWN_MESSAGE
    with pytest.raises(ProtocolError) as exc:
        decode_client_message({"t": tag})
    assert _code(exc) == ErrorCode.UNKNOWN_MESSAGE


def test_missing_tag_is_an_unknown_message():
    with pytest.raises(ProtocolError) as exc:
        decode_client_message({"job_id": "x"})
    assert _code(exc) == ErrorCode.UNKNOWN_MESSAGE


def _mutated(msg, **changes) -> dict:
    body = _body(msg)
    for key, value in changes.items():
        if value is _DROP:
            del body[key]
        else:
            body[key] = value
    return body


_DROP = object()
_SUBMIT = CLIENT_SAMPLES[1]
_STATUS = AGENT_SAMPLES[3]


@pytest.mark.parametrize(
    ("decode", "body", "field_name"),
    [
        (decode_client_message, _mutated(_SUBMIT, commands=_DROP), "commands"),
        (decode_client_message, _mutated(_SUBMIT, job_id=_DROP), "job_id"),
        (decode_client_message, _mutated(Ping(1), nonce=_DROP), "nonce"),
        (decode_client_message, _mutated(Ping(1), nonce="1"), "nonce"),  # str where int
        (decode_client_message, _mutated(Ping(1), nonce=True), "nonce"),  # bool where int
        (decode_client_message, _mutated(Ping(1), nonce=1.0), "nonce"),  # float where int
        (decode_client_message, _mutated(Attach("j"), from_seq=None), "from_seq"),
        (decode_client_message, _mutated(Attach("j"), follow=1), "follow"),  # int where bool
        (decode_client_message, _mutated(StopJob("j"), grace_s="2"), "grace_s"),
        (decode_client_message, _mutated(StopJob("j"), grace_s=True), "grace_s"),  # bool where float
        (decode_client_message, _mutated(_SUBMIT, commands="echo hi"), "commands"),  # str where list
        (decode_client_message, _mutated(_SUBMIT, commands=["ok", 3]), "commands[1]"),  # list item
        (decode_client_message, _mutated(_SUBMIT, env={"A": 1}), "env"),  # dict value
        (decode_client_message, _mutated(_SUBMIT, env=["A=1"]), "env"),  # list where dict
        (decode_client_message, _mutated(ClientHello(1, "x"), protocol_version="1"), "protocol_version"),
        (decode_agent_message, _mutated(AGENT_SAMPLES[2], data=5), "data"),  # int where bytes
        (decode_agent_message, _mutated(AGENT_SAMPLES[2], data="text"), "data"),  # str where bytes
        (decode_agent_message, _mutated(AGENT_SAMPLES[0], resources={"gpus": 1.5}), "resources"),
        (decode_agent_message, _mutated(_STATUS, exit_code="0"), "exit_code"),
        (decode_agent_message, _mutated(_STATUS, artifacts=[{"path": "a", "size": "1"}]), "artifacts[0].size"),
        (decode_agent_message, _mutated(_STATUS, artifacts=[{"path": "a"}]), "size"),
        (decode_agent_message, _mutated(_STATUS, artifacts=["a"]), "artifacts[0]"),
        (decode_agent_message, _mutated(_STATUS, artifacts={"path": "a", "size": 1}), "artifacts"),
    ],
)
def test_missing_or_mistyped_fields_are_invalid(decode, body, field_name):
    with pytest.raises(ProtocolError) as exc:
        decode(body)
    assert _code(exc) == ErrorCode.INVALID_MESSAGE
    assert field_name in exc.value.message
    assert not exc.value.fatal


def test_unknown_extra_fields_are_ignored():
    body = _body(_SUBMIT)
    body["added_in_protocol_9"] = {"anything": [1, 2]}
    body["urgency"] = "high"
    assert decode_client_message(body) == _SUBMIT
    nested = _body(_STATUS)
    nested["artifacts"][0]["sha256"] = "abc"
    assert decode_agent_message(nested) == _STATUS


def test_missing_fields_with_defaults_take_the_default():
    minimal = decode_client_message(
        {"t": "submit", "job_id": "j", "run_name": "r", "workflow": "w", "commands": ["true"]}
    )
    assert minimal == SubmitJob("j", "r", "w", ["true"])
    assert minimal.env == {} and minimal.artifacts == [] and minimal.files == [] and minimal.working_dir == ""
    attach = decode_client_message({"t": "attach", "job_id": "j"})
    assert attach.from_seq == 0 and attach.follow is True
    status = decode_agent_message({"t": "job_status", "job_id": "j", "state": "RUNNING"})
    assert status.exit_code is None and status.log_lines == 0 and status.artifacts == []
    chunk = decode_agent_message({"t": "log", "job_id": "j", "seq": 0, "stream": "out", "data": b"x\n"})
    assert chunk.node == 0


def test_explicit_none_is_accepted_for_optional_fields():
    body = _body(_STATUS)
    body["exit_code"] = None
    body["started_at"] = None
    status = decode_agent_message(body)
    assert status.exit_code is None and status.started_at is None


# -- states and version ---------------------------------------------------------------


_STATE_CASES = [
    (JobState.SUBMITTED, False),
    (JobState.RUNNING, False),
    (JobState.DONE, True),
    (JobState.FAILED, True),
    (JobState.STOPPED, True),
    (JobState.ABORTED, True),
    (JobState.LOST, True),
    (JobState.QUEUED, False),
]


@pytest.mark.parametrize(("state", "terminal"), _STATE_CASES)
def test_job_state_is_terminal(state, terminal):
    assert state.is_terminal() is terminal


def test_every_job_state_is_classified():
    classified = {state for state, _terminal in _STATE_CASES}
    assert classified == set(JobState)
    assert JobState("DONE") is JobState.DONE and JobState.DONE == "DONE"


def test_protocol_version_is_an_int_separate_from_the_package_version():
    assert isinstance(PROTOCOL_VERSION, int) and not isinstance(PROTOCOL_VERSION, bool)
    assert PROTOCOL_VERSION >= 1
    assert str(PROTOCOL_VERSION) != lanpool.__version__ and isinstance(lanpool.__version__, str)


def test_messages_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CLIENT_SAMPLES[-1].nonce = 8  # type: ignore[misc]


# -- fuzzing the decoder --------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True)
    | st.text(max_size=10)
    | st.binary(max_size=10)
)
_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
_field_names = st.sampled_from(
    sorted(
        {
            f.name
            for cls in (*CLIENT_MESSAGES.values(), *AGENT_MESSAGES.values(), ArtifactFile)
            for f in dataclasses.fields(cls)
        }
    )
) | st.text(max_size=8)


@settings(max_examples=150, deadline=None)
@given(
    tag=st.sampled_from(sorted(CLIENT_MESSAGES)),
    fields=st.dictionaries(_field_names, _values, max_size=8),
)
def test_client_decoder_only_raises_protocol_errors(tag, fields):
    body = {**fields, "t": tag}
    try:
        msg = decode_client_message(body)
    except ProtocolError as exc:
        assert exc.code in (ErrorCode.INVALID_MESSAGE, ErrorCode.UNKNOWN_MESSAGE)
    else:
        assert msg.TAG == tag


@settings(max_examples=150, deadline=None)
@given(
    tag=st.sampled_from(sorted(AGENT_MESSAGES)),
    fields=st.dictionaries(_field_names, _values, max_size=8),
)
def test_agent_decoder_only_raises_protocol_errors(tag, fields):
    body = {**fields, "t": tag}
    try:
        msg = decode_agent_message(body)
    except ProtocolError as exc:
        assert exc.code in (ErrorCode.INVALID_MESSAGE, ErrorCode.UNKNOWN_MESSAGE)
    else:
        assert msg.TAG == tag


@settings(max_examples=100, deadline=None)
@given(payload=st.binary(max_size=64))
def test_arbitrary_frame_bodies_only_raise_non_fatal_protocol_errors(payload):
    reader = FrameReader()
    (body,) = reader.feed(_raw_frame(payload))
    assert reader.pending == 0
    for decode in (decode_client_message, decode_agent_message):
        try:
            msg = decode(body)
        except ProtocolError as exc:
            assert exc.code in (ErrorCode.BAD_FRAME, ErrorCode.UNKNOWN_MESSAGE, ErrorCode.INVALID_MESSAGE)
            assert not exc.fatal
        else:
            assert msg.TAG == msgpack.unpackb(payload)["t"]
