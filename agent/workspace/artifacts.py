"""A job's artifact files: listed when it ends, streamed from its workspace on request.

The workspace is the job's, so every name in it is untrusted: links are
followed only while they stay inside the workspace when the list is made, and
each file is read from a descriptor opened by `open_regular` (no link, FIFO or
device; see agent/workspace/files.py), so a file swapped for a link or a FIFO after
the list was made is refused, not followed or waited on. Nothing is copied:
the list (path, size) is what a controller may ask for (GetArtifacts), and
each file is read from the workspace when it is asked for. A container job's absolute
artifact (`/opt/x`) is the one tar its copy-out left in the workspace (`.lanpool-abs/opt/x.tar`).
"""

import os
import struct
from collections.abc import Generator, Iterator
from pathlib import Path, PurePosixPath

import msgpack

from lanpool.agent.workspace.abs_artifacts import stored_name
from lanpool.agent.workspace.files import NotARegularFile, open_regular
from lanpool.protocol import ArtifactData, ArtifactEnd, ArtifactFile, ArtifactsSent, Error, ErrorCode, encode_message
from lanpool.protocol.errors import clip
from lanpool.protocol.transfer_messages import abs_artifact_problem

# Artifact bytes per ArtifactData frame, and per buffer written out: a few frames per
# buffer, so a 1 GiB file is ~256 writes.
ARTIFACT_PART = 1024 * 1024
ARTIFACT_BATCH = 4 * ARTIFACT_PART
_ERROR_CHARS = 1000  # of an Error's message

# What a GetArtifacts asks for, checked: (path, first byte, listed size) of each file.
Wanted = list[tuple[str, int, int]]


class ArtifactChanged(Exception):
    """A listed file is gone, or is no longer a regular file reachable without links."""


def check_artifact_path(path: str) -> str | None:
    """Why `path` may not be an artifact path, or None if it may. An absolute one is a
    container job's (agent/workspace/abs_artifacts.py; a process job's is refused at submit)."""
    p = PurePosixPath(path)
    if p.is_absolute():
        return abs_artifact_problem(path)
    if not path:
        return f"artifact path {path!r} must be relative to the workspace"
    if ".." in p.parts:
        return f"artifact path {path!r} leaves the workspace ('..')"
    return None


def list_artifacts(workspace: Path, paths: list[str]) -> tuple[list[ArtifactFile], list[str]]:
    """The regular files under `paths`, by their path relative to the workspace.

    Returns the files listed and one warning line per path or file skipped. A
    symlink inside the workspace is listed under its own name (the controller
    asks for that name; the agent reads the same link again, checked again).
    """
    root = workspace.resolve()
    files: list[ArtifactFile] = []
    seen: set[str] = set()
    warnings: list[str] = []
    for path in paths:
        problem = check_artifact_path(path)
        if problem:
            warnings.append(problem + "; skipped")
            continue
        declared, path = path, stored_name(path) if path.startswith("/") else path  # copied out as one tar
        target = workspace / path
        if not target.exists() and not target.is_symlink():
            warnings.append(f"artifact {declared!r} was not produced by the job")
            continue
        before, warned = len(files), len(warnings)
        for file in _walk(target, root):
            rel = file.relative_to(workspace).as_posix()
            real = file.resolve()
            if not real.is_relative_to(root):
                warnings.append(f"artifact {rel!r} is a link that leaves the workspace; skipped")
                continue
            size = _regular_size(root, real.relative_to(root).as_posix())
            if size is None or rel in seen:
                continue  # not a regular file (a dir, FIFO, device), or named twice
            seen.add(rel)
            files.append(ArtifactFile(path=rel, size=size))
        if len(files) == before and len(warnings) == warned and target.is_dir() and not target.is_symlink():
            # made empty before the job ran (agent/workspace/staging.py make_artifact_dirs), and left so
            warnings.append(f"artifact {path!r} was not produced by the job (its directory is empty)")
    return files, warnings


def resolve_listed(workspace: Path, rel: str) -> str:
    """The real path (relative to the workspace) of the listed artifact `rel`: a link
    inside the workspace is followed once more, and must still stay inside."""
    root = workspace.resolve()
    real = (workspace / rel).resolve()
    if not real.is_relative_to(root):
        raise ArtifactChanged(f"artifact {rel!r} became a link that leaves the workspace")
    return real.relative_to(root).as_posix()


def read_parts(
    workspace: Path, rel: str, offset: int, size: int, part: int
) -> Generator[tuple[int, bytes], None, None]:
    """The bytes of listed artifact `rel` from `offset` up to its listed `size`, `part`
    bytes at a time. A file that shrank since it was listed raises ArtifactChanged at
    the point it ends (the controller refuses the file); one that grew is cut at `size`.
    Yields (offset, bytes)."""
    fd = _open_listed(workspace, rel)
    try:
        pos = offset
        while pos < size:
            data = os.pread(fd, min(part, size - pos), pos)
            if not data:
                raise ArtifactChanged(f"artifact {rel!r} shrank to {pos} bytes after it was listed at {size}")
            yield pos, data
            pos += len(data)
    finally:
        os.close(fd)


