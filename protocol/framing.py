"""Length-prefixed MessagePack frames.

A frame is a 4-byte big-endian body length followed by the body: a MessagePack
map with a "t" tag. The length is checked against MAX_FRAME_BYTES before any of
the body is buffered, so a peer cannot make the other side allocate gigabytes.
"""

import struct

import msgpack

from protocol.errors import ErrorCode, ProtocolError

MAX_FRAME_BYTES = 16 * 1024 * 1024
_HEADER = struct.Struct(">I")


def encode_frame(body: dict) -> bytes:
    """Pack one message map into a frame."""
    payload = msgpack.packb(body, use_bin_type=True)
    if len(payload) > MAX_FRAME_BYTES:
        raise ProtocolError(ErrorCode.FRAME_TOO_LARGE, f"message of {len(payload)} bytes exceeds {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(payload)) + payload


class FrameReader:
    """Incremental splitter: feed bytes as they arrive, take whole frame bodies out.

    Raises ProtocolError(fatal=True) for an oversized length prefix: the stream
    cannot be trusted after it. A body that is not a message map is only found
    by `unpack_body`, which raises a non-fatal error: the next frame is fine.
    """

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        while len(self._buf) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buf)
            if length > self._max:
                raise ProtocolError(
                    ErrorCode.FRAME_TOO_LARGE,
                    f"frame of {length} bytes exceeds the limit of {self._max}",
                    fatal=True,
                )
            end = _HEADER.size + length
            if len(self._buf) < end:
                break
            body = bytes(self._buf[_HEADER.size : end])
            del self._buf[:end]
            out.append(body)
        return out

    @property
    def pending(self) -> int:
        """Bytes received but not yet part of a whole frame."""
        return len(self._buf)


def unpack_body(body: bytes) -> dict:
    """The message map in one frame body."""
    try:
        value = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ProtocolError(ErrorCode.BAD_FRAME, f"frame is not valid MessagePack: {exc}") from None
    if not isinstance(value, dict) or not isinstance(value.get("t"), str):
        raise ProtocolError(ErrorCode.BAD_FRAME, "frame is not a message map with a 't' tag")
    return value
