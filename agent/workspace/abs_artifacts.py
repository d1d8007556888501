"""A container job's absolute artifacts (`/opt/conda/envs/x`): their one tar in the workspace,
and every tar of them checked member by member.

The mapping: the artifact `/opt/conda/envs/x` is kept as ONE file, the tar
`.lanpool-abs/opt/conda/envs/x.tar` under the job's workspace, its members named from the
container's root (`opt/conda/envs/x`, `opt/conda/envs/x/bin/python`). So every existing
path rule (relative, no '..') holds on the wire and on the controller unchanged, and a tar
keeps what a directory of artifact files would lose: modes (a conda env's `bin/`),
symlinks and hard links inside the tree. A dependent container job gets each such tar
back into its container at the same absolute path before it starts
(agent/executors/docker.py).

Every tar read here is hostile: the one the engine hands out holds whatever the job left at
that path, and a staged one came through a controller from any runner. It is never
extracted on this host; it is copied member by member into a new tar that holds only
directories, regular files (mode 0o777 at most: no setuid), symlinks whose target stays
inside the artifact (absolute targets inside it made relative) and hard links to a file
copied before. Names that are absolute, hold '..' or lie outside the artifact, devices,
FIFOs, sparse files, links that lead out, names below a symlink's name (kept or not:
nothing is written through a link) and names seen twice are left out, each said in a line; pax and GNU
long-name headers above META_MAX and data beyond the caller's bound refuse the tar.
Extended attributes (file capabilities) are not copied.
"""

import contextlib
import io
import os
import posixpath
import secrets
import shutil
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from lanpool.agent.errors import JobError
from lanpool.agent.workspace.blobs import DISK_MARGIN
from lanpool.agent.workspace.files import open_regular
from lanpool.agent.workspace.staging import DIR_FLAGS, NEW_FILE, parent_dir_fd
from lanpool.protocol.transfer_messages import ABS_ARTIFACT_SUFFIX, ABS_ARTIFACTS_DIR, abs_artifact_name
from lanpool.protocol.transfer_messages import abs_artifact_problem as check_absolute

PREFIX = ABS_ARTIFACTS_DIR  # reserved: the workspace's folder of absolute artifacts
SUFFIX = ABS_ARTIFACT_SUFFIX
META_MAX = 1 << 20  # bytes of one pax or GNU long-name header: a name, not a file
MAX_MEMBERS = 500_000  # a conda env holds ~50k files
_MAX_WARNINGS = 5  # members left out are said one by one up to here, then counted
_META_TYPES = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)


class TarRefused(Exception):
    """The tar cannot be kept at all: malformed, or over its bound. One line."""


def stored_name(path: str) -> str:
    """Where the absolute artifact `path` is kept in the workspace: `.lanpool-abs/opt/x.tar`."""
    return abs_artifact_name(path)


def original_path(stored: str) -> str | None:
    """The absolute path a workspace file `.lanpool-abs/opt/x.tar` is the artifact of (None: not one)."""
    pure = PurePosixPath(stored)
    if len(pure.parts) < 2 or pure.parts[0] != PREFIX or not stored.endswith(SUFFIX):
        return None
    path = "/" + stored[len(PREFIX) + 1 : -len(SUFFIX)]
    return path if check_absolute(path) is None else None


