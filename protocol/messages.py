"""Typed wire messages: frozen dataclasses with a tag, and one decoder per direction.

Rules that keep old and new peers talking (see STYLE.md 5):
- new fields get defaults, so an older peer's message still decodes;
- unknown fields are ignored, unknown tags raise UNKNOWN_MESSAGE;
- types are checked here, before anything acts on a message.
"""

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

from protocol.errors import ErrorCode, ProtocolError
from protocol.framing import encode_frame, unpack_body
from protocol.states import JobState

PROTOCOL_VERSION = 1


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
class Paired:
    """The controller's key is now authorized; reply to Pair."""

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
class Pair:
    """Sent on a connection authenticated with a pairing code: authorize this key."""

    TAG: ClassVar[str] = "pair"
    public_key: str
    label: str = ""


@dataclass(frozen=True)
class Ping:
    TAG: ClassVar[str] = "ping"
    nonce: int


AgentMessage = Hello | JobAccepted | LogChunk | JobStatus | Error | Paired | Pong
ClientMessage = ClientHello | SubmitJob | StopJob | Attach | GetStatus | Pair | Ping

AGENT_MESSAGES: dict[str, type] = {c.TAG: c for c in (Hello, JobAccepted, LogChunk, JobStatus, Error, Paired, Pong)}
CLIENT_MESSAGES: dict[str, type] = {c.TAG: c for c in (ClientHello, SubmitJob, StopJob, Attach, GetStatus, Pair, Ping)}


def to_wire(msg: Any) -> dict:
    """The map that goes into a frame: the fields plus the tag under "t"."""
    body = dataclasses.asdict(msg)
    body["t"] = msg.TAG
    return body


def decode_agent_message(body: dict | bytes) -> AgentMessage:
    """A message from an agent: a frame body (bytes) or its unpacked map."""
    return _decode(unpack_body(body) if isinstance(body, bytes) else body, AGENT_MESSAGES)


def decode_client_message(body: dict | bytes) -> ClientMessage:
    """A message from a controller: a frame body (bytes) or its unpacked map."""
    return _decode(unpack_body(body) if isinstance(body, bytes) else body, CLIENT_MESSAGES)


def _decode(body: dict, registry: dict[str, type]) -> Any:
    tag = body.get("t")
    cls = registry.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise ProtocolError(ErrorCode.UNKNOWN_MESSAGE, f"unknown message type {tag!r}")
    return _build(cls, body, tag)


def _build(cls: type, body: dict, where: str) -> Any:
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in body:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"{where}: missing field {f.name!r}")
            continue
        kwargs[f.name] = _check(body[f.name], hints[f.name], f"{where}.{f.name}")
    return cls(**kwargs)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _check(value: Any, tp: Any, where: str) -> Any:
    """Validate `value` against the annotation `tp`; returns the value to store."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        for option in typing.get_args(tp):
            try:
                return _check(value, option, where)
            except ProtocolError:
                continue
        raise _mistyped(where, tp, value)
    if tp is type(None):
        if value is None:
            return None
        raise _mistyped(where, tp, value)
    if origin is list:
        if not isinstance(value, list):
            raise _mistyped(where, tp, value)
        (item_tp,) = typing.get_args(tp)
        return [_check(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _mistyped(where, tp, value)
        key_tp, val_tp = typing.get_args(tp)
        return {_check(k, key_tp, where): _check(v, val_tp, f"{where}[{k!r}]") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise _mistyped(where, tp, value)
        return _build(tp, value, where)
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise _mistyped(where, tp, value)
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _mistyped(where, tp, value)
    if tp in (str, bytes, bool):
        if isinstance(value, tp):
            return value
        raise _mistyped(where, tp, value)
    raise TypeError(f"protocol schema uses an unsupported type {tp!r} at {where}")


def _mistyped(where: str, tp: Any, value: Any) -> ProtocolError:
    name = getattr(tp, "__name__", str(tp))
    return ProtocolError(ErrorCode.INVALID_MESSAGE, f"{where}: expected {name}, got {type(value).__name__}")


def encode_message(msg: Any) -> bytes:
    """One message as a ready-to-send frame."""
    return encode_frame(to_wire(msg))
