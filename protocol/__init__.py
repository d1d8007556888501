"""The wire protocol between lanpool controllers and runner agents.

This package imports nothing else of lanpool's: both sides depend on it.
Its version (PROTOCOL_VERSION) is separate from the package version and is
exchanged in the Hello messages.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the names are, for type checkers; at run time each is imported on first use
    from lanpool.protocol.errors import ErrorCode, ProtocolError
    from lanpool.protocol.framing import MAX_FRAME_BYTES, FrameReader, encode_frame, unpack_body
    from lanpool.protocol.messages import (
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
    from lanpool.protocol.pairing_messages import PairConfirm, Paired, PairReply, PairStart
    from lanpool.protocol.states import JobState
    from lanpool.protocol.transfer_messages import (
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
    from lanpool.protocol.wire import (
        DEFAULT_PORT,
        ENCRYPTION_ALGS,
        GANG_SUBSYSTEM,
        GANG_USER_PREFIX,
        SUBSYSTEM,
        key_text,
    )

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
# dataclasses and their validation (~35 ms of imports): a name is imported on first use.
_WHERE = {
    "AGENT_MESSAGES": "lanpool.protocol.messages",
    "CLIENT_MESSAGES": "lanpool.protocol.messages",
    "DEFAULT_PORT": "lanpool.protocol.wire",
    "ENCRYPTION_ALGS": "lanpool.protocol.wire",
    "MAX_FRAME_BYTES": "lanpool.protocol.framing",
    "PROTOCOL_VERSION": "lanpool.protocol.messages",
    "SUBSYSTEM": "lanpool.protocol.wire",
    "GANG_SUBSYSTEM": "lanpool.protocol.wire",
    "GANG_USER_PREFIX": "lanpool.protocol.wire",
    "GangSpec": "lanpool.protocol.messages",
    "ArtifactFile": "lanpool.protocol.messages",
    "ArtifactData": "lanpool.protocol.transfer_messages",
    "ArtifactEnd": "lanpool.protocol.transfer_messages",
    "ArtifactRange": "lanpool.protocol.transfer_messages",
    "ArtifactsSent": "lanpool.protocol.transfer_messages",
    "BlobStored": "lanpool.protocol.transfer_messages",
    "DirectOffer": "lanpool.protocol.transfer_messages",
    "FileEntry": "lanpool.protocol.transfer_messages",
    "GetArtifacts": "lanpool.protocol.transfer_messages",
    "HaveBlobs": "lanpool.protocol.transfer_messages",
    "MissingBlobs": "lanpool.protocol.transfer_messages",
    "PutBlob": "lanpool.protocol.transfer_messages",
    "Attach": "lanpool.protocol.messages",
    "ClientHello": "lanpool.protocol.messages",
    "Error": "lanpool.protocol.messages",
    "ErrorCode": "lanpool.protocol.errors",
    "FrameReader": "lanpool.protocol.framing",
    "GetStatus": "lanpool.protocol.messages",
    "Hello": "lanpool.protocol.messages",
    "JobAccepted": "lanpool.protocol.messages",
    "JobState": "lanpool.protocol.states",
    "JobStatus": "lanpool.protocol.messages",
    "LogChunk": "lanpool.protocol.messages",
    "PairConfirm": "lanpool.protocol.pairing_messages",
    "PairReply": "lanpool.protocol.pairing_messages",
    "PairStart": "lanpool.protocol.pairing_messages",
    "Paired": "lanpool.protocol.pairing_messages",
    "Ping": "lanpool.protocol.messages",
    "Pong": "lanpool.protocol.messages",
    "ProtocolError": "lanpool.protocol.errors",
    "StopJob": "lanpool.protocol.messages",
    "SubmitJob": "lanpool.protocol.messages",
    "decode_agent_message": "lanpool.protocol.messages",
    "decode_client_message": "lanpool.protocol.messages",
    "encode_frame": "lanpool.protocol.framing",
    "encode_message": "lanpool.protocol.messages",
    "key_text": "lanpool.protocol.wire",
    "unpack_body": "lanpool.protocol.framing",
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
