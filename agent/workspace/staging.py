"""A job's workspace, built from SubmitJob.files: each file copied out of the blob cache.

The list is untrusted (a controller may be buggy or its inputs another runner's
artifacts): every path must be relative, normalised and free of '..';
directories are made and entered one component at a time without following
links, files are created fresh (O_EXCL|O_NOFOLLOW) with only mode & 0o755, and
symlinks come last, each required to resolve inside the workspace once all
exist (so a chain of links, each fine alone, cannot lead out either). Files are
copies, not hard links: a job may change its files, never the cache's.

Each file's bytes are hashed as they are copied: a blob that no longer holds what its
sha256 names (job code that reached the cache and wrote to it, a disk that went bad) is
removed from the cache and the submit refused with MISSING_BLOBS, so the controller sends
it again; damaged bytes are never run.
"""

import asyncio
import contextlib
import errno
import hashlib
import os
import shutil
import threading
from pathlib import Path, PurePosixPath

from lanpool.agent.errors import JobError
from lanpool.agent.workspace.blobs import DISK_MARGIN, BlobCache, is_sha256
from lanpool.agent.workspace.files import remove_entry
from lanpool.protocol import ErrorCode, FileEntry, SubmitJob
from lanpool.protocol.errors import clip

MAX_FILES = 200_000
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


async def stage_workspace(blobs: BlobCache, req: SubmitJob, workspace: Path) -> Path:
    """Build the workspace from `req.files`; the job's working directory.

    Raises JobError (the request is at fault) or OSError.
    """
    entries = checked_entries(req.files)
    with blobs.pinned(e.sha256 for e in entries if not e.link):
        await asyncio.to_thread(build_workspace, blobs, entries, workspace)
    await asyncio.to_thread(make_artifact_dirs, workspace, req.artifacts)
    working_dir = (workspace / req.working_dir).resolve()
    if not working_dir.is_relative_to(workspace.resolve()) or not working_dir.is_dir():
        raise JobError(ErrorCode.BAD_REQUEST, f"working_dir {req.working_dir!r} is not a directory in the workspace")
    return working_dir


def check_room(files: list[FileEntry], where: Path) -> None:
    """Refuse a workspace that would not fit on the disk holding `where`, less DISK_MARGIN: every
    path counts, even of one blob named many times (each is a copy). Before anything is written."""
    need = sum(entry.size for entry in files if not entry.link and entry.size > 0)
    free = shutil.disk_usage(where).free - DISK_MARGIN
    if need > free:
        raise _bad(
            f"the workspace needs {need / 2**20:.0f} MiB and the runner's disk has {max(free, 0) / 2**20:.0f} MiB "
            f"to spare ({DISK_MARGIN // 2**20} MiB are kept free): free space there, or send less"
        )


def _bad(problem: str) -> JobError:
    return JobError(ErrorCode.BAD_REQUEST, problem)


def checked_entries(files: list[FileEntry]) -> list[FileEntry]:
    """The entries to write, each path checked; a later entry of a path replaces an earlier one."""
    if len(files) > MAX_FILES:
        raise _bad(f"{len(files)} files in the workspace, at most {MAX_FILES}")
    by_path: dict[str, FileEntry] = {}
    for entry in files:
        parts = PurePosixPath(entry.path).parts
        if (
            not entry.path
            or entry.path.startswith("/")
            or "\\" in entry.path
            or any(p in (".", "..") for p in parts)
            or "/".join(parts) != entry.path
        ):
            raise _bad(f"file path {clip(repr(entry.path))} is not a normalised path inside the workspace")
        if not entry.link and not is_sha256(entry.sha256):
            raise _bad(f"{clip(repr(entry.path))} names no blob")
        by_path.pop(entry.path, None)  # re-inserted: order of the last occurrence
        by_path[entry.path] = entry
    dirs = {str(p) for path in by_path for p in PurePosixPath(path).parents if str(p) != "."}
    clash = next((p for p in by_path if p in dirs), None)
    if clash is not None:
        raise _bad(f"{clip(repr(clash))} is listed as a file and as a directory holding others")
    return list(by_path.values())


def build_workspace(blobs: BlobCache, entries: list[FileEntry], workspace: Path) -> None:
    """Write every file, then every link (see the module docstring)."""
    root_fd = os.open(workspace, DIR_FLAGS)
    try:
        dirs: dict[str, int] = {"": root_fd}
        try:
            # Directories first, in order (made and entered one by one); then the files, copied and
            # hashed by a few threads: hashing is as slow as copying, and both leave the GIL.
            _copy_all(blobs, [(e, parent_dir_fd(dirs, e.path)) for e in entries if not e.link])
            links = [e for e in entries if e.link]
            for entry in links:
                name = PurePosixPath(entry.path).name
                try:
                    os.symlink(entry.link, name, dir_fd=parent_dir_fd(dirs, entry.path))
                except FileExistsError:
                    raise _bad(f"{clip(repr(entry.path))} is listed twice") from None
        finally:
            for fd in dirs.values():
                if fd != root_fd:
                    os.close(fd)
    finally:
        os.close(root_fd)
    root = workspace.resolve()
    leaving = [e.path for e in links if not (workspace / e.path).resolve().is_relative_to(root)]
    for path in leaving:
        remove_entry(workspace, path)  # nothing later may follow it (its parents are not followed either)
    if leaving:
        raise _bad(f"link {clip(repr(leaving[0]))} leads out of the workspace")


