"""Typed wire messages: frozen dataclasses with a tag, and one decoder per direction.

The pairing messages live in protocol/pairing_messages.py, the transfer ones (blobs up,
artifacts down) in protocol/transfer_messages.py; both registries are here.

Rules that keep old and new peers talking:
- new fields get defaults, so an older peer's message still decodes;
- unknown fields are ignored, unknown tags raise UNKNOWN_MESSAGE;
- types are checked here, before anything acts on a message.
"""

import dataclasses
from dataclasses import field
from typing import Any, ClassVar

from lanpool.protocol.errors import ErrorCode, ProtocolError, clip
from lanpool.protocol.framing import encode_frame, unpack_body
from lanpool.protocol.message_base import Message, record
from lanpool.protocol.pairing_messages import PairConfirm, Paired, PairReply, PairStart
from lanpool.protocol.schema import build
from lanpool.protocol.states import JobState
from lanpool.protocol.transfer_messages import (
    ArtifactData,
    ArtifactEnd,
    ArtifactsSent,
    BlobStored,
    DirectOffer,
    FileEntry,
    GetArtifacts,
    HaveBlobs,
    MissingBlobs,
    PutBlob,
)

# 2: pairing is a PAKE (PairStart/PairReply/PairConfirm) instead of a code sent as a password.
# 3: no SFTP: code goes up as content-addressed blobs (HaveBlobs/PutBlob, SubmitJob.files),
#    artifacts come back as streamed files (GetArtifacts/ArtifactData/ArtifactEnd/ArtifactsSent).
# 4: every multi-node job is a gang its runners start (SubmitJob.gang, with attempts at the
#    barrier); no controller-picked MASTER_PORT (SubmitJob.pick_master_port, JobAccepted.master_port).
# 5: SubmitJob.image_implicit (provider python's image never makes a process runner refuse a job),
#    SubmitJob.hold_base (pip holds the runner's torch/Lightning at the base's versions).
# 6: SubmitJob.port_count (`ports: N`: the runner picks N free ports, $PORT_0...), answered in
#    JobAccepted.ports.
# 7: SubmitJob.priority (a workflow's `priority:`: orders one owner's waiting jobs on a shared
#    runner, agent/jobs/turns.py).
# 8: SubmitJob.idle_s (a dev environment ends after that long with no session into it);
#    Hello.sshd_user/sshd_host_key (the dev OpenSSH server a job's `ssh-config` entry reaches).
PROTOCOL_VERSION = 8

# A JobStatus carries at most this many of the job's artifact files to a controller whose
# ClientHello names ARTIFACT_PAGES, with `artifacts_total` saying how many there are; the
# controller asks for the rest a page at a time (GetStatus.artifacts_from). A status of 150k
# files (4 MiB) took the agent 1.3 s to build and encode, on its event loop; a page of 5,000
# takes ~65 ms, in a thread (docs/bench/bench-artifact-status.json). Older controllers still
# get the whole list (in a thread too).
STATUS_ARTIFACTS = 5000
ARTIFACT_PAGES = "artifact-pages"


@record
class ArtifactFile(Message):
    """One file of a job's artifacts (path relative to the workspace)."""

    path: str
    size: int


# -- agent -> controller ----------------------------------------------------


@record
class Hello(Message):
    """First message an agent sends on a new lanpool channel."""

    TAG: ClassVar[str] = "hello"
    protocol_version: int
    agent_version: str
    name: str
    resources: dict[str, int | str] = field(default_factory=dict)
    features: list[str] = field(default_factory=list)  # what a controller may ask beyond the version (additive)
    # The runner's dev sshd (protocol/shell_sshd.py DEV_SSHD): the user to log in as and the base64
    # of its persistent ed25519 host key, which an `ssh-config` entry pins; "" when it offers none.
    sshd_user: str = ""
    sshd_host_key: str = ""


@record
class JobAccepted(Message):
    """A job the agent took: its id and workspace."""

    TAG: ClassVar[str] = "job_accepted"
    job_id: str
    workspace: str
    ports: list[int] = field(default_factory=list)  # the ports the job listens on: declared, then picked


