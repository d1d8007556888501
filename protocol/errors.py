"""Protocol errors: the codes carried in Error messages and the exception raised on bad input."""

from enum import StrEnum


class ErrorCode(StrEnum):
    """Codes of the Error message; stable strings, part of the protocol."""

    BAD_FRAME = "bad_frame"  # not MessagePack, or not a map with a tag
    FRAME_TOO_LARGE = "frame_too_large"  # length prefix over MAX_FRAME_BYTES
    UNKNOWN_MESSAGE = "unknown_message"  # a tag this side does not know
    INVALID_MESSAGE = "invalid_message"  # known tag, missing or mistyped field
    VERSION_MISMATCH = "version_mismatch"
    UNKNOWN_JOB = "unknown_job"
    JOB_EXISTS = "job_exists"
    NOT_PAIRED = "not_paired"  # a pairing-only connection asked for something else
    BAD_REQUEST = "bad_request"  # valid message the agent cannot act on
    # A blob the submit names is gone from the runner's cache, or no longer holds what its hash
    # names: send it again (HaveBlobs now lists it), then submit again.
    MISSING_BLOBS = "missing_blobs"
    INTERNAL = "internal"


class ProtocolError(Exception):
    """A frame or message that cannot be accepted.

    `fatal` means the byte stream cannot be resynchronised (bad length
    prefix), so the connection must be closed after replying.
    """

    def __init__(self, code: ErrorCode, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fatal = fatal


def clip(text: str, limit: int = 200) -> str:
    """`text` cut to `limit` characters: the most of a peer's value an error message echoes,
    so no reply grows with what was sent (a 16 MB job id gets a short error)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