def make_artifact_dirs(workspace: Path, artifacts: list[str]) -> None:
    """Each declared artifact's directory, made empty before the job runs, as dstack did (`echo x >
    output/a.txt` with `artifacts: [output]` must work): the path itself when it names no file
    (no suffix: `output`, `checkpoints/`), else its parent (`logs/metrics.csv` -> `logs`). Made
    and entered without following links, like the workspace's own (a path the request got
    wrong is left alone: the job may make it, and the artifact check says what is missing)."""
    root_fd = os.open(workspace, DIR_FLAGS)
    dirs: dict[str, int] = {"": root_fd}
    try:
        for path in artifacts:
            pure = PurePosixPath(path)
            if pure.is_absolute() or ".." in pure.parts or path.strip() in ("", "."):
                continue
            folder = pure if not pure.suffix or path.endswith("/") else pure.parent
            if str(folder) != ".":
                with contextlib.suppress(JobError, OSError):
                    parent_dir_fd(dirs, str(folder / "x"))
    finally:
        for fd in dirs.values():
            os.close(fd)


def parent_dir_fd(dirs: dict[str, int], path: str) -> int:
    """The open directory holding `path`, made (mode 0755) and entered without following links."""
    parent = str(PurePosixPath(path).parent)
    parent = "" if parent == "." else parent
    if parent in dirs:
        return dirs[parent]
    above = parent_dir_fd(dirs, parent)
    name = PurePosixPath(parent).name
    try:
        os.mkdir(name, 0o755, dir_fd=above)
    except FileExistsError:
        pass
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=above)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _bad(f"{clip(repr(path))} lies under {clip(repr(parent))}, which is not a directory") from None
        raise
    dirs[parent] = fd
    return fd


COPY_THREADS = min(4, os.cpu_count() or 1)


def _copy_all(blobs: BlobCache, targets: list[tuple[FileEntry, int]]) -> None:
    """Each (entry, its directory's fd) copied by COPY_THREADS threads taking the next in turn;
    the first error stops them all and is raised."""
    pending = iter(targets)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        while not errors:
            with lock:
                target = next(pending, None)
            if target is None:
                return
            try:
                _copy_blob(blobs, *target)
            except BaseException as exc:  # handed to the caller's thread below
                errors.append(exc)

    threads = [threading.Thread(target=work, name=f"stage-{k}") for k in range(min(COPY_THREADS, len(targets)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _copy_blob(blobs: BlobCache, entry: FileEntry, dir_fd: int) -> None:
    name = PurePosixPath(entry.path).name
    try:
        src = os.open(blobs.path(entry.sha256), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _missing(entry, "is not on this runner") from None
    try:
        size = os.fstat(src).st_size
        if size != entry.size:
            if _hash_of(src) == entry.sha256:  # the blob is right: the request lies about its size
                raise _bad(f"{clip(repr(entry.path))}: listed as {entry.size} bytes, its blob holds {size}")
            blobs.discard(entry.sha256)
            raise _missing(entry, "no longer holds what its hash names: damaged here, removed")
        try:
            dst = os.open(name, NEW_FILE, entry.mode & 0o755, dir_fd=dir_fd)
        except FileExistsError:
            raise _bad(f"{clip(repr(entry.path))} is listed twice") from None
        try:
            os.fchmod(dst, entry.mode & 0o755)  # the umask may have cleared some bits
            digest = copy_hashing(src, dst)
        finally:
            os.close(dst)
        if digest != entry.sha256:
            os.unlink(name, dir_fd=dir_fd)
            blobs.discard(entry.sha256)
            raise _missing(entry, "no longer holds what its hash names: damaged here, removed")
        os.utime(src)  # a use: LRU keeps blobs that jobs are built from
    finally:
        os.close(src)


def _missing(entry: FileEntry, why: str) -> JobError:
    return JobError(
        ErrorCode.MISSING_BLOBS, f"{clip(repr(entry.path))}: blob {entry.sha256[:12]} {why} (send it again)"
    )


_COPY_BLOCK = 1 << 20


def _hash_of(fd: int) -> str:
    hasher = hashlib.sha256()
    while block := os.read(fd, _COPY_BLOCK):
        hasher.update(block)
    return hasher.hexdigest()


def copy_hashing(src: int, dst: int) -> str:
    """Copy `src` to its end into `dst`; the sha256 of what was copied. One pass in user space:
    the bytes hashed are the bytes written (a copy in the kernel, then a read to hash it,
    would check what the file held a moment later)."""
    hasher = hashlib.sha256()
    buf = bytearray(_COPY_BLOCK)
    view = memoryview(buf)
    while n := os.readv(src, [buf]):
        chunk = view[:n]
        hasher.update(chunk)
        while chunk:
            chunk = chunk[os.write(dst, chunk) :]
    return hasher.hexdigest()


def copy_fd(src: int, dst: int, size: int) -> None:
    done = 0
    try:
        while done < size:  # in the kernel (reflinks on file systems that have them)
            n = os.copy_file_range(src, dst, size - done)
            if n == 0:
                break
            done += n
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
        while block := os.read(src, 1 << 20):
            view = memoryview(block)
            while view:
                view = view[os.write(dst, view) :]
