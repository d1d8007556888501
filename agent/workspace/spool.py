"""Append-only log spool of one job, with line sequence numbers.

Each record is a header (first line's seq, line count, stream id, byte length,
arrival time) and whole lines. Lines are numbered per job across streams, so readers resume
from any seq and get each line once. The file is the single source for every
reader: live followers and late re-attaches read the same bytes.

Files start with a magic; a spool written before records carried their arrival
time has none and is read (and appended to) in that older layout, its times 0.
"""

import bisect
import contextlib
import errno
import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"LPSPOOL2"
_HEADER = struct.Struct(">QIBId")  # seq, n_lines, stream id, length, arrival time (Unix seconds)
_OLD_HEADER = struct.Struct(">QIBI")  # files without MAGIC: no arrival time
# Records of one stream are merged into one read result while they arrived this close
# together: a fast job still costs few frames, and each line's time is off by at most this.
MERGE_S = 0.1
STREAMS = ("out", "err", "sys", "met")  # met: metrics JSON lines (agent/workspace/metrics_tail.py)
_STREAM_IDS = {name: i for i, name in enumerate(STREAMS)}
_INDEXED = frozenset({"next_seq", "size", "_seqs", "_offsets", "_header"})  # set by _load_index


@dataclass(frozen=True)
class SpoolRecord:
    seq: int
    stream: str
    data: bytes  # whole lines, each ending in b"\n"
    at: float = 0.0  # when the first line arrived (0: unknown, a spool of an older agent)
    # The lines in `data`. `read` knows it from the records' headers: counting the newlines of
    # every record again was ~3% of the agent's CPU in a log flood.
    n_lines: int = -1

    def __post_init__(self) -> None:
        if self.n_lines < 0:
            object.__setattr__(self, "n_lines", self.data.count(b"\n"))


class LogSpool:
    """Writer and reader of one spool file (one writer, any number of readers)."""

    # Set by _load_index (annotations only: a read-only spool's come from __getattr__ on first use).
    next_seq: int  # the seq of the next line appended
    size: int  # bytes of whole records in the file
    _seqs: list[int]  # first seq of each record
    _offsets: list[int]  # where each record starts
    _header: struct.Struct

    def __init__(self, path: Path, *, writable: bool = True) -> None:
        """A read-only spool (an ended job's) is indexed on first use, not here: an agent starting
        with many jobs on disk opens every one of their spools (agent/jobs/recovery.py)."""
        self.path = path
        self._loading = threading.Lock()
        self._fd = -1
        if not writable:
            return  # next_seq, size and the index come on first use (__getattr__)
        self._load_index(repair=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if self.size == 0:  # a new file (or a magic torn by a crash)
            os.truncate(path, 0)
            os.write(self._fd, MAGIC)
            self.size = len(MAGIC)
            self._header = _HEADER

    def __getattr__(self, name: str) -> Any:
        # Only called for an attribute not set yet: the index of a read-only spool, on first use.
        if name not in _INDEXED:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        with self._loading:
            if "next_seq" not in self.__dict__:  # another thread may have loaded it meanwhile
                self._load_index(repair=False)
        return self.__dict__[name]

    def _load_index(self, repair: bool) -> None:
        """Index the records from their headers alone (each read where it lies, the lines
        skipped); next_seq is set last, so a reader in another thread that sees it sees the rest."""
        seqs: list[int] = []
        offsets: list[int] = []
        next_seq = 0
        header = _HEADER
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            fd = -1
        try:
            file_size = os.fstat(fd).st_size if fd >= 0 else 0
            head = os.pread(fd, len(MAGIC), 0) if file_size else b""
            if head == MAGIC:
                pos = len(MAGIC)
            elif MAGIC.startswith(head) and file_size == len(head):
                pos = 0  # empty, or the magic itself was torn: an empty spool
            else:
                pos, header = 0, _OLD_HEADER
            while pos + header.size <= file_size:
                seq, n, _stream, length = header.unpack(os.pread(fd, header.size, pos))[:4]
                if pos + header.size + length > file_size:
                    break  # torn last record from a crash: ignored, then overwritten below
                seqs.append(seq)
                offsets.append(pos)
                next_seq = seq + n
                pos += header.size + length
        finally:
            if fd >= 0:
                os.close(fd)
        if pos != file_size and repair:
            os.truncate(self.path, pos)
        self._seqs, self._offsets, self._header, self.size = seqs, offsets, header, pos
        self.next_seq = next_seq

    def append(self, stream: str, lines: bytes) -> int:
        """Append whole lines (must end with b"\\n"); returns the first line's seq."""
        n = lines.count(b"\n")
        if n == 0:
            return self.next_seq
        seq = self.next_seq
        fields: tuple[int | float, ...] = (seq, n, _STREAM_IDS[stream], len(lines))
        if self._header is _HEADER:
            fields += (time.time(),)
        _write_whole(self._fd, self._header.pack(*fields) + lines, self.size)
        # In this order: read() in another thread relies on it (bytes, seq, offset, next_seq).
        self._seqs.append(seq)
        self._offsets.append(self.size)
        self.size += self._header.size + len(lines)
        self.next_seq = seq + n
        return seq

    def read(self, from_seq: int, max_bytes: int = 256 * 1024) -> list[SpoolRecord]:
        """Records holding lines from `from_seq` on, about `max_bytes` in all.

        The first record is cut so that it starts exactly at `from_seq`. Records of one
        stream that arrived within MERGE_S of each other come back as one.
        """
        # Safe in another thread than the one appending: append writes a record's bytes, then
        # its seq, its offset, and next_seq last. So with next_seq taken first, the first `count` offsets and seqs name
        # records wholly in the file, and they hold every line before that next_seq.
        end = self.next_seq
        count = len(self._offsets)
        if from_seq >= end or not count:
            return []
        i = max(0, bisect.bisect_right(self._seqs, from_seq, 0, count) - 1)
        runs: list[tuple[int, str, float, list[bytes], list[int]]] = []  # (seq, stream, at, parts, line counts)
        total = 0
        header = self._header
        with open(self.path, "rb") as fh:
            fh.seek(self._offsets[i])
            while i < count and total < max_bytes:
                seq, n, stream_id, length, *rest = header.unpack(fh.read(header.size))
                at = rest[0] if rest else 0.0
                data = fh.read(length)
                if seq < from_seq:
                    data = _drop_lines(data, from_seq - seq)
                    n -= from_seq - seq
                    seq = from_seq
                stream = STREAMS[stream_id]
                if runs and runs[-1][1] == stream and at - runs[-1][2] < MERGE_S:
                    runs[-1][3].append(data)
                    runs[-1][4].append(n)
                else:
                    runs.append((seq, stream, at, [data], [n]))
                total += len(data)
                i += 1
        return [SpoolRecord(seq, stream, b"".join(parts), at, sum(ns)) for seq, stream, at, parts, ns in runs]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _write_whole(fd: int, record: bytes, size: int) -> None:
    """Append `record` whole or not at all: a disk that fills mid-record (a short write, then
    ENOSPC) has the torn part cut off again, so the file stays whole records, a later append
    (once there is room) starts where a reader expects one, and the bytes are free again."""
    view = memoryview(record)
    try:
        while view:
            n = os.write(fd, view)
            if n == 0:  # a regular file that takes nothing: full, whatever errno did not say
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view = view[n:]
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


def _drop_lines(data: bytes, count: int) -> bytes:
    pos = 0
    for _ in range(count):
        pos = data.index(b"\n", pos) + 1
    return data[pos:]
