"""Artifacts from runners, written to local directories without trusting their paths.

A runner names the files it sends back (JobStatus.artifacts, then the
GetArtifacts stream, see app/transfer/pull.py); both are untrusted. The controller:
- checks every path: relative, no `..`, no empty or `.` part, no NUL;
- creates directories one at a time and opens each with O_NOFOLLOW relative to
  its parent, and each file with O_NOFOLLOW: nothing is written through a
  symlink, wherever one came from.

`artifacts download` writes the same way under the output directory: a hard
link to the store's file (a copy where a link cannot be made), through a
temporary name renamed into place (a symlink at the destination is replaced,
never followed).
"""

import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

from lanpool.app.errors import ArtifactsRefused
from lanpool.protocol import ArtifactFile

_COPY_BYTES = 1024 * 1024
# Room left on the controller's disk after the artifacts: a runner declaring
# more than fits is refused before anything is pulled.
DISK_RESERVE_BYTES = 256 * 1024 * 1024


def checked_path(path: str) -> list[str]:
    """The parts of a relative artifact path; ArtifactsRefused if it could leave its directory."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise ArtifactsRefused(f"artifact path {_q(path)} is empty or holds a NUL byte")
    if path.startswith("/"):
        raise ArtifactsRefused(f"artifact path {_q(path)} is absolute")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ArtifactsRefused(f"artifact path {_q(path)} has an empty, '.' or '..' part")
    return parts


def checked_declared(files: Iterable[ArtifactFile]) -> dict[str, int]:
    """The declared files as path -> size, each path checked and named once."""
    out: dict[str, int] = {}
    for f in files:
        checked_path(f.path)
        if not isinstance(f.size, int) or f.size < 0:
            raise ArtifactsRefused(f"artifact {_q(f.path)} has an impossible size {f.size!r}")
        if f.path in out:
            raise ArtifactsRefused(f"artifact {_q(f.path)} is declared twice")
        out[f.path] = f.size
    return out


def make_dirs(root: Path, parts: list[str], create: bool = True) -> int:
    """Open root/parts[0]/.../parts[-1] (creating what is missing, unless not `create`),
    never through a symlink; returns the directory's fd (the caller closes it)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if not create:
                    raise ArtifactsRefused(f"{_q(part)} under {root} cannot be opened: {exc.strerror}") from None
                raise ArtifactsRefused(
                    f"{_q('/'.join(parts[: i + 1]))} under {root} is a symlink or not a directory: not writing through it"
                ) from None
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_file(
    root: Path, parts: list[str], chunks: Iterable[bytes], *, mtime: float | None = None, replace: bool = True
) -> int:
    """Write root/parts... from `chunks`; returns the bytes written.

    replace=False: the file must not exist yet (O_EXCL). replace=True: written to a
    temporary name, then renamed over whatever is there (a symlink included:
    rename replaces the link, it does not follow it)."""
    dir_fd = make_dirs(root, parts[:-1])
    name = parts[-1]
    target = f".{name}.{secrets.token_hex(4)}.part" if replace else name
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        try:
            out = os.open(target, flags, 0o644, dir_fd=dir_fd)
        except FileExistsError:
            raise ArtifactsRefused(f"artifact {_q('/'.join(parts))} is there already (named twice?)") from None
        written = 0
        try:
            with os.fdopen(out, "wb", closefd=False) as fh:
                for data in chunks:
                    fh.write(data)
                    written += len(data)
            if mtime is not None:
                try:  # checkpoints are told apart by age (the newest resumes)
                    os.utime(out, (mtime, mtime))
                except (OverflowError, ValueError, OSError):
                    pass  # a nonsense time from the archive: the file keeps "now"
        finally:
            os.close(out)
        if replace:
            try:
                os.replace(target, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except IsADirectoryError:
                raise ArtifactsRefused(f"{_q('/'.join(parts))} is a directory under {root}: not replacing it") from None
        return written
    except BaseException:
        if replace:
            try:
                os.unlink(target, dir_fd=dir_fd)
            except OSError:
                pass
        raise
    finally:
        os.close(dir_fd)


def copy_file(src_root: Path, parts: list[str], dst_root: Path) -> int:
    """Put the regular file src_root/parts... at dst_root/parts...: a hard link where one can
    be made (no second copy of a checkpoint), else a copy (mtime kept); never reading or
    writing through a symlink. Returns the file's size."""
    dir_fd = make_dirs(src_root, parts[:-1], create=False)
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError as exc:
            raise ArtifactsRefused(
                f"{_q('/'.join(parts))} in the artifact store cannot be read: {exc.strerror}"
            ) from None
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ArtifactsRefused(f"{_q('/'.join(parts))} in the artifact store is not a regular file")
            if _link_file(dir_fd, parts, dst_root):
                return info.st_size
            return write_file(dst_root, parts, iter(lambda: fh.read(_COPY_BYTES), b""), mtime=info.st_mtime)
    finally:
        os.close(dir_fd)


def _link_file(src_dir_fd: int, parts: list[str], dst_root: Path) -> bool:
    """Hard-link the store's file into dst_root/parts... (a temporary name renamed into
    place); False where the output cannot hold a link to it (another file system)."""
    dst_fd = make_dirs(dst_root, parts[:-1])
    tmp = f".{parts[-1]}.{secrets.token_hex(4)}.part"
    try:
        try:
            os.link(parts[-1], tmp, src_dir_fd=src_dir_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
        except OSError:
            return False  # EXDEV, EPERM (protected hardlinks), a file system without links: copy
        try:
            os.replace(tmp, parts[-1], src_dir_fd=dst_fd, dst_dir_fd=dst_fd)
        except OSError as exc:
            os.unlink(tmp, dir_fd=dst_fd)
            if isinstance(exc, IsADirectoryError):
                raise ArtifactsRefused(
                    f"{_q('/'.join(parts))} is a directory under {dst_root}: not replacing it"
                ) from None
            raise
        try:  # the same download again: rename between two links of one inode does nothing, leaving tmp
            os.unlink(tmp, dir_fd=dst_fd)
        except FileNotFoundError:
            pass
        return True
    finally:
        os.close(dst_fd)


def _q(name: str) -> str:
    """A runner's path in a message: quoted, and bounded (a tar name can be megabytes)."""
    text = repr(name)
    return text if len(text) <= 200 else text[:200] + "...'"
