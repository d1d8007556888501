"""The wire protocol between lanpool controllers and runner agents.

This package imports nothing else of lanpool's: both sides depend on it.
Its version (PROTOCOL_VERSION) is separate from the package version and is
exchanged in the Hello messages.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the names are, for type checkers; at run time each is imported on first use
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
        DirectOffer,
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
    "DirectOffer",
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

# Where each public name lives. A verb that reads the store needs JobState, not the message
# dataclasses and their validation (~35 ms of imports, issue #17): a name is imported on first use.
_WHERE = {
    "AGENT_MESSAGES": "protocol.messages",
    "CLIENT_MESSAGES": "protocol.messages",
    "DEFAULT_PORT": "protocol.wire",
    "ENCRYPTION_ALGS": "protocol.wire",
    "MAX_FRAME_BYTES": "protocol.framing",
    "PROTOCOL_VERSION": "protocol.messages",
    "SUBSYSTEM": "protocol.wire",
    "GANG_SUBSYSTEM": "protocol.wire",
    "GANG_USER_PREFIX": "protocol.wire",
    "GangSpec": "protocol.messages",
    "ArtifactFile": "protocol.messages",
    "ArtifactData": "protocol.transfer_messages",
    "ArtifactEnd": "protocol.transfer_messages",
    "ArtifactRange": "protocol.transfer_messages",
    "ArtifactsSent": "protocol.transfer_messages",
    "BlobStored": "protocol.transfer_messages",
    "DirectOffer": "protocol.transfer_messages",
    "FileEntry": "protocol.transfer_messages",
    "GetArtifacts": "protocol.transfer_messages",
    "HaveBlobs": "protocol.transfer_messages",
    "MissingBlobs": "protocol.transfer_messages",
    "PutBlob": "protocol.transfer_messages",
    "Attach": "protocol.messages",
    "ClientHello": "protocol.messages",
    "Error": "protocol.messages",
    "ErrorCode": "protocol.errors",
    "FrameReader": "protocol.framing",
    "GetStatus": "protocol.messages",
    "Hello": "protocol.messages",
    "JobAccepted": "protocol.messages",
    "JobState": "protocol.states",
    "JobStatus": "protocol.messages",
    "LogChunk": "protocol.messages",
    "PairConfirm": "protocol.pairing_messages",
    "PairReply": "protocol.pairing_messages",
    "PairStart": "protocol.pairing_messages",
    "Paired": "protocol.pairing_messages",
    "Ping": "protocol.messages",
    "Pong": "protocol.messages",
    "ProtocolError": "protocol.errors",
    "StopJob": "protocol.messages",
    "SubmitJob": "protocol.messages",
    "decode_agent_message": "protocol.messages",
    "decode_client_message": "protocol.messages",
    "encode_frame": "protocol.framing",
    "encode_message": "protocol.messages",
    "key_text": "protocol.wire",
    "unpack_body": "protocol.framing",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'protocol' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
