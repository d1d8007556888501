"""Packing a job's artifact paths into one tar, never reaching outside the workspace.

The workspace is the job's, so every name in it is untrusted: links are
followed only while they stay inside the workspace, and each file is read
from a descriptor opened by `open_regular` (no link, FIFO or device; see
workspace_files.py), so a file swapped for a link or a FIFO between the walk
and the read is skipped, not followed or waited on.
"""

import os
import stat
import tarfile
from pathlib import Path, PurePosixPath

from agent.workspace_files import NotARegularFile, open_regular
from protocol import ArtifactFile


def check_artifact_path(path: str) -> str | None:
    """Why `path` may not be an artifact path, or None if it may."""
    p = PurePosixPath(path)
    if not path or p.is_absolute():
        return f"artifact path {path!r} must be relative to the workspace"
    if ".." in p.parts:
        return f"artifact path {path!r} leaves the workspace ('..')"
    return None


def pack_artifacts(workspace: Path, paths: list[str], dest: Path) -> tuple[list[ArtifactFile], list[str]]:
    """Write the regular files under `paths` into the tar `dest`.

    Returns the files packed and one warning line per path or file skipped.
    Symlinks are followed only while they stay inside the workspace.
    """
    root = workspace.resolve()
    files: list[ArtifactFile] = []
    warnings: list[str] = []
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, "w") as tar:
        for path in paths:
            problem = check_artifact_path(path)
            if problem:
                warnings.append(problem + "; skipped")
                continue
            target = workspace / path
            if not target.exists() and not target.is_symlink():
                warnings.append(f"artifact {path!r} was not produced by the job")
                continue
            for file in _walk(target, root):
                rel = file.relative_to(workspace).as_posix()
                real = file.resolve()
                if not real.is_relative_to(root):
                    warnings.append(f"artifact {rel!r} is a link that leaves the workspace; skipped")
                    continue
                added = _add_file(tar, root, real.relative_to(root), rel)
                if added is None:
                    continue  # not a regular file (a dir, FIFO, device), or it changed under us
                size, shrank = added
                if shrank:
                    warnings.append(f"artifact {rel!r} shrank while it was packed; its end is zeros")
                files.append(ArtifactFile(path=rel, size=size))
    os.replace(tmp, dest)
    return files, warnings


def _add_file(tar: tarfile.TarFile, root: Path, real_rel: Path, arcname: str) -> tuple[int, bool] | None:
    """Add the regular file at `real_rel` (a resolved path under `root`) as `arcname`.

    Returns its size and whether it shrank while read, or None when it is not
    a regular file reachable without links.
    """
    try:
        fd = open_regular(root, real_rel.as_posix())
    except (NotARegularFile, OSError):
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        info = tarfile.TarInfo(arcname)
        info.size = st.st_size
        info.mode = stat.S_IMODE(st.st_mode) & 0o755  # no setuid/setgid/sticky or world-write into the store
        info.mtime = int(st.st_mtime)
        reader = _FixedSize(fh, st.st_size)
        tar.addfile(info, reader)
        return st.st_size, reader.short


class _FixedSize:
    """Exactly `size` bytes of `fh`: tarfile wrote `size` in the header already, so a file
    that shrinks meanwhile is padded with zeros (and reported) instead of breaking the tar."""

    def __init__(self, fh, size: int) -> None:
        self._fh = fh
        self._left = size
        self.short = False

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._fh.read(n) if n else b""
        if len(data) < n:
            self.short = True
            data += b"\0" * (n - len(data))
        self._left -= n
        return data


def _walk(target: Path, root: Path):
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
