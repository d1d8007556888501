"""Length-prefixed MessagePack frames, and the bounds on what one frame may hold.

A frame is a 4-byte big-endian body length followed by the body: a MessagePack
map with a "t" tag. The length is checked against MAX_FRAME_BYTES before any of
the body is buffered, so a peer cannot make the other side allocate gigabytes.

Bytes alone do not bound memory: one byte of MessagePack is a whole object
(`0x80` is an empty map, ~64 bytes of Python), so a 16 MiB frame of empty maps
used to cost ~1.2 GiB to decode. Before any object is built, `check_structure`
walks the body's headers (no objects made) and refuses it when it holds more
than MAX_ELEMENTS values, nests deeper than MAX_DEPTH, or uses an extension
type or a non-finite float. The limits, and why they fit real messages:

- MAX_FRAME_BYTES, 16 MiB: a log chunk is one `bin` value of at most this;
  the agent sends 256 KiB chunks, so whole lines up to ~16 MiB still travel.
- MAX_ELEMENTS, 1 Mi values (every key, value and container counts): a
  JobStatus lists 5 values per artifact file (map, 2 keys, path, size), so
  ~200k files; a SubmitJob with 10k env vars and 1k commands is ~21k.
  Decoding the worst frame within it raised peak RSS by ~75 MiB (1 Mi
  empty maps, or 2-character strings); walking a refused one takes ~0.3 s.
- MAX_DEPTH, 32 levels: messages nest 3 deep (JobStatus.artifacts[i].path);
  the slack is for fields added later that older peers ignore.
"""

import math
import struct
from typing import Any

import msgpack

from lanpool.protocol.errors import ErrorCode, ProtocolError, clip

MAX_FRAME_BYTES = 16 * 1024 * 1024
MAX_ELEMENTS = 1024 * 1024
MAX_DEPTH = 32
_HEADER = struct.Struct(">I")

# Lead bytes of the MessagePack formats outside the fix* ranges, by what the walk does with them.
_LENGTH = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}  # bin8..32, str8..32: skip the payload
_FIXED = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}  # ints: skip the payload
_ARRAY = {0xDC: 2, 0xDD: 4}  # array16/32: length field size
_MAP = {0xDE: 2, 0xDF: 4}  # map16/32
_EXT = frozenset((0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8))
_FLOAT = {0xCA: struct.Struct(">f"), 0xCB: struct.Struct(">d")}


