"""Process jobs inside a bubblewrap sandbox, as an unprivileged user when the agent is root.

Job code must not reach the runner's own files (keys, authorized_keys, the journal, the
blob cache other jobs are staged from) nor other jobs. bubblewrap (Debian's `bubblewrap`)
gives each process job a mount namespace where:

- the system is read-only (`/` bound read-only), with a fresh /dev (GPU nodes bound in),
  its own /dev/shm, and its own /proc in its own PID namespace: no other job's processes
  or environments are visible, and nothing of the job outlives its main process;
- the agent's data dir is an empty tmpfs: only the job's workspace, its Python env and
  its home are bound back writable at the same paths (so every path the agent gave the
  job stays true), and the shared requirements layers and interpreters read-only;
- /tmp is the job's own (jobs/<id>/tmp, on disk: datasets in /tmp do not fill RAM).

As root the agent also drops the job to `--job-user` (default `nobody`) with setpriv:
no capabilities and no_new_privs, so a setuid binary gains nothing, and a root-owned
socket such as Docker's stays shut. Directories that user could not pass (/root is 0700,
and an interpreter may live under it) are replaced by an empty tmpfs with only what the
job needs bound back. Without root, bubblewrap makes a user namespace and the job keeps
the agent's uid; the mounts are the same. Where bubblewrap cannot run, the agent says so
at start (`runners` shows it) and jobs run unsandboxed, as before.
"""

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Device nodes a GPU job needs; the rest of /dev is bubblewrap's minimal one.
_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/nvidia-caps")
_DEVICE_DIRS = ("/dev/dri", "/dev/infiniband")
_PROBE_TIMEOUT_S = 20.0
DEFAULT_JOB_USER = "nobody"
MODES = ("auto", "bwrap", "off")


class SandboxError(Exception):
    """bubblewrap cannot run jobs here; the message says why in one line."""


@dataclass(frozen=True)
class JobUser:
    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class Sandbox:
    hidden: tuple[Path, ...]  # the agent's data dir (and a jobs root elsewhere): empty inside
    readable: tuple[Path, ...]  # interpreters and the requirements layers, bound back read-only
    user: JobUser | None  # who the job runs as; None: the agent's own uid (not root)

    @property
    def description(self) -> str:
        """What `runners` and the start line show."""
        return f"bwrap as {self.user.name}" if self.user else "bwrap"

    def command(
        self,
        argv: list[str],
        binds: list[Path],
        tmp: Path,
        cwd: Path,
        read_only: list[Path] | None = None,
        status_fd: int | None = None,
    ) -> list[str]:
        """bwrap's argv running `argv` in `cwd`, with `binds` writable and `read_only` readable at
        their own paths, and `tmp` as /tmp. `status_fd`: where bwrap writes the sandbox's PID 1
        ({"child-pid": N}): the process group a stop signals, and what an exec enters."""
        args = [
            "bwrap",
            # A session (and process group) of the sandbox's own, led by its PID 1: a stop's SIGTERM
            # goes to the job's processes, not to bwrap outside, which would end the job with 143 at
            # once (and no --die-with-parent: a job's python may still be saving after bash died).
            # It also keeps job code from pushing keystrokes into a terminal the agent runs in.
            "--new-session",
            *(["--json-status-fd", str(status_fd)] if status_fd is not None else []),
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-cgroup-try",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--perms",
            "1777",
            "--tmpfs",
            "/dev/shm",  # bwrap's /dev has a root-only shm: NCCL and DataLoader workers need one
            "--proc",
            "/proc",
        ]
        for dev in _gpu_devices():
            args += ["--dev-bind-try", dev, dev]
        args += ["--bind", str(tmp), "/tmp"]
        readable = [*self.readable, *(read_only or [])]
        mounts = [(path, True) for path in binds] + [(path, False) for path in readable]
        masks = sorted(self._masks([path for path, _ in mounts]), key=lambda p: len(p.parts))
        fresh = [Path("/tmp"), *masks]  # mounts made here: bwrap makes their new subdirectories 0700
        for mask in masks:
            args += [*_parents(mask, fresh), "--tmpfs", str(mask)]
        for path, writable in sorted(mounts, key=lambda m: len(m[0].parts)):
            args += _parents(path, fresh)
            args += ["--bind" if writable else "--ro-bind-try", str(path), str(path)]
        args += ["--chdir", str(cwd), "--", *self._drop(), *argv]
        return args

    def enter(self, pid: int, argv: list[str], cwd: Path) -> list[str]:
        """argv that runs `argv` in the sandbox whose PID 1 is `pid` (the exec door)."""
        if not os.path.exists(f"/proc/{pid}"):
            raise SandboxError("the job's sandbox is gone (the job is ending)")
        enter = ["nsenter", f"--target={pid}", "--mount", "--pid", "--root"]
        if self.user is None:
            enter[2:2] = ["--user", "--preserve-credentials"]
        # The directory is changed inside: nsenter's --wd opens it before entering, a directory
        # of the host's mounts that the job's root cannot reach (getcwd fails; --wdns is newer).
        return [*enter, *self._drop(), "sh", "-c", 'cd -- "$0" && exec "$@"', str(cwd), *argv]

    def give(self, paths: list[Path]) -> None:
        """Make `paths` (trees the agent wrote) the job user's; nothing to do without a user switch."""
        if self.user is None:
            return
        for top in paths:
            chown_tree(top, self.user.uid, self.user.gid)

    def _drop(self) -> list[str]:
        if self.user is None:
            return []  # bwrap unprivileged: a user namespace, no capabilities outside it
        return [
            "setpriv",
            f"--reuid={self.user.uid}",
            f"--regid={self.user.gid}",
            "--clear-groups",
            "--no-new-privs",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ]

    def _masks(self, needed: list[Path]) -> list[Path]:
        """Where an empty tmpfs goes: each hidden dir, and (for a job user) the topmost directory
        on the way to a needed path that the user could not pass; outermost only."""
        masks = set(self.hidden)
        if self.user is not None:
            for path in needed:
                top = _closed_ancestor(path)
                if top is not None:
                    masks.add(top)
        return [m for m in masks if not any(m != o and m.is_relative_to(o) for o in masks)]


