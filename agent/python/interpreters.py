"""The Python interpreters this runner offers to process jobs.

The base (`app agent serve --job-python PATH`, default the agent's own
interpreter) is the one whose packages (torch, Lightning) every job sees
unless it asks for another version; the others are the `python3.X` on PATH
and pyenv's versions, found once at start. Each is probed in a subprocess for
its version and site-packages directories, so a job environment can be layered
on them without importing anything into the agent.
"""

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lanpool.agent.errors import AgentError

log = logging.getLogger(__name__)

_PROBE = (
    "import json, site, sys; print(json.dumps({'version': '%d.%d' % sys.version_info[:2], "
    "'executable': sys.executable, 'site_dirs': site.getsitepackages()}))"
)
_PROBE_TIMEOUT_S = 10.0
_MINORS = range(6, 16)  # python3.6 .. python3.15 on PATH


@dataclass(frozen=True)
class Interpreter:
    version: str  # "3.11"
    path: str  # what runs it: the base as given (a venv's python), the others as they report themselves
    site_dirs: tuple[str, ...]  # what a job environment layered on it sees
    bin_dir: str  # its scripts (torchrun, ...): on a job's PATH after the job's own

    def __str__(self) -> str:
        return f"python {self.version} ({self.path})"


class PythonsError(AgentError):
    """A version this runner does not have; the message lists what it has."""


class Pythons:
    """The base interpreter first, then the others by version."""

    def __init__(self, found: list[Interpreter]) -> None:
        if not found:
            raise PythonsError("no Python interpreter for jobs")
        self.base = found[0]
        self.all = found

    @classmethod
    def discover(cls, base: str | None = None) -> "Pythons":
        """Probe the base (PythonsError if it does not run) and every other interpreter found."""
        base_path = base or sys.executable
        candidates = [base_path, *_on_path(), *_pyenv_versions()]
        probed = _probe_all(candidates)
        if probed[0] is None:
            raise PythonsError(f"--job-python {base_path}: not a Python interpreter that runs here")
        found: list[Interpreter] = []
        for interp in probed:
            if interp is not None and all(f.version != interp.version for f in found):
                found.append(interp)
        found[1:] = sorted(found[1:], key=lambda i: tuple(int(n) for n in i.version.split(".")))
        log.info("python for jobs: %s", ", ".join(str(i) for i in found))
        return cls(found)

    def versions(self) -> str:
        """'3.11,3.10,3.12': the base first, as carried in the runner's resources."""
        return ",".join(i.version for i in self.all)

    def pick(self, wanted: str) -> Interpreter:
        """The interpreter for `python: 3.X` ("" : the base); PythonsError naming what there is."""
        if not wanted:
            return self.base
        key = ".".join(wanted.strip().split(".")[:2])
        for interp in self.all:
            if interp.version == key:
                return interp
        others = ", ".join(i.version for i in self.all[1:])
        has = f"{self.base.version} (base, {self.base.path})" + (f", {others}" if others else "")
        raise PythonsError(
            f"python {wanted} is not on this runner: it has {has}; install it (pyenv, python{key} on PATH) "
            "or use an image"
        )


def _on_path() -> list[str]:
    # pyenv's shims are slow to run and point at the versions probed directly (_pyenv_versions).
    return [p for m in _MINORS if (p := shutil.which(f"python3.{m}")) and os.sep + "shims" + os.sep not in p]


def _pyenv_versions() -> list[str]:
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    try:
        dirs = sorted(root.iterdir())
    except OSError:
        return []
    return [str(d / "bin" / "python3") for d in dirs if (d / "bin" / "python3").is_file()]


def _probe_all(paths: list[str]) -> list[Interpreter | None]:
    """Probe every candidate at once (pyenv's shims are slow): None for one that does not run.
    The first is the base: it keeps the path it was given."""
    procs: list[subprocess.Popen[str] | None] = []
    for path in paths:
        try:
            procs.append(
                subprocess.Popen(
                    [path, "-I", "-c", _PROBE],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL,
                    text=True,
                )
            )
        except OSError:
            procs.append(None)
    return [_result(path, proc, keep_path=(i == 0)) for i, (path, proc) in enumerate(zip(paths, procs, strict=True))]


def _result(path: str, proc: "subprocess.Popen[str] | None", keep_path: bool) -> Interpreter | None:
    if proc is None:
        return None
    try:
        out, _ = proc.communicate(timeout=_PROBE_TIMEOUT_S)
        info = json.loads(out)
        version, executable, site_dirs = str(info["version"]), str(info["executable"]), info["site_dirs"]
    except (subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
        proc.kill()
        proc.wait()
        return None
    if proc.returncode != 0 or not version.startswith("3."):
        return None
    # The base keeps the path it was given (a venv's python: its packages); another keeps
    # the path it reports, past a pyenv shim.
    run = os.path.abspath(path) if keep_path else executable
    return Interpreter(version, run, tuple(str(d) for d in site_dirs), os.path.dirname(run))