@record
class LogChunk(Message):
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
    at: float = 0.0  # when the agent received the first line (Unix seconds; 0: not known)

    @property
    def n_lines(self) -> int:
        return self.data.count(b"\n")


@record
class JobStatus(Message):
    """A job's state, as the agent reports it."""

    TAG: ClassVar[str] = "job_status"
    job_id: str
    state: str
    exit_code: int | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    error: str = ""
    log_lines: int = 0  # lines in the spool so far
    # The job's artifact files, listed when it ended (fetched with GetArtifacts).
    artifacts: list[ArtifactFile] = field(default_factory=list)
    # Queued on the runner: its place (1 = next) and why it waits; once retried,
    # which attempt this is (1 = the first retry) of how many retries are allowed.
    position: int = 0
    reason: str = ""
    attempt: int = 0
    retry_limit: int = 0
    # How many artifact files the job has when `artifacts` is one page of them, from the file
    # GetStatus.artifacts_from named (STATUS_ARTIFACTS at most); 0: `artifacts` is all of them.
    artifacts_total: int = 0

    def __post_init__(self) -> None:
        if self.state not in JobState.__members__:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"job_status.state: unknown state {self.state!r}")


@record
class Error(Message):
    """A request the agent refused or failed: a code from ErrorCode and one line of text."""

    TAG: ClassVar[str] = "error"
    code: str
    message: str
    job_id: str = ""


@record
class Pong(Message):
    """The answer to a Ping, with its nonce."""

    TAG: ClassVar[str] = "pong"
    nonce: int


# -- controller -> agent ----------------------------------------------------


@record
class ClientHello(Message):
    """First message a controller sends on a new lanpool channel."""

    TAG: ClassVar[str] = "client_hello"
    protocol_version: int
    client_version: str
    features: list[str] = field(default_factory=list)  # what an agent may send beyond the version: ARTIFACT_PAGES


@record
class GangSpec(Message):
    """A detached multi-node job's member (agent/gang/hub.py): member `gang_rank` of `gang_size`, whose
    agent meets node 0's agent at `coordinator` ("host:port", host key `host_key`, pinned) with
    `gang_token`, a secret the controller draws per gang. `gang_order` (the controller's clock at
    submit) orders gangs the same way on every runner."""

    gang_id: str
    gang_size: int
    gang_rank: int
    coordinator: str
    host_key: str
    gang_token: str
    gang_order: float


@record
class SubmitJob(Message):
    """Start a job. The controller picks `job_id` so it is stored before sending."""

    TAG: ClassVar[str] = "submit"
    job_id: str
    run_name: str
    workflow: str
    commands: list[str]
    env: dict[str, str] = field(default_factory=dict)
    artifacts: list[str] = field(default_factory=list)
    # The workspace: the code snapshot, then the artifacts of reused dependencies at
    # their original paths (a later entry replaces an earlier one of the same path).
    # Every blob named must be in the runner's cache (HaveBlobs/PutBlob first).
    files: list[FileEntry] = field(default_factory=list)
    working_dir: str = ""
    image: str = ""  # container image; "" = the runner's process executor
    # `image` is the controller's default for provider python, not the workflow's: a runner that
    # runs jobs as processes runs this one so (with `python`), instead of refusing it.
    image_implicit: bool = False
    pull: str = "missing"  # never | missing | always
    # gpu (count), cpu, memory_mb, shm_size ("8g"): what the job needs
    resources: dict[str, int | str] = field(default_factory=dict)
    executor: str = ""  # hint: "docker" or "process"; "" = the runner decides
    python: str = ""  # "3.10": the version the job needs ("" = the runner's base interpreter)
    requirements: str = ""  # a file in the workspace (relative to working_dir) installed before the commands
    # pip holds the runner's torch/Lightning (and CUDA) at the base's versions (PIP_CONSTRAINT); False: lets them change.
    hold_base: bool = True
    # Ports the job listens on (runner's loopback), forwarded to the controller while it runs.
    ports: list[int] = field(default_factory=list)
    # And this many more, free ones the runner picks (`ports: N`), given to the job as $PORT_0... and
    # forwarded like those above (JobAccepted.ports says which).
    port_count: int = 0
    # Secret texts in `env`: the runner writes *** for them in its log and journal (never to disk in clear).
    masked: list[str] = field(default_factory=list)
    # Time limit and retries, kept by the runner (no controller needed): 0 = no limit / no retry.
    max_duration_s: float = 0.0
    retry_on: list[str] = field(default_factory=list)  # "failure", "lost"
    retry_limit: int = 0
    retry_delay_s: float = 0.0
    # A detached DAG's step (agent/jobs/dag.py): starts once every job named here is DONE on this
    # runner, with their artifacts staged over its workspace. `run_key` is a secret the run's
    # steps share: `after` may name only jobs submitted with the same key.
    after: list[str] = field(default_factory=list)
    run_key: str = ""
    gang: GangSpec | None = None  # a detached multi-node job's member (agent/gang/hub.py)
    # `run -d`: answer once the job is accepted (journalled, its files staged), not once it
    # started; nobody follows it, and its start (a process, a container) is the runner's affair.
    detached: bool = False
    priority: int = 0  # among its owner's waiting jobs on the runner: higher first (agent/jobs/turns.py)
    idle_s: float = 0.0  # a dev environment: stopped after this long with no SSH/exec session (0: never)