def chown_tree(top: Path, uid: int, gid: int) -> None:
    """`top` and everything under it owned by uid:gid (links themselves, never what they point at)."""
    os.lchown(top, uid, gid)
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, gid)


def probe(mode: str, data_dirs: list[Path], readable: list[Path], job_user: str | None) -> tuple[Sandbox | None, str]:
    """The sandbox for `--job-sandbox MODE`, and a line for the log and `runners`: what isolates
    process jobs, or why nothing does. SandboxError when MODE is bwrap and it cannot run."""
    if mode == "off":
        return None, "none (--job-sandbox off)"
    try:
        user = _job_user(job_user)
        sandbox = Sandbox(tuple(p.resolve() for p in data_dirs), tuple(p.resolve() for p in readable), user)
        _try(sandbox, data_dirs[0])
    except SandboxError as exc:
        if mode == "bwrap":
            raise
        return None, f"none ({exc})"
    return sandbox, sandbox.description


def _job_user(name: str | None) -> JobUser | None:
    if os.geteuid() != 0:
        if name:
            raise SandboxError(f"--job-user {name}: only an agent running as root can run jobs as another user")
        return None
    name = name or DEFAULT_JOB_USER
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise SandboxError(f"--job-user {name}: no such user (create one: useradd --system {name})") from None
    if entry.pw_uid == 0:
        raise SandboxError(f"--job-user {name}: that is root; name an unprivileged user")
    return JobUser(name, entry.pw_uid, entry.pw_gid)


def _try(sandbox: Sandbox, data_dir: Path) -> None:
    """Run `true` in a sandbox as a job gets it: bubblewrap may be missing, or user namespaces off."""
    for tool in ("bwrap", *(["setpriv"] if sandbox.user else [])):
        if shutil.which(tool) is None:
            package = "bubblewrap" if tool == "bwrap" else "util-linux"
            raise SandboxError(f"{tool} is not installed (apt-get install {package})")
    try:
        probe_dir = Path(tempfile.mkdtemp(prefix="sandbox-probe-", dir=data_dir))  # under the hidden dir, as jobs
    except OSError:  # a full disk: the sandbox still works, and must not be given up for that
        try:
            probe_dir = Path(tempfile.mkdtemp(prefix="lanpool-sandbox-probe-"))
        except OSError as exc:
            raise SandboxError(f"no room to try bwrap: {exc}") from None
    work, tmp = probe_dir / "workspace", probe_dir / "tmp"
    try:
        work.mkdir()
        tmp.mkdir()
        sandbox.give([probe_dir])
        argv = sandbox.command(["sh", "-c", "test -w . && test -w /tmp"], [work.resolve()], tmp, work.resolve())
        done = subprocess.run(argv, capture_output=True, timeout=_PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxError(f"bwrap could not run: {exc}") from None
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
    if done.returncode != 0:
        why = (done.stderr.decode(errors="replace").strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise SandboxError(f"bwrap could not run: {why[:200]}")


def _closed_ancestor(path: Path) -> Path | None:
    """The topmost directory above `path` that others cannot pass (no o+x), if any."""
    for parent in reversed(path.parents):  # "/" first
        with contextlib.suppress(OSError):
            if not os.stat(parent).st_mode & 0o001:
                return parent
    return None


def _parents(path: Path, fresh: list[Path]) -> list[str]:
    """--dir for each directory between the fresh mount holding `path` and `path` itself: bwrap
    would make them 0700, which a job user cannot pass."""
    base = max((m for m in fresh if path != m and path.is_relative_to(m)), key=lambda m: len(m.parts), default=None)
    if base is None:
        return []
    args: list[str] = []
    for parent in reversed(path.parents):
        if parent != base and parent.is_relative_to(base):
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _gpu_devices() -> list[str]:
    found = [str(p) for p in sorted(Path("/dev").glob("nvidia[0-9]*"))]
    found += [d for d in _DEVICES + _DEVICE_DIRS if os.path.exists(d)]
    return found
