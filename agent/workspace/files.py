"""Opening files a job left in its workspace: untrusted, so never through a link.

A job controls every name under its workspace. It can make the file the
agent is about to read a symlink to a host file (the agent's host key), a
FIFO (an open without O_NONBLOCK waits for a writer forever), or a device node
(a container may mknod): each would make the agent leak or hang. So a file is
reached from the workspace directory one component at a time, each opened
relative to its parent's descriptor with O_NOFOLLOW, and only a regular file
is ever opened for reading. The final component is first opened with O_PATH,
which reads nothing and runs no device's open, and is checked with fstat before
the same inode is reopened for reading.
"""

import errno
import os
import stat
from pathlib import Path, PurePosixPath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_O_PATH = getattr(os, "O_PATH", 0)


class NotARegularFile(OSError):
    """The name exists but is a link, directory, FIFO, socket or device."""


def open_regular(root: Path, rel: str | PurePosixPath) -> int:
    """A read-only descriptor of the regular file `rel` under the directory `root`.

    Raises NotARegularFile when any component is a link (or not a directory)
    or the file is not regular, OSError when it does not exist. The caller
    closes the descriptor.
    """
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
        raise NotARegularFile(f"{str(rel)!r} is not a path inside the workspace")
    dir_fd = _open_dir(str(root), None)
    try:
        for name in parts[:-1]:
            if name == ".":
                continue
            child = _open_dir(name, dir_fd)
            os.close(dir_fd)
            dir_fd = child
        return _open_file(parts[-1], dir_fd)
    finally:
        os.close(dir_fd)


def remove_entry(root: Path, rel: str | PurePosixPath) -> bool:
    """Unlink `rel` under `root` (a link or file, never followed), reaching it through real
    directories only. False when it cannot be reached that way: nothing is removed then."""
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
        return False
    try:
        dir_fd = _open_dir(str(root), None)
    except OSError:
        return False
    try:
        for name in parts[:-1]:
            child = _open_dir(name, dir_fd)
            os.close(dir_fd)
            dir_fd = child
        os.unlink(parts[-1], dir_fd=dir_fd)
        return True
    except OSError:
        return False
    finally:
        os.close(dir_fd)


def _open_dir(name: str, dir_fd: int | None) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotARegularFile(f"{name!r} is a link or not a directory") from None
        raise


def _open_file(name: str, dir_fd: int) -> int:
    if _O_PATH:
        # With O_PATH|O_NOFOLLOW a symlink opens as itself: fstat below refuses it.
        handle = os.open(name, _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            _require_regular(os.fstat(handle), name)
            # The same inode, now for reading: /proc/self/fd resolves to the checked
            # file itself, even if its name was swapped for something else meanwhile.
            fd = os.open(f"/proc/self/fd/{handle}", _READ_FLAGS & ~os.O_NOFOLLOW)
        except FileNotFoundError:  # no /proc: the plain open below re-checks after opening
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        finally:
            os.close(handle)
    else:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    try:
        _require_regular(os.fstat(fd), name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _require_regular(st: os.stat_result, name: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise NotARegularFile(f"{name!r} is not a regular file")
