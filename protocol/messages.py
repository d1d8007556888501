"""Typed wire messages: frozen dataclasses with a tag, and one decoder per direction.

Rules that keep old and new peers talking (see STYLE.md 5):
- new fields get defaults, so an older peer's message still decodes;
- unknown fields are ignored, unknown tags raise UNKNOWN_MESSAGE;
- types are checked here, before anything acts on a message.
"""

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

from protocol.errors import ErrorCode, ProtocolError, clip
from protocol.framing import encode_frame, unpack_body
from protocol.states import JobState

# 2: pairing is a PAKE (PairStart/PairReply/PairConfirm) instead of a code sent as a password.
PROTOCOL_VERSION = 2


@dataclass(frozen=True)
class ArtifactFile:
    """One file of a job's packed artifacts (path relative to the workspace)."""

    path: str
    size: int


# -- agent -> controller ----------------------------------------------------


@dataclass(frozen=True)
class Hello:
    """First message an agent sends on a new lanpool channel."""

    TAG: ClassVar[str] = "hello"
    protocol_version: int
    agent_version: str
    name: str
    resources: dict[str, int | str] = field(default_factory=dict)


@dataclass(frozen=True)
class JobAccepted:
    TAG: ClassVar[str] = "job_accepted"
    job_id: str
    workspace: str
    master_port: int = 0  # the free port picked for MASTER_PORT, when asked to (node 0 of a multi-node job)


@dataclass(frozen=True)
class LogChunk:
    """Many whole lines of one stream; `seq` numbers the first line.

    Sequence numbers count lines per job across all streams, so a controller
    that comes back asks for `from_seq` and gets each line exactly once.
    """

    TAG: ClassVar[str] = "log"
    job_id: str
    seq: int
    stream: str  # "out", "err" or "sys" (lines the agent itself adds)
    data: bytes
    node: int = 0

    @property
    def n_lines(self) -> int:
        return self.data.count(b"\n")


@dataclass(frozen=True)
class JobStatus:
    TAG: ClassVar[str] = "job_status"
    job_id: str
    state: str
    exit_code: int | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    error: str = ""
    log_lines: int = 0  # lines in the spool so far
    artifacts_archive: str = ""  # path of the packed tar, relative to the SFTP root
    artifacts: list[ArtifactFile] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.state not in JobState.__members__:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"job_status.state: unknown state {self.state!r}")


@dataclass(frozen=True)
class Error:
    TAG: ClassVar[str] = "error"
    code: str
    message: str
    job_id: str = ""


@dataclass(frozen=True)
class PairReply:
    """The runner's half of the pairing PAKE and its proof that it knows the code
    (protocol/pairing.py); the controller checks it before answering."""

    TAG: ClassVar[str] = "pair_reply"
    pake: bytes
    confirm: bytes


@dataclass(frozen=True)
class Paired:
    """The controller's key is now authorized; reply to a valid PairConfirm."""

    TAG: ClassVar[str] = "paired"
    name: str


@dataclass(frozen=True)
class Pong:
    TAG: ClassVar[str] = "pong"
    nonce: int


# -- controller -> agent ----------------------------------------------------


@dataclass(frozen=True)
class ClientHello:
    TAG: ClassVar[str] = "client_hello"
    protocol_version: int
    client_version: str


@dataclass(frozen=True)
class SubmitJob:
    """Start a job. The controller picks `job_id` so it is stored before sending."""

    TAG: ClassVar[str] = "submit"
    job_id: str
    run_name: str
    workflow: str
    commands: list[str]
    env: dict[str, str] = field(default_factory=dict)
    artifacts: list[str] = field(default_factory=list)
    snapshot: str = ""  # tar uploaded over SFTP, relative to the SFTP root
    working_dir: str = ""
    # Artifact tars of reused dependencies (relative to the SFTP root), unpacked
    # into the workspace after the snapshot, at their original paths.
    inputs: list[str] = field(default_factory=list)
    image: str = ""  # container image; "" = the runner's process executor
    pull: str = "missing"  # never | missing | always
    # gpu (count), cpu, memory_mb, shm_size ("8g"): what the job needs
    resources: dict[str, int | str] = field(default_factory=dict)
    executor: str = ""  # hint: "docker" or "process"; "" = the runner decides
    # Node 0 of a multi-node job: pick a free port here and set MASTER_PORT to it.
    pick_master_port: bool = False


@dataclass(frozen=True)
class StopJob:
    TAG: ClassVar[str] = "stop"
    job_id: str
    abort: bool = False  # abort: do not pack artifacts
    grace_s: float | None = None  # SIGTERM -> SIGKILL delay; agent default if None


