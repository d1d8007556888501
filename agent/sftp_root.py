"""The SFTP server authorized controllers get: one directory (transfer/), and no way out.

asyncssh's own `chroot` checks a symlink only when it is created, so re-pointing
an intermediate link escapes it (inner -> a, outer -> inner/.., then inner -> .).
Here no client can create links at all, every path is resolved (realpath) and
must stay under the root before anything touches it, files are opened with
O_NOFOLLOW and must be regular files, and attributes cannot be changed.
Pairing-only connections get no SFTP whatsoever (agent/server.py).
"""

import logging
import os
import stat

import asyncssh
from asyncssh.channel import SSHChannel
from asyncssh.constants import FXF_APPEND, FXF_CREAT, FXF_EXCL, FXF_READ, FXF_TRUNC, FXF_WRITE

log = logging.getLogger(__name__)


class ConfinedSFTPServer(asyncssh.SFTPServer):
    def __init__(self, chan: SSHChannel[bytes], root: str) -> None:
        # asyncssh hands the SFTP factory a channel it types as SSHChannel (not always an
        # SSHServerChannel at run time), while SFTPServer.__init__ is typed for SSHServerChannel.
        super().__init__(chan, chroot=os.fsencode(root))  # type: ignore[arg-type]
        self._root = os.fsencode(os.path.realpath(root))
        peer = chan.get_connection().get_extra_info("peername")
        self._peer = peer[0] if peer else "?"

    def map_path(self, path: bytes) -> bytes:
        lexical = super().map_path(path)  # '..' cannot climb above the root
        real = os.path.realpath(lexical)  # every symlink in the path followed now, not later
        if real != self._root and not real.startswith(self._root + b"/"):
            log.warning("SFTP from %s refused: %r leads out of %s", self._peer, path, os.fsdecode(self._root))
            raise asyncssh.SFTPPermissionDenied("path leads out of the transfer directory")
        return real

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        if pflags & FXF_READ and pflags & FXF_WRITE:
            flags, mode = os.O_RDWR, "r+b"
        elif pflags & FXF_WRITE:
            flags, mode = os.O_WRONLY, "wb"
        else:
            flags, mode = os.O_RDONLY, "rb"
        for bit, extra in (
            (FXF_APPEND, os.O_APPEND),
            (FXF_CREAT, os.O_CREAT),
            (FXF_TRUNC, os.O_TRUNC),
            (FXF_EXCL, os.O_EXCL),
        ):
            if pflags & bit:
                flags |= extra
        # O_NONBLOCK: a FIFO must not freeze the agent (it is refused below).
        fd = os.open(self.map_path(path), flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise asyncssh.SFTPPermissionDenied("not a regular file")
            os.set_blocking(fd, True)
            return os.fdopen(fd, mode, buffering=0)
        except BaseException:
            os.close(fd)
            raise

    def open56(self, path: bytes, desired_access: int, flags: int, attrs: asyncssh.SFTPAttrs) -> object:
        raise asyncssh.SFTPOpUnsupported("SFTP version 5 and later are not served")

    def _refuse(self, what: str) -> None:
        log.warning("SFTP from %s refused: %s", self._peer, what)
        raise asyncssh.SFTPPermissionDenied(f"{what} is not allowed here")

    def symlink(self, oldpath: bytes, newpath: bytes) -> None:
        self._refuse("creating symlinks")

    def link(self, oldpath: bytes, newpath: bytes) -> None:
        self._refuse("creating hard links")

    def readlink(self, path: bytes) -> bytes:
        self._refuse("reading links")
        return b""

    def setstat(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> None:
        self._refuse("changing file attributes")

    def lsetstat(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> None:
        self._refuse("changing file attributes")

    def fsetstat(self, file_obj: object, attrs: asyncssh.SFTPAttrs) -> None:
        self._refuse("changing file attributes")
