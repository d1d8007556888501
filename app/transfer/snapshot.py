"""The code snapshot sent with each job: the project's files as the user has them now.

In a git repository that is the tracked files plus untracked files that are not
ignored (so uncommitted edits are included); elsewhere, every file except
well-known bulky directories. Either way lanpool's own outputs (its data dir or
downloads inside the project, .lanpool/) are left out: they would change the
cache key and be uploaded back.

The snapshot is a manifest: (path, mode, size, sha256) per file, or the target
of a symlink. Each file is read once per change: hashes are kept by (device,
inode, size, mtime, ctime) in memory and in the controller's data dir
(app/transfer/hash_cache.py), so planning's cache keys and the upload that follows share
one pass, and an unchanged file is not read again by the next `run` either.
"""

import hashlib
import json
import os
import re
import stat
import subprocess
from pathlib import Path

from lanpool.app.home import ControllerHome
from lanpool.app.transfer.hash_cache import HashCache, stat_key
from lanpool.protocol.message_base import Record, record

_SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
_OWN_DIR = ".lanpool"  # lanpool state kept in a project, never part of its code
_HASH_READ = 1 << 20


@record
class ManifestEntry(Record):
    """One file (or symlink) of a project snapshot."""

    path: str  # relative POSIX path
    mode: int = 0o644
    size: int = 0
    sha256: str = ""  # of the content; "" for a symlink
    link: str = ""  # a symlink's target


@record
class Manifest(Record):
    """A project snapshot: its root and its entries."""

    root: Path
    entries: tuple[ManifestEntry, ...]

    @property
    def digest(self) -> str:
        """One hash for the whole snapshot (recorded with the job)."""
        rows = [[e.path, e.mode, e.sha256, e.link] for e in self.entries]
        return hashlib.sha256(json.dumps(rows).encode()).hexdigest()

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)


def list_project_files(root: Path) -> list[str]:
    """Relative POSIX paths of the files that make up the project's code."""
    try:
        if not _may_be_git(root):
            raise FileNotFoundError("not in a git work tree")  # git would say so, a process later
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        names = [n for n in out.decode("utf-8", "surrogateescape").split("\0") if n]
    except (OSError, subprocess.SubprocessError):
        names = _walk(root)
    own = _own_outputs(root)
    return sorted(
        n
        for n in set(names)
        if not any(n == o or n.startswith(o + "/") for o in own) and ((root / n).is_file() or (root / n).is_symlink())
    )


def _may_be_git(root: Path) -> bool:
    """Whether git could find a repository for `root`: a .git (dir, or file of a worktree) in it
    or above, or git's own variables naming one. Outside one, `git ls-files` only fails, after
    a process start (~3 ms of a `run`, twice: planning and the snapshot)."""
    if any(v in os.environ for v in ("GIT_DIR", "GIT_WORK_TREE")):
        return True
    for here in {root.absolute(), root.resolve()}:  # git starts from the real path: a linked root too
        if any(os.path.lexists(d / ".git") for d in (here, *here.parents)):
            return True
    return False


def _own_outputs(root: Path) -> list[str]:
    """lanpool's own directories inside the project, relative to it."""
    home = ControllerHome.default()
    places = [home.root, ControllerHome.downloads("x").parent]
    own = [_OWN_DIR]
    resolved = root.resolve()
    for place in places:
        try:
            rel = place.expanduser().resolve().relative_to(resolved)
        except ValueError:
            continue
        if rel.parts:
            own.append(rel.as_posix())
    return own


def _walk(root: Path) -> list[str]:
    names: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        rel = Path(dirpath).relative_to(root)
        names.extend((rel / f).as_posix() for f in filenames)
    return names


_cache: HashCache | None = None


def _hash_cache() -> HashCache:
    """One per process, kept in the controller's data dir when that exists."""
    global _cache
    if _cache is None:
        home = ControllerHome.default()
        _cache = HashCache(home.root / "file-hashes.sqlite" if home.root.is_dir() else None)
    return _cache


def content_hash(path: Path, cache: HashCache | None = None) -> tuple[str, os.stat_result]:
    """sha256 of a regular file's content (cached by its stat) and the stat it was taken with."""
    cache = cache or _hash_cache()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        key = stat_key(st)
        known = cache.get(key)
        if known is not None:
            return known, st
        h = hashlib.sha256()
        while block := os.read(fd, _HASH_READ):
            h.update(block)
    finally:
        os.close(fd)
    cache.put(key, h.hexdigest())
    return h.hexdigest(), st


def build_manifest(root: Path, names: list[str] | None = None) -> Manifest:
    """The manifest of the project's files (or of `names` under `root`)."""
    entries = []
    cache = _hash_cache()
    for name in list_project_files(root) if names is None else names:
        path = root / name
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                entries.append(ManifestEntry(name, link=os.readlink(path)))
            elif stat.S_ISREG(st.st_mode):
                digest, st = content_hash(path, cache)
                entries.append(ManifestEntry(name, stat.S_IMODE(st.st_mode) & 0o755, st.st_size, digest))
        except FileNotFoundError:  # removed since it was listed
            continue
    cache.save()
    return Manifest(root, tuple(entries))


def _glob_regex(pattern: str) -> re.Pattern[str]:
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
    for entry in build_manifest(root, names).entries:
        if entry.link:
            hashes[entry.path] = hashlib.sha256(b"link:" + entry.link.encode()).hexdigest()
        else:
            hashes[entry.path] = entry.sha256
    return hashes