class _Bounded(tarfile.TarInfo):
    """A header whose pax or long-name block is over META_MAX refuses the tar before the block is
    read: tarfile reads such a block whole into memory."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> Any:
        if self.type in _META_TYPES and self.size > META_MAX:
            raise TarRefused(f"a tar header of {self.size} bytes (at most {META_MAX})")
        return super()._proc_member(tarfile_)  # type: ignore[misc]


class _Chunks(io.RawIOBase):
    """A byte iterator (the engine's archive stream) as a raw file: each chunk is read from
    where the last read stopped, never copied whole again."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it: Iterator[bytes] = iter(chunks)
        self._chunk = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        while not self._chunk:
            nxt = next(self._it, None)
            if nxt is None:
                return 0
            self._chunk = memoryview(nxt)
        n = min(len(buf), len(self._chunk))
        buf[:n] = self._chunk[:n]
        self._chunk = self._chunk[n:]
        return n


def copy_checked(
    src: IO[bytes] | Iterable[bytes],
    dst: IO[bytes],
    src_root: str,
    dst_root: str,
    limit: int,
    owner: tuple[int, int] = (0, 0),
) -> tuple[int, list[str]]:
    """Copy the members of the tar `src` named `src_root` or below it into a new tar on `dst`,
    renamed below `dst_root` (`x/bin/python` -> `opt/conda/envs/x/bin/python`), each checked (see
    the module's docstring) and owned by `owner` (uid, gid). Returns (members kept, one line
    per member left out); TarRefused when `src` is no tar, or its files hold over `limit` bytes."""
    fileobj = src if isinstance(src, io.IOBase) else io.BufferedReader(_Chunks(src), 1 << 20)
    kept, skipped = 0, []
    regular: set[str] = set()  # files copied (hard links may name them)
    links: set[str] = set()  # symlinks kept: nothing is put below them
    seen: set[str] = set()
    budget = limit
    try:
        with (
            tarfile.open(fileobj=fileobj, mode="r|", tarinfo=_Bounded) as tin,
            tarfile.open(fileobj=dst, mode="w|", format=tarfile.PAX_FORMAT) as tout,
        ):
            for member in tin:
                if len(seen) >= MAX_MEMBERS:
                    raise TarRefused(f"over {MAX_MEMBERS} members")
                if member.isreg():  # counted kept or not: reading it costs as much
                    if member.size > budget:
                        raise TarRefused(f"its files hold over {limit} bytes (the bound here)")
                    budget -= member.size
                name, why = _renamed(member.name, src_root, dst_root)
                hard = _renamed(member.linkname, src_root, dst_root)[0] if member.islnk() else ""
                if not why:
                    why = _refusal(member, name, dst_root, hard, seen, regular, links)
                seen.add(name or member.name)
                if member.issym() and name:  # kept or not: nothing goes below a link's name
                    links.add(name)
                if why:
                    skipped.append(why)
                    continue
                out = _header(member, name, dst_root, hard, owner)
                if member.isreg():
                    tout.addfile(out, tin.extractfile(member))
                    regular.add(name)
                else:
                    tout.addfile(out)
                kept += 1
    except tarfile.TarError as exc:
        raise TarRefused(f"not a tar this runner reads: {exc}") from None
    except (EOFError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            raise  # this host's side: the caller says it as a disk error
        raise TarRefused(f"the tar ends early: {exc}") from None
    return kept, _said(skipped)


def _renamed(name: str, src_root: str, dst_root: str) -> tuple[str, str]:
    """(the member's new name, "") or ("", why it is left out)."""
    clean = name.rstrip("/")
    parts = clean.split("/")
    if not clean or name.startswith("/") or "\0" in name or any(p in ("", ".", "..") for p in parts):
        return "", f"{name[:200]!r}: absolute, empty, '.' or '..' in its name"
    if clean != src_root and not clean.startswith(src_root + "/"):
        return "", f"{name[:200]!r}: outside the artifact"
    return dst_root + clean[len(src_root) :], ""


def _refusal(
    member: tarfile.TarInfo, name: str, root: str, hard: str, seen: set[str], regular: set[str], links: set[str]
) -> str:
    """Why the member (renamed `name`; a hard link's target renamed `hard`) is left out, or "".
    A hard link may only name a file copied before it (engine tars do so)."""
    if name in seen:
        return f"{name[:200]!r}: named twice"
    parents = PurePosixPath(name).parents
    if any(str(p) in links for p in parents):
        return f"{name[:200]!r}: below a symlink"
    if member.sparse is not None or member.type == tarfile.GNUTYPE_SPARSE:
        return f"{name[:200]!r}: a sparse file"
    if member.isreg() or member.isdir():
        return ""
    if member.issym():
        return "" if _link_target(member.linkname, name, root) else f"{name[:200]!r}: a symlink leading out"
    if member.islnk():
        return "" if hard in regular else f"{name[:200]!r}: a hard link to no file before it in the artifact"
    return f"{name[:200]!r}: a device, FIFO or other special file"


def _link_target(target: str, name: str, root: str) -> str:
    """The symlink's target, relative and staying inside `root` ("": it leads out). An absolute
    target is a path in the container: inside the artifact, it is made relative. A relative one
    may climb ('..') only at its start, so that following links it reaches never climbs again."""
    if not target or "\0" in target:
        return ""
    here = posixpath.dirname(name)
    if target.startswith("/"):
        full = posixpath.normpath(target).lstrip("/")
        if full != root and not full.startswith(root + "/"):
            return ""
        return posixpath.relpath(full, here)
    parts = target.split("/")
    climbing = True
    for part in parts:
        if part == "..":
            if not climbing:
                return ""
        else:
            climbing = False
    full = posixpath.normpath(posixpath.join(here, target))
    return target if full == root or full.startswith(root + "/") else ""


def _header(member: tarfile.TarInfo, name: str, root: str, hard: str, owner: tuple[int, int]) -> tarfile.TarInfo:
    out = tarfile.TarInfo(name)
    out.type = tarfile.REGTYPE if member.isreg() else member.type
    out.mode = member.mode & 0o777
    out.mtime = member.mtime if isinstance(member.mtime, (int, float)) and member.mtime >= 0 else 0
    out.uid, out.gid = owner
    out.uname = out.gname = ""
    if member.isreg():
        out.size = member.size
    elif member.issym():
        out.linkname = _link_target(member.linkname, name, root)
    elif member.islnk():
        out.linkname = hard
    return out


def _said(skipped: list[str]) -> list[str]:
    lines = [f"left out {why}" for why in skipped[:_MAX_WARNINGS]]
    if len(skipped) > _MAX_WARNINGS:
        lines.append(f"left out {len(skipped) - _MAX_WARNINGS} more members")
    return lines


# -- on this runner's disk -------------------------------------------------------------


def bound(workspace: Path) -> int:
    """What an absolute artifact's files may hold: the room on the workspace's disk, less
    DISK_MARGIN (the same margin staging keeps)."""
    return max(0, shutil.disk_usage(workspace).free - DISK_MARGIN)


def keep_copied(workspace: Path, path: str, chunks: Iterable[bytes], owner: tuple[int, int] = (0, 0)) -> list[str]:
    """Write the engine's tar of the absolute artifact `path` (members `x`, `x/...` for `/opt/x`),
    checked, as `stored_name(path)` in the workspace; its lines for the job's log. The
    workspace is the job's: its folders are made and entered without following links, and the
    tar goes to a fresh name renamed into place (what the job left at that name is replaced,
    never written through)."""
    rel = stored_name(path)
    pure = PurePosixPath(path)
    root_fd = os.open(workspace, DIR_FLAGS)
    dirs: dict[str, int] = {"": root_fd}
    try:
        try:
            dir_fd = parent_dir_fd(dirs, rel)
        except (JobError, OSError) as exc:
            return [f"artifact {path!r} not kept: {rel!r} cannot be made in the workspace ({_why(exc)})"]
        tmp = f".{pure.name}.{secrets.token_hex(4)}.part"
        try:
            with os.fdopen(os.open(tmp, NEW_FILE, 0o644, dir_fd=dir_fd), "wb") as out:
                kept, lines = copy_checked(
                    chunks, out, pure.name, pure.relative_to("/").as_posix(), bound(workspace), owner
                )
            if not kept:
                os.unlink(tmp, dir_fd=dir_fd)
                return [*lines, f"artifact {path!r} was not produced by the job (nothing there to keep)"]
            os.replace(tmp, pure.name + SUFFIX, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            if isinstance(exc, TarRefused):
                return [f"artifact {path!r} not kept: {exc}"]
            if isinstance(exc, OSError) and exc.errno is not None:
                return [f"artifact {path!r} not kept: writing {rel!r} failed ({_why(exc)})"]
            raise
        return [f"artifact {path!r}: {line}" for line in lines]
    finally:
        for fd in dirs.values():
            os.close(fd)


def staged_tars(workspace: Path) -> list[tuple[str, str]]:
    """(workspace path, absolute path) of each absolute artifact staged in the workspace (a
    dependency's, or this job's own from an earlier attempt), found without following links."""
    top = workspace / PREFIX
    if top.is_symlink() or not top.is_dir():
        return []
    found = []
    for dirpath, dirnames, filenames in os.walk(top):  # os.walk enters no linked dir
        dirnames.sort()
        for name in sorted(filenames):
            rel = (Path(dirpath) / name).relative_to(workspace).as_posix()
            path = original_path(rel)
            if path is not None:
                found.append((rel, path))
    return found


def checked_for_put(workspace: Path, rel: str, path: str, out: IO[bytes], owner: tuple[int, int]) -> list[str]:
    """Copy the staged tar `rel` (of the absolute artifact `path`) checked again, owned by
    `owner`, onto `out`, ready for the engine to put at `/`; its lines for the job's log.
    TarRefused (or NotARegularFile, OSError) when it cannot be."""
    fd = open_regular(workspace, rel)
    root = PurePosixPath(path).relative_to("/").as_posix()
    with os.fdopen(fd, "rb") as src:
        _kept, lines = copy_checked(src, out, root, root, bound(workspace), owner)
    return [f"artifact {path!r}: {line}" for line in lines]


def _why(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