@record
class StopJob(Message):
    """Ask the agent to stop a job."""

    TAG: ClassVar[str] = "stop"
    job_id: str
    abort: bool = False  # abort: do not pack artifacts
    grace_s: float | None = None  # SIGTERM -> SIGKILL delay; agent default if None


@record
class Attach(Message):
    """Stream a job's log from `from_seq`, then its final JobStatus."""

    TAG: ClassVar[str] = "attach"
    job_id: str
    from_seq: int = 0
    follow: bool = True  # False: send what exists now, then the current status
    # Followed: a JobStatus also at each change of its state on the way (QUEUED, RUNNING, a
    # retry's QUEUED), between the log's chunks; only the last, the job's end, ends the stream.
    states: bool = False


@record
class GetStatus(Message):
    """Ask for a job's state."""

    TAG: ClassVar[str] = "get_status"
    job_id: str
    artifacts_from: int = 0  # the first artifact file of the page wanted (JobStatus.artifacts_total)


@record
class Ping(Message):
    """A liveness probe; the agent answers Pong with the same nonce."""

    TAG: ClassVar[str] = "ping"
    nonce: int


AgentMessage = (
    Hello
    | JobAccepted
    | LogChunk
    | JobStatus
    | Error
    | PairReply
    | Paired
    | Pong
    | MissingBlobs
    | BlobStored
    | ArtifactData
    | ArtifactEnd
    | ArtifactsSent
    | DirectOffer
)
ClientMessage = (
    ClientHello
    | SubmitJob
    | StopJob
    | Attach
    | GetStatus
    | PairStart
    | PairConfirm
    | Ping
    | HaveBlobs
    | PutBlob
    | GetArtifacts
)

AGENT_MESSAGES: dict[str, type] = {
    c.TAG: c
    for c in (
        Hello,
        JobAccepted,
        LogChunk,
        JobStatus,
        Error,
        PairReply,
        Paired,
        Pong,
        MissingBlobs,
        BlobStored,
        ArtifactData,
        ArtifactEnd,
        ArtifactsSent,
        DirectOffer,
    )
}
CLIENT_MESSAGES: dict[str, type] = {
    c.TAG: c
    for c in (
        ClientHello,
        SubmitJob,
        StopJob,
        Attach,
        GetStatus,
        PairStart,
        PairConfirm,
        Ping,
        HaveBlobs,
        PutBlob,
        GetArtifacts,
    )
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
    return build(registry[tag], body, tag)


def encode_message(msg: Any) -> bytes:
    """One message as a ready-to-send frame."""
    return encode_frame(to_wire(msg))
