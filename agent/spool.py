"""Append-only log spool of one job, with line sequence numbers.

Each record is a header (first line's seq, line count, stream id, byte length)
and whole lines. Lines are numbered per job across streams, so readers resume
from any seq and get each line once. The file is the single source for every
reader: live followers and late re-attaches read the same bytes.
"""

import bisect
import os
import struct
from dataclasses import dataclass
from pathlib import Path

_HEADER = struct.Struct(">QIBI")  # seq, n_lines, stream id, length
STREAMS = ("out", "err", "sys", "met")  # met: metrics JSON lines (agent/metrics_tail.py)
_STREAM_IDS = {name: i for i, name in enumerate(STREAMS)}


@dataclass(frozen=True)
class SpoolRecord:
    seq: int
    stream: str
    data: bytes  # whole lines, each ending in b"\n"

    @property
    def n_lines(self) -> int:
        return self.data.count(b"\n")


class LogSpool:
    """Writer and reader of one spool file (one writer, any number of readers)."""

    def __init__(self, path: Path, *, writable: bool = True) -> None:
        self.path = path
        self._seqs: list[int] = []  # first seq of each record
        self._offsets: list[int] = []
        self.next_seq = 0
        self.size = 0
        if path.exists():
            self._load_index(repair=writable)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if writable else -1

    def _load_index(self, repair: bool) -> None:
        with open(self.path, "rb") as fh:
            data = fh.read()
        pos = 0
        while pos + _HEADER.size <= len(data):
            seq, n, _stream, length = _HEADER.unpack_from(data, pos)
            if pos + _HEADER.size + length > len(data):
                break  # torn last record from a crash: ignored, then overwritten below
            self._seqs.append(seq)
            self._offsets.append(pos)
            self.next_seq = seq + n
            pos += _HEADER.size + length
        if pos != len(data) and repair:
            os.truncate(self.path, pos)
        self.size = pos

    def append(self, stream: str, lines: bytes) -> int:
        """Append whole lines (must end with b"\\n"); returns the first line's seq."""
        n = lines.count(b"\n")
        if n == 0:
            return self.next_seq
        seq = self.next_seq
        os.write(self._fd, _HEADER.pack(seq, n, _STREAM_IDS[stream], len(lines)) + lines)
        self._seqs.append(seq)
        self._offsets.append(self.size)
        self.size += _HEADER.size + len(lines)
        self.next_seq = seq + n
        return seq

    def read(self, from_seq: int, max_bytes: int = 256 * 1024) -> list[SpoolRecord]:
        """Records holding lines from `from_seq` on, about `max_bytes` in all.

        The first record is cut so that it starts exactly at `from_seq`.
        """
        if from_seq >= self.next_seq or not self._seqs:
            return []
        i = max(0, bisect.bisect_right(self._seqs, from_seq) - 1)
        runs: list[tuple[int, str, list[bytes]]] = []  # (seq, stream, parts): same-stream runs merged
        total = 0
        with open(self.path, "rb") as fh:
            fh.seek(self._offsets[i])
            while i < len(self._seqs) and total < max_bytes:
                seq, n, stream_id, length = _HEADER.unpack(fh.read(_HEADER.size))
                data = fh.read(length)
                if seq < from_seq:
                    data = _drop_lines(data, from_seq - seq)
                    seq = from_seq
                stream = STREAMS[stream_id]
                if runs and runs[-1][1] == stream:
                    runs[-1][2].append(data)
                else:
                    runs.append((seq, stream, [data]))
                total += len(data)
                i += 1
        out = [SpoolRecord(seq, stream, b"".join(parts)) for seq, stream, parts in runs]
        return out

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _drop_lines(data: bytes, count: int) -> bytes:
    pos = 0
    for _ in range(count):
        pos = data.index(b"\n", pos) + 1
    return data[pos:]
