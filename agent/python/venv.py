"""A job's venv written from the shape of the first one `python -m venv` made for its interpreter.

`python -m venv --without-pip` starts an interpreter: 0.1-0.25 s on a loaded 2-core
machine, on the way to every process job's start (and to a gang's rendezvous, which
waits for its last node). What it writes is the same for every env of one interpreter
up to the env's own path (pyvenv.cfg's `command`, the activate scripts), so the first
env of an interpreter is made by venv and its files (a few KiB) are kept in memory to
write the later ones directly, with its path replaced by theirs.

The shape is read right after venv made the env, before any job ran in it: nothing a
job does to its own env reaches the next job's.
"""

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

_MAX_BYTES = 1024 * 1024  # more than venv writes: something else is there, make each env with venv


@dataclass(frozen=True)
class VenvShape:
    root: str  # the env it was read from: replaced by each new env's path
    dirs: tuple[str, ...]  # relative paths, parents first
    links: tuple[tuple[str, str], ...]  # (relative path, target)
    files: tuple[tuple[str, bytes, int], ...]  # (relative path, content, mode)

    @classmethod
    def read(cls, env_dir: Path) -> "VenvShape | None":
        """The env's dirs, links and files; None when it holds anything else, or too much."""
        dirs: list[str] = []
        links: list[tuple[str, str]] = []
        files: list[tuple[str, bytes, int]] = []
        size = 0
        for top, dirnames, filenames in os.walk(env_dir):  # never into a linked dir (lib64 -> lib)
            for name in sorted(dirnames) + sorted(filenames):
                path = Path(top, name)
                rel = path.relative_to(env_dir).as_posix()
                mode = path.lstat().st_mode
                if stat.S_ISLNK(mode):
                    links.append((rel, os.readlink(path)))
                elif stat.S_ISDIR(mode):
                    dirs.append(rel)
                elif stat.S_ISREG(mode) and (size := size + path.lstat().st_size) <= _MAX_BYTES:
                    files.append((rel, path.read_bytes(), stat.S_IMODE(mode)))
                else:
                    return None
        return cls(str(env_dir), tuple(dirs), tuple(links), tuple(files))

    def write(self, env_dir: Path) -> None:
        """The same env at `env_dir` (blocking: call it in a thread)."""
        old, new = self.root, str(env_dir)
        # A retried job's env is there from its attempt before, shaped by that job (links planted
        # where files go): made anew, never written through (rmtree does not follow links).
        if env_dir.is_symlink():
            env_dir.unlink()
        elif env_dir.exists():
            shutil.rmtree(env_dir)
        env_dir.mkdir()
        for rel in self.dirs:
            (env_dir / rel).mkdir(exist_ok=True)
        for rel, target in self.links:
            os.symlink(target.replace(old, new), env_dir / rel)
        for rel, content, mode in self.files:
            path = env_dir / rel
            path.write_bytes(content.replace(old.encode(), new.encode()))
            path.chmod(mode)
