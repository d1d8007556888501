"""The code snapshot sent with each job: the project's files as the user has them now.

In a git repository that is the tracked files plus untracked files that are not
ignored (so uncommitted edits are included); elsewhere, every file except
well-known bulky directories. The tar is deterministic (sorted names, zero
mtimes), so its hash identifies the content and runners keep each one once.
"""

import hashlib
import io
import os
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

_SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


@dataclass(frozen=True)
class Snapshot:
    data: bytes
    sha256: str
    files: int

    @property
    def name(self) -> str:
        return f"{self.sha256}.tar"


def list_project_files(root: Path) -> list[str]:
    """Relative POSIX paths of the files that make up the project's code."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        names = [n for n in out.decode("utf-8", "surrogateescape").split("\0") if n]
    except (OSError, subprocess.SubprocessError):
        names = _walk(root)
    return sorted(n for n in set(names) if (root / n).is_file() or (root / n).is_symlink())


def _walk(root: Path) -> list[str]:
    names: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        rel = Path(dirpath).relative_to(root)
        names.extend((rel / f).as_posix() for f in filenames)
    return names


def build_snapshot(root: Path) -> Snapshot:
    buf = io.BytesIO()
    names = list_project_files(root)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            info = tar.gettarinfo(str(root / name), arcname=name)
            if info.islnk():  # a second name of a hard-linked file: store its content again
                info.type, info.linkname, info.size = tarfile.REGTYPE, "", (root / name).stat().st_size
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isreg():
                with open(root / name, "rb") as fh:
                    tar.addfile(info, fh)
            elif info.issym():
                tar.addfile(info)
    data = buf.getvalue()
    return Snapshot(data=data, sha256=hashlib.sha256(data).hexdigest(), files=len(names))


def _glob_regex(pattern: str) -> re.Pattern:
    """A repo glob: `*` within a path segment, `**` across segments; a bare dir means all under it."""
    pattern = pattern.strip().removeprefix("./")
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    body = "".join(out).rstrip("/")
    return re.compile(f"^{body}(?:/.*)?$")


def file_hashes(root: Path, include: list[str] | None = None) -> dict[str, str]:
    """sha256 of each project file (those matching `include`, when given): a job's code inputs."""
    names = list_project_files(root)
    if include is not None:
        patterns = [_glob_regex(g) for g in include]
        names = [n for n in names if any(p.match(n) for p in patterns)]
    hashes = {}
    for name in names:
        path = root / name
        h = hashlib.sha256()
        if path.is_symlink():
            h.update(b"link:" + os.readlink(path).encode())
        else:
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        hashes[name] = h.hexdigest()
    return hashes
