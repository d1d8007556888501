"""Artifacts from runners, written to local directories without trusting their paths.

A runner names the files it sends back (JobStatus.artifacts) and packs them in
a tar; both are untrusted. The controller:
- checks every path: relative, no `..`, no empty or `.` part, no NUL;
- takes from the tar only what the runner declared: regular files (and plain
  directories), each declared path once, with its declared size. Links,
  devices, FIFOs, sparse members and anything else refuse the whole archive;
- opens the tar with an explicit mode (`r:`: no compression detection, so a
  small xz or gzip file cannot expand into gigabytes), applies tarfile's
  `data` filter and its own checks, and copies members itself with a byte
  count: what is written is bounded by the declared sizes, and those by the
  room on the disk;
- creates directories one at a time and opens each with O_NOFOLLOW relative to
  its parent, and each file with O_NOFOLLOW: nothing is written through a
  symlink, wherever one came from.

`artifacts download` writes the same way under the output directory, through
a temporary file renamed into place (a symlink at the destination is replaced,
never followed).
"""

import os
import secrets
import shutil
import stat
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from app.errors import LanpoolError
from protocol import ArtifactFile

_COPY_BYTES = 1024 * 1024
# Room left on the controller's disk after an archive and its files: a runner
# declaring more than fits is refused before anything is downloaded.
DISK_RESERVE_BYTES = 256 * 1024 * 1024
_BLOCK = 512


class ArtifactsRefused(LanpoolError):
    """A runner's artifacts that the controller will not write: the reason is one line."""


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


def archive_limit(declared: dict[str, int]) -> int:
    """The most bytes an uncompressed tar of the declared files can take: each file's
    data padded to 512-byte blocks, its headers (a long name adds a PAX record), and
    the end-of-archive record."""
    total = 10 * 1024 + 2 * _BLOCK
    for path, size in declared.items():
        total += _pad(size) + 3 * _BLOCK + _pad(2 * len(path.encode()) + 64)
    return total


def ensure_room(where: Path, declared: dict[str, int]) -> None:
    """Refuse artifacts that would not fit on the disk (the archive and its files both)."""
    need = archive_limit(declared) + sum(declared.values())
    free = shutil.disk_usage(where).free
    if need > free - DISK_RESERVE_BYTES:
        raise ArtifactsRefused(
            f"the artifacts declare {_mib(sum(declared.values()))}: with their archive they "
            f"do not fit in the {_mib(free)} free at {where}"
        )


def extract_archive(tar_path: Path, dest: Path, declared: dict[str, int]) -> None:
    """Write the declared files of the tar at `tar_path` under `dest` (created if need be)."""
    dest.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    members = 0
    try:
        with tarfile.open(tar_path, mode="r:") as tar:
            for member in _members(tar):
                members += 1
                if members > 2 * len(declared) + 1000:
                    raise ArtifactsRefused(
                        f"the archive holds far more entries than the {len(declared)} files declared"
                    )
                _extract_member(tar, member, dest, declared, seen)
    except ArtifactsRefused:
        raise
    except tarfile.FilterError as exc:
        raise ArtifactsRefused(f"the archive has an entry the tar filter refuses: {str(exc)[:400]}") from None
    except (tarfile.TarError, EOFError) as exc:
        raise ArtifactsRefused(
            f"the archive is not an uncompressed tar this controller reads: {str(exc)[:400]}"
        ) from None
    missing = sorted(set(declared) - seen)
    if missing:
        raise ArtifactsRefused(f"the archive lacks {len(missing)} declared file(s), first {_q(missing[0])}")


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    # Read headers one at a time (not getmembers()): a refusal stops at the first bad one.
    while True:
        member = tar.next()
        if member is None:
            return
        yield member


def _extract_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, declared: dict[str, int], seen: set[str]
) -> None:
    name = member.name.rstrip("/") if member.isdir() else member.name
    tarfile.data_filter(member, str(dest))  # the standard check first; ours is stricter
    parts = checked_path(name)
    if member.isdir() and member.type == tarfile.DIRTYPE:
        os.close(make_dirs(dest, parts))
        return
    if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
        kind = (
            "a symlink"
            if member.issym()
            else "a hard link"
            if member.islnk()
            else "a device"
            if member.isdev()
            else "a FIFO"
            if member.isfifo()
            else "a sparse file"
            if member.issparse()
            else f"type {member.type!r}"
        )
        raise ArtifactsRefused(f"artifact {_q(name)} is {kind}: only regular files are taken")
    if name not in declared:
        raise ArtifactsRefused(f"the archive holds {_q(name)}, which the runner did not declare")
    if name in seen:
        raise ArtifactsRefused(f"the archive holds {_q(name)} twice")
    if member.size != declared[name]:
        raise ArtifactsRefused(f"artifact {_q(name)} is {member.size} bytes in the archive, {declared[name]} declared")
    seen.add(name)
    source = tar.extractfile(member)
    assert source is not None  # a regular member always has a file object
    written = write_file(dest, parts, _chunks(source, member.size), mtime=member.mtime, replace=False)
    if written != member.size:
        raise ArtifactsRefused(f"artifact {_q(name)} ended after {written} of its {member.size} bytes")


def _chunks(source, limit: int) -> Iterator[bytes]:
    left = limit
    while left > 0:
        data = source.read(min(_COPY_BYTES, left))
        if not data:
            return
        left -= len(data)
        yield data


def make_dirs(root: Path, parts: list[str]) -> int:
    """Open (creating as needed) root/parts[0]/.../parts[-1], never through a symlink;
    returns the directory's fd (the caller closes it)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                raise ArtifactsRefused(
                    f"{_q('/'.join(parts[: i + 1]))} under {root} is a symlink or not a "
                    "directory: not writing through it"
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
    """Copy the regular file src_root/parts... to dst_root/parts... (mtime kept), never
    reading or writing through a symlink; returns the bytes copied."""
    dir_fd = _open_dirs(src_root, parts[:-1])
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        raise ArtifactsRefused(f"{_q('/'.join(parts))} in the artifact store cannot be read: {exc.strerror}") from None
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ArtifactsRefused(f"{_q('/'.join(parts))} in the artifact store is not a regular file")
        return write_file(dst_root, parts, iter(lambda: fh.read(_COPY_BYTES), b""), mtime=info.st_mtime)


def _open_dirs(root: Path, parts: list[str]) -> int:
    """Like make_dirs, but only opens: a missing directory is an error, not created."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise ArtifactsRefused(f"{_q(part)} under {root} cannot be opened: {exc.strerror}") from None
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


def _pad(n: int) -> int:
    return -(-n // _BLOCK) * _BLOCK


def _q(name: str) -> str:
    """A runner's path in a message: quoted, and bounded (a tar name can be megabytes)."""
    text = repr(name)
    return text if len(text) <= 200 else text[:200] + "...'"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