def encode_frame(body: dict[str, Any]) -> bytes:
    """Pack one message map into a frame."""
    payload: bytes = msgpack.packb(body, use_bin_type=True)
    if len(payload) > MAX_FRAME_BYTES:
        raise ProtocolError(ErrorCode.FRAME_TOO_LARGE, f"message of {len(payload)} bytes exceeds {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(payload)) + payload


class FrameReader:
    """Incremental splitter: feed bytes as they arrive, take whole frame bodies out.

    Raises ProtocolError(fatal=True) for an oversized length prefix: the stream
    cannot be trusted after it. A body that is not a message map is only found
    by `unpack_body`, which raises a non-fatal error: the next frame is fine.

    Each body is copied once: out of the piece it came in, or (one that came in
    several pieces) by joining views of them; the pieces are not gathered in a
    buffer first (at ~3 GB/s, each copy of a 1 GiB artifact stream costs ~0.35 s).
    """

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self._max = max_frame
        self._head = b""  # a length prefix that came in pieces, so far
        self._size: int | None = None  # the body's size, once its prefix is whole
        self._parts: list[memoryview] = []  # the body so far, as views of the pieces it came in
        self._have = 0  # bytes in _parts

    def feed(self, data: bytes) -> list[bytes]:
        if not isinstance(data, bytes):
            data = bytes(data)  # the views below must not see a caller's buffer change
        out: list[bytes] = []
        end = len(data)
        with memoryview(data) as view:
            pos = 0
            while pos < end:
                if self._size is None:
                    if not self._head and end - pos >= _HEADER.size:
                        (length,) = _HEADER.unpack_from(data, pos)
                        pos += _HEADER.size
                    else:
                        take = min(_HEADER.size - len(self._head), end - pos)
                        self._head += data[pos : pos + take]
                        pos += take
                        if len(self._head) < _HEADER.size:
                            break
                        (length,) = _HEADER.unpack(self._head)
                        self._head = b""
                    if length > self._max:
                        raise ProtocolError(
                            ErrorCode.FRAME_TOO_LARGE,
                            f"frame of {length} bytes exceeds the limit of {self._max}",
                            fatal=True,
                        )
                    if not self._parts and end - pos >= length:  # whole in this piece: one slice
                        out.append(data[pos : pos + length])
                        pos += length
                        continue
                    self._size = length
                take = min(self._size - self._have, end - pos)
                self._parts.append(view[pos : pos + take])
                self._have += take
                pos += take
                if self._have == self._size:
                    out.append(b"".join(self._parts))
                    self._parts, self._have, self._size = [], 0, None
        return out

    @property
    def pending(self) -> int:
        """Bytes received but not yet part of a whole frame."""
        return len(self._head) + self._have + (_HEADER.size if self._size is not None else 0)


def check_structure(body: bytes | bytearray, max_elements: int = MAX_ELEMENTS, max_depth: int = MAX_DEPTH) -> None:
    """Refuse a body before it is unpacked: too many values, too deep, ext types, NaN/inf, or truncated.

    Reads only headers and skips payloads, so it costs one step per value up
    to `max_elements`, whatever the body's size.
    """
    size = len(body)
    pos = 0
    elements = 0
    open_counts: list[int] = []  # values still to come in each open array/map
    while True:
        if pos >= size:
            raise _bad("the frame ends in the middle of a value")
        elements += 1
        if elements > max_elements:
            raise _bad(f"the frame holds more than {max_elements} values")
        lead = body[pos]
        pos += 1
        children = 0
        if lead <= 0x7F or lead >= 0xE0 or lead in (0xC0, 0xC2, 0xC3):
            pass  # fixint, nil, bool: the lead byte is the whole value
        elif lead <= 0x8F:
            children = 2 * (lead & 0x0F)
        elif lead <= 0x9F:
            children = lead & 0x0F
        elif lead <= 0xBF:
            pos += lead & 0x1F
        elif lead in _LENGTH:
            width = _LENGTH[lead]
            pos += width + int.from_bytes(body[pos : pos + width], "big")
        elif lead in _FIXED:
            pos += _FIXED[lead]
        elif lead in _ARRAY or lead in _MAP:
            width = _ARRAY.get(lead) or _MAP[lead]
            if pos + width > size:
                raise _bad("the frame ends in the middle of a value")
            children = int.from_bytes(body[pos : pos + width], "big") * (2 if lead in _MAP else 1)
            pos += width
        elif lead in _FLOAT:
            fmt = _FLOAT[lead]
            if pos + fmt.size > size:
                raise _bad("the frame ends in the middle of a value")
            if not math.isfinite(fmt.unpack_from(body, pos)[0]):
                raise _bad("the frame holds a non-finite number (NaN or infinity)")
            pos += fmt.size
        elif lead in _EXT:
            raise _bad("the frame uses a MessagePack extension type, which lanpool never sends")
        else:  # 0xC1: never used
            raise _bad(f"byte 0x{lead:02x} at offset {pos - 1} is not MessagePack")
        if pos > size:
            raise _bad("the frame ends in the middle of a value")
        if children:
            # Each value takes at least a byte: a count past the end is a lie, refused before it is trusted.
            if children > size - pos:
                raise _bad("the frame ends in the middle of a value")
            if len(open_counts) >= max_depth:
                raise _bad(f"the frame nests deeper than {max_depth} levels")
            open_counts.append(children)
            continue
        while open_counts:  # a whole value ended: it completes its container's slot
            open_counts[-1] -= 1
            if open_counts[-1]:
                break
            open_counts.pop()
        if not open_counts:
            break
    if pos != size:
        raise _bad(f"{size - pos} bytes after the message")


def unpack_body(body: bytes | bytearray) -> dict[str, Any]:
    """The message map in one frame body."""
    check_structure(body)
    try:
        # The walk above bounds every count; these options repeat the bounds
        # inside msgpack itself, so no container is pre-sized past them.
        value = msgpack.unpackb(
            body,
            raw=False,
            strict_map_key=True,
            max_array_len=MAX_ELEMENTS,
            max_map_len=MAX_ELEMENTS,
            max_str_len=MAX_FRAME_BYTES,
            max_bin_len=MAX_FRAME_BYTES,
            max_ext_len=0,
        )
    except Exception as exc:  # msgpack raises several unrelated types
        raise _bad(f"frame is not valid MessagePack: {clip(str(exc))}") from None
    if not isinstance(value, dict) or not isinstance(value.get("t"), str):
        raise ProtocolError(ErrorCode.BAD_FRAME, "frame is not a message map with a 't' tag")
    return value


def _bad(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.BAD_FRAME, message)