@dataclass(frozen=True)
class Attach:
    """Stream a job's log from `from_seq`, then its final JobStatus."""

    TAG: ClassVar[str] = "attach"
    job_id: str
    from_seq: int = 0
    follow: bool = True  # False: send what exists now, then the current status


@dataclass(frozen=True)
class GetStatus:
    TAG: ClassVar[str] = "get_status"
    job_id: str


@dataclass(frozen=True)
class PairStart:
    """The controller's half of the pairing PAKE, on a pairing connection.
    `public_key` must be the key that connection authenticated with."""

    TAG: ClassVar[str] = "pair_start"
    pake: bytes
    public_key: str


@dataclass(frozen=True)
class PairConfirm:
    """The controller's proof that it knows the code, sent only after the runner's
    proof verified; `label` names the controller in the runner's authorized_keys."""

    TAG: ClassVar[str] = "pair_confirm"
    confirm: bytes
    label: str = ""


@dataclass(frozen=True)
class Ping:
    TAG: ClassVar[str] = "ping"
    nonce: int


AgentMessage = Hello | JobAccepted | LogChunk | JobStatus | Error | PairReply | Paired | Pong
ClientMessage = ClientHello | SubmitJob | StopJob | Attach | GetStatus | PairStart | PairConfirm | Ping

AGENT_MESSAGES: dict[str, type] = {
    c.TAG: c for c in (Hello, JobAccepted, LogChunk, JobStatus, Error, PairReply, Paired, Pong)
}
CLIENT_MESSAGES: dict[str, type] = {
    c.TAG: c for c in (ClientHello, SubmitJob, StopJob, Attach, GetStatus, PairStart, PairConfirm, Ping)
}


def to_wire(msg: Any) -> dict[str, Any]:
    """The map that goes into a frame: the fields plus the tag under "t"."""
    body = dataclasses.asdict(msg)
    body["t"] = msg.TAG
    return body


def decode_agent_message(body: dict[str, Any] | bytes) -> AgentMessage:
    """A message from an agent: a frame body (bytes) or its unpacked map."""
    msg: AgentMessage = _decode(unpack_body(body) if isinstance(body, bytes) else body, AGENT_MESSAGES)
    return msg


def decode_client_message(body: dict[str, Any] | bytes) -> ClientMessage:
    """A message from a controller: a frame body (bytes) or its unpacked map."""
    msg: ClientMessage = _decode(unpack_body(body) if isinstance(body, bytes) else body, CLIENT_MESSAGES)
    return msg


def _decode(body: dict[str, Any], registry: dict[str, type]) -> Any:
    tag = body.get("t")
    if not isinstance(tag, str) or tag not in registry:
        raise ProtocolError(ErrorCode.UNKNOWN_MESSAGE, f"unknown message type {clip(repr(tag), 64)}")
    return _build(registry[tag], body, tag)


def _build(cls: type, body: dict[str, Any], where: str) -> Any:
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in body:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"{where}: missing field {f.name!r}")
            continue
        bound = _FIELD_BOUNDS.get(f.name, _DEFAULT_BOUND)
        kwargs[f.name] = _check(body[f.name], hints[f.name], f"{where}.{f.name}", bound)
    return cls(**kwargs)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class _Bound:
    """What a field's scalars may be, beyond their type: every str, int and float in
    the field (list items, dict keys and values too) is held to it."""

    max_len: int | None = None  # characters of a str, bytes of a bytes
    text: bool = False  # no control characters: the value is printed, or becomes an env value or a label
    pattern: re.Pattern[str] | None = None  # a str must match (the empty str always may: "not set")
    lo: int | float = INT64_MIN
    hi: int | float = INT64_MAX