def artifact_stream(workspace: Path, job_id: str, wanted: Wanted) -> Generator[bytes | bytearray, None, None]:
    """Every frame a GetArtifacts gets, as buffers to write out (on its channel, or on a
    direct connection: the same bytes): each file's ArtifactData parts and ArtifactEnd,
    then ArtifactsSent. Exactly the listed size goes out: a file that shrank since gets an
    Error (the controller refuses it), one that grew is cut at its listed size. ArtifactEnd
    says the file's whole size, also when it was sent from an offset."""
    for path, offset, size in wanted:
        try:
            yield from frame_batches(workspace, job_id, path, offset, size, ARTIFACT_PART, ARTIFACT_BATCH)
        except ArtifactChanged as exc:
            yield encode_message(Error(ErrorCode.BAD_REQUEST, clip(str(exc), _ERROR_CHARS), job_id))
            continue
        yield encode_message(ArtifactEnd(job_id, path, size))
    yield encode_message(ArtifactsSent(job_id))


def frame_batches(
    workspace: Path, job_id: str, rel: str, offset: int, size: int, part: int, batch: int
) -> Generator[bytearray, None, None]:
    """What `read_parts` reads, as ready-to-send ArtifactData frames, about `batch` bytes
    of them per buffer. Each part is read straight into its place in the buffer: no
    copy through msgpack or a join (at ~1 GB/s per copy, three of them cost as much as
    the encryption). Same checks and errors as `read_parts`."""
    fd = _open_listed(workspace, rel)
    try:
        pos = offset
        while pos < size:
            frames: list[tuple[bytes, int, int]] = []  # (head, offset, length)
            total = 0
            while pos < size and total < batch:
                n = min(part, size - pos)
                head = _data_head(job_id, rel, pos, n)
                frames.append((head, pos, n))
                total += len(head) + n
                pos += n
            buf = bytearray(total)
            with memoryview(buf) as view:
                at = 0
                for head, start, n in frames:
                    view[at : at + len(head)] = head
                    at += len(head)
                    _read_into(fd, view[at : at + n], start, rel, size)
                    at += n
            yield buf
    finally:
        os.close(fd)


# An ArtifactData frame is its map (see protocol/messages.py to_wire) with the data last,
# so that the bytes can follow the head as they are read. The map's order is free: the
# controller decodes it as any other frame, with every check.
_FIELDS = 5  # job_id, path, offset, t, data
_FRAME_LEN = struct.Struct(">I")
_BIN32 = struct.Struct(">BI")


def _data_head(job_id: str, rel: str, offset: int, n: int) -> bytes:
    fields = {"job_id": job_id, "path": rel, "offset": offset, "t": ArtifactData.TAG}
    body: bytes = bytes([0x80 | _FIELDS]) + b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in fields.items())
    body += msgpack.packb("data") + _BIN32.pack(0xC6, n)  # bin 32, whatever n: the reader takes any
    return _FRAME_LEN.pack(len(body) + n) + body


def _read_into(fd: int, view: memoryview, start: int, rel: str, size: int) -> None:
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], start + done)
        if not got:
            raise ArtifactChanged(f"artifact {rel!r} shrank to {start + done} bytes after it was listed at {size}")
        done += got


def _open_listed(workspace: Path, rel: str) -> int:
    root = workspace.resolve()
    try:
        return open_regular(root, resolve_listed(workspace, rel))
    except NotARegularFile as exc:
        raise ArtifactChanged(f"artifact {rel!r} is no longer a regular file: {exc}") from None
    except OSError as exc:
        raise ArtifactChanged(f"artifact {rel!r} cannot be read: {exc.strerror or exc}") from None


def _regular_size(root: Path, real_rel: str) -> int | None:
    try:
        fd = open_regular(root, real_rel)
    except (NotARegularFile, OSError):
        return None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _walk(target: Path, root: Path) -> Iterator[Path]:
    """Files under `target` (or target itself), not descending into linked dirs below it.

    A linked dir named as the artifact itself is walked when it stays inside `root`.
    """
    if not target.is_dir() or not target.resolve().is_relative_to(root):
        yield target  # a file, or a dir outside the workspace that the caller reports
        return
    for dirpath, dirnames, filenames in os.walk(target):
        base = Path(dirpath)
        for name in sorted(filenames):
            yield base / name
        for name in sorted(dirnames):
            if (base / name).is_symlink():
                yield base / name  # reported as leaving, or skipped as not a file
        dirnames[:] = sorted(d for d in dirnames if not (base / d).is_symlink())
