"""The wire protocol between lanpool controllers and runner agents.

This package imports nothing else of lanpool's: both sides depend on it.
Its version (PROTOCOL_VERSION) is separate from the package version and is
exchanged in the Hello messages.
"""

from protocol.errors import ErrorCode, ProtocolError
from protocol.framing import MAX_FRAME_BYTES, FrameReader, encode_frame, unpack_body
from protocol.messages import (
    AGENT_MESSAGES,
    CLIENT_MESSAGES,
    PROTOCOL_VERSION,
    ArtifactFile,
    Attach,
    ClientHello,
    Error,
    GangSpec,
    GetStatus,
    Hello,
    JobAccepted,
    JobStatus,
    LogChunk,
    Ping,
    Pong,
    StopJob,
    SubmitJob,
    decode_agent_message,
    decode_client_message,
    encode_message,
)
from protocol.pairing_messages import PairConfirm, Paired, PairReply, PairStart
from protocol.states import JobState
from protocol.transfer_messages import (
    ArtifactData,
    ArtifactEnd,
    ArtifactRange,
    ArtifactsSent,
    BlobStored,
    FileEntry,
    GetArtifacts,
    HaveBlobs,
    MissingBlobs,
    PutBlob,
)
from protocol.wire import DEFAULT_PORT, ENCRYPTION_ALGS, GANG_SUBSYSTEM, GANG_USER_PREFIX, SUBSYSTEM, key_text

__all__ = [
    "AGENT_MESSAGES",
    "CLIENT_MESSAGES",
    "DEFAULT_PORT",
    "ENCRYPTION_ALGS",
    "MAX_FRAME_BYTES",
    "PROTOCOL_VERSION",
    "SUBSYSTEM",
    "GANG_SUBSYSTEM",
    "GANG_USER_PREFIX",
    "GangSpec",
    "ArtifactFile",
    "ArtifactData",
    "ArtifactEnd",
    "ArtifactRange",
    "ArtifactsSent",
    "BlobStored",
    "FileEntry",
    "GetArtifacts",
    "HaveBlobs",
    "MissingBlobs",
    "PutBlob",
    "Attach",
    "ClientHello",
    "Error",
    "ErrorCode",
    "FrameReader",
    "GetStatus",
    "Hello",
    "JobAccepted",
    "JobState",
    "JobStatus",
    "LogChunk",
    "PairConfirm",
    "PairReply",
    "PairStart",
    "Paired",
    "Ping",
    "Pong",
    "ProtocolError",
    "StopJob",
    "SubmitJob",
    "decode_agent_message",
    "decode_client_message",
    "encode_frame",
    "encode_message",
    "key_text",
    "unpack_body",
]