# Bounds follow from a field's name, wherever it appears, so every message that
# carries a job_id (or a message added later) is held to the same rule.
# Ints default to int64: what SQLite stores and msgpack's signed range, so no
# 2**64-1 from a peer turns into an OverflowError later. Floats must be finite.
_DEFAULT_BOUND = _Bound()
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # used in paths: no '/', no leading '.', no '..'
_NAME = _Bound(max_len=256, text=True)
_PATH = _Bound(max_len=4096, text=True)
_WORD = _Bound(max_len=64, text=True)
_COUNT = _Bound(lo=0, hi=2**62)
_FIELD_BOUNDS: dict[str, _Bound] = {
    "job_id": _Bound(max_len=128, pattern=_ID),
    "name": _NAME,
    "run_name": _NAME,
    "workflow": _NAME,
    "label": _NAME,
    "image": _Bound(max_len=1024, text=True),
    "agent_version": _WORD,
    "client_version": _WORD,
    "code": _WORD,
    "state": _WORD,
    "stream": _WORD,
    "pull": _WORD,
    "executor": _WORD,
    "workspace": _PATH,
    "snapshot": _PATH,
    "working_dir": _PATH,
    "artifacts_archive": _PATH,
    "path": _PATH,
    "inputs": _PATH,
    "artifacts": _PATH,  # SubmitJob's paths; JobStatus's ArtifactFile fields have their own names
    "public_key": _Bound(max_len=16 * 1024, text=True),
    "pake": _Bound(max_len=1024),  # bytes: a PAKE message and a key confirmation are tens of bytes
    "confirm": _Bound(max_len=1024),
    "message": _Bound(max_len=64 * 1024),
    "error": _Bound(max_len=64 * 1024),
    # Hello's and SubmitJob's resources: counts and sizes, names like "RTX 4090".
    "resources": _Bound(max_len=256, text=True, lo=0, hi=2**53),
    "protocol_version": _Bound(lo=0, hi=2**31 - 1),
    "seq": _COUNT,
    "from_seq": _COUNT,
    "log_lines": _COUNT,
    "size": _COUNT,
    "node": _Bound(lo=0, hi=65535),
    "master_port": _Bound(lo=0, hi=65535),
    "exit_code": _Bound(lo=-(2**31), hi=2**32 - 1),  # negative: killed by a signal
    "grace_s": _Bound(lo=0, hi=30 * 24 * 3600),
    "submitted_at": _Bound(lo=0),
    "started_at": _Bound(lo=0),
    "finished_at": _Bound(lo=0),
}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _check(value: Any, tp: Any, where: str, bound: _Bound = _DEFAULT_BOUND) -> Any:
    """Validate `value` against the annotation `tp` and the field's `bound`; returns the value to store."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        problem = None
        for option in typing.get_args(tp):
            try:
                return _check(value, option, where, bound)
            except ProtocolError as exc:
                # The type matched but the value is out of bounds: say that, not "expected X | Y".
                problem = problem or (exc if _type_matches(value, option) else None)
        raise problem or _mistyped(where, tp, value)
    if tp is type(None):
        if value is None:
            return None
        raise _mistyped(where, tp, value)
    if origin is list:
        if not isinstance(value, list):
            raise _mistyped(where, tp, value)
        (item_tp,) = typing.get_args(tp)
        return [_check(v, item_tp, f"{where}[{i}]", bound) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _mistyped(where, tp, value)
        key_tp, val_tp = typing.get_args(tp)
        return {
            _check(k, key_tp, where, bound): _check(v, val_tp, f"{where}[{clip(repr(k), 40)}]", bound)
            for k, v in value.items()
        }
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a nested message struct (hints are classes)
        if not isinstance(value, dict):
            raise _mistyped(where, tp, value)
        return _build(tp, value, where)
    if not _type_matches(value, tp):
        if tp in (float, int, str, bytes, bool):
            raise _mistyped(where, tp, value)
        raise TypeError(f"protocol schema uses an unsupported type {tp!r} at {where}")
    if tp is float:
        try:
            value = float(value)
        except OverflowError:  # an int past a double's range
            value = math.inf
        if not math.isfinite(value):
            raise _invalid(where, "must be a finite number")
    if tp in (int, float) and not bound.lo <= value <= bound.hi:
        raise _invalid(where, f"out of range ({bound.lo} to {bound.hi})")
    if tp in (str, bytes) and bound.max_len is not None and len(value) > bound.max_len:
        raise _invalid(where, f"{len(value)} {'characters' if tp is str else 'bytes'}, at most {bound.max_len}")
    if tp is str:
        if bound.text and _CONTROL.search(value):
            raise _invalid(where, "holds control characters")
        if bound.pattern is not None and value and not bound.pattern.fullmatch(value):
            raise _invalid(where, "must be letters, digits, '_', '.' or '-', not starting with '.', '_' or '-'")
    return value


def _type_matches(value: Any, tp: Any) -> bool:
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return tp in (str, bytes, bool) and isinstance(value, tp)


def _invalid(where: str, problem: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_MESSAGE, f"{where}: {problem}")


def _mistyped(where: str, tp: Any, value: Any) -> ProtocolError:
    name = getattr(tp, "__name__", str(tp))
    return ProtocolError(ErrorCode.INVALID_MESSAGE, f"{where}: expected {name}, got {type(value).__name__}")


def encode_message(msg: Any) -> bytes:
    """One message as a ready-to-send frame."""
    return encode_frame(to_wire(msg))
