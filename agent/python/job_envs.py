"""Each process job's own Python environment, layered on an interpreter the runner offers.

jobs/<id>/pyenv is a venv made with `--without-pip` (then, for the same interpreter,
written without venv: agent/python/venv.py) whose
`_lanpool.pth` adds, after its own site-packages, the requirements environment
(if the job has `requirements:`) and then the interpreter's site-packages: the
job sees the runner's torch and Lightning without a copy, and `pip install` in
its commands (a `pip` script in its bin/ runs `python -m pip` with the base's
pip) writes into jobs/<id>/pyenv only. pip never removes a package from a layer
below ("outside environment"): a newer version lands in the job's env and
shadows it. The interpreter's console scripts (`torchrun`, `fabric`, `accelerate`,
`lightning`, ...) would run the interpreter itself, which sees none of that: the env's
bin/ holds a shim for each (`exec ENV/bin/python SCRIPT "$@"`), found first on PATH.

pip in a job, its `requirements:` and its commands' `pip install` alike, holds the base's
framework at its versions: PIP_CONSTRAINT names a constraints file (in the env) pinning
the interpreter's torch, torchvision, torchaudio, Lightning and their CUDA (nvidia-*,
triton), so an unpinned `torchvision` cannot pull a second torch and its CUDA wheels
(gigabytes) into the job's layer; pip picks versions that fit the base instead, or says
why it cannot. `hold_base: false` in the workflow lets them change. Before pip downloads, a
dry run (agent/python/pip_report.py) asks what it would install: a second framework beside the
base's, or a large one, gets a line in the log with its size.

Requirements install once per (interpreter, requirements text, pins) into
pyenvs/<key>/ of the agent's data dir, with pip's output in the job's log, and
are reused read-only by every later job with the same key: jobs layer on it and
never install into it. The key is the file's text, not what it points at (a
local `./pkg` that changed is not noticed: change the file, or `app agent gc`).
"""

import asyncio
import configparser
import contextlib
import hashlib
import logging
import os
import re
import shlex
import shutil
import time
from pathlib import Path

from lanpool.agent.executors.base import ExecutorError, OutputSink
from lanpool.agent.executors.sandbox import Sandbox, chown_tree
from lanpool.agent.python.helper_proc import kill_and_reap
from lanpool.agent.python.interpreters import Interpreter, Pythons, PythonsError
from lanpool.agent.python.venv import VenvShape

log = logging.getLogger(__name__)

_DONE = ".lanpool-ready"  # written last: a requirements env without it is half-built
CONSTRAINTS = "lanpool-constraints.txt"  # in the job's env: the base's framework, pinned (PIP_CONSTRAINT)
_HELD = ("torch", "torchvision", "torchaudio", "lightning", "pytorch-lightning", "lightning-fabric", "triton")
_INSTALL_TIMEOUT_S = 3 * 3600.0
_DRY_RUN_TIMEOUT_S = 120.0  # a resolution that takes longer goes unforecast: the install itself starts
_MAX_LINE = 1024 * 1024


class JobPythons:
    def __init__(self, pythons: Pythons, cache_dir: Path | None) -> None:
        """`cache_dir` None: requirements install into each job's env, uncached."""
        self.pythons = pythons
        self.cache_dir = cache_dir
        # Set by the agent once probed: `pip install -r` of a job's requirements runs job code
        # (setup.py, build backends), so it runs sandboxed as the job does, writing only its layer.
        self.sandbox: Sandbox | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._shapes: dict[str, VenvShape] = {}  # interpreter path -> what venv wrote for it
        self._dists: dict[str, dict[str, str]] = {}  # interpreter path -> its distributions' name -> version
        self._constraints: dict[str, str] = {}  # interpreter path -> its constraints file's text (read once)

    def check(self, version: str) -> None:
        """ExecutorError (one line, what the runner has) when `version` is not here."""
        try:
            self.pythons.pick(version)
        except PythonsError as exc:
            raise ExecutorError(str(exc)) from None

    async def prepare(
        self,
        env_dir: Path,
        workspace: Path,
        working_dir: Path,
        version: str,
        requirements: str,
        sink: OutputSink,
        hold_base: bool = True,
    ) -> dict[str, str]:
        """Build the job's env (and its requirements layer); the variables that make the job use it."""
        try:
            interp = self.pythons.pick(version)
        except PythonsError as exc:
            raise ExecutorError(str(exc)) from None
        started = time.monotonic()
        layers = list(interp.site_dirs)
        paths = [interp.bin_dir]
        pins = self.pins(interp) if hold_base else []
        if requirements:
            req_file = _requirements_file(workspace, working_dir, requirements)
            req_env = await self._requirements_env(
                interp, env_dir, working_dir, req_file, requirements, sink, pins, hold_base
            )
            layers = [str(_site_packages(req_env))]  # its own _lanpool.pth adds the interpreter's below it
            paths.insert(0, str(req_env / "bin"))
        await _make_venv(interp, env_dir, layers, self._shapes)
        env = {
            "VIRTUAL_ENV": str(env_dir),
            "PATH": os.pathsep.join([str(env_dir / "bin"), *paths, os.environ.get("PATH", "")]),
        }
        if pins:  # the job's own `pip install`s hold them too
            if interp.path not in self._constraints:  # pip's own configuration read once, as the pins
                self._constraints[interp.path] = constraints_text(pins)
            (env_dir / CONSTRAINTS).write_text(self._constraints[interp.path])
            env["PIP_CONSTRAINT"] = str(env_dir / CONSTRAINTS)
        if version or requirements:  # a plain job's env is no news: its log stays the job's own
            _say(sink, f"python {interp.version} env {env_dir.name} ready in {time.monotonic() - started:.2f}s")
        return env

    def pins(self, interp: Interpreter) -> list[str]:
        """`name==version` of the interpreter's framework (torch, Lightning, their CUDA)."""
        dists = self.distributions(interp)
        return sorted(f"{n}=={v}" for n, v in dists.items() if n in _HELD or n.startswith("nvidia-"))

    def distributions(self, interp: Interpreter) -> dict[str, str]:
        """The interpreter's distributions, canonical name -> version, read once from the names of
        its site-packages' `NAME-VERSION.dist-info` directories (no interpreter run); the first
        site dir's wins, as for imports."""
        if interp.path not in self._dists:
            found: dict[str, str] = {}
            for site_dir in interp.site_dirs:
                with contextlib.suppress(OSError):
                    for entry in sorted(os.listdir(site_dir)):
                        name, _, version = entry.removesuffix(".dist-info").partition("-")
                        if entry.endswith(".dist-info") and version:
                            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), version)
            self._dists[interp.path] = found
        return self._dists[interp.path]

    async def _requirements_env(
        self,
        interp: Interpreter,
        env_dir: Path,
        working_dir: Path,
        req_file: Path,
        requirements: str,
        sink: OutputSink,
        pins: list[str],
        hold_base: bool,
    ) -> Path:
        text = req_file.read_bytes()
        held = constraints_text(pins)
        key_text = f"{interp.path}\0{interp.version}\0".encode() + text + (b"\0" + held.encode() if pins else b"")
        key = hashlib.sha256(key_text).hexdigest()[:20]
        if self.cache_dir is None:
            target = env_dir.with_name(env_dir.name + "-requirements")
        else:
            target = self.cache_dir / key
        lock = self._locks.setdefault(key, asyncio.Lock())  # two jobs with one key: one installs
        async with lock:
            if (target / _DONE).exists():
                _say(sink, f"requirements {requirements}: cached ({key}), nothing to install")
                os.utime(target / _DONE)  # last used: `app agent gc` removes the least recently used first
                return target
            shutil.rmtree(target, ignore_errors=True)  # a half-built one (the agent stopped mid-install)
            await _make_venv(interp, target, list(interp.site_dirs), self._shapes)
            _say(sink, f"requirements {requirements}: installing into python {interp.version} env {key}")
            started = time.monotonic()
            command = [str(target / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
            argv = [*command, "--no-input", "-r", str(req_file)]
            pip_env = {"VIRTUAL_ENV": str(target)}
            if pins:
                (target / CONSTRAINTS).write_text(held)
                pip_env["PIP_CONSTRAINT"] = str(target / CONSTRAINTS)
                _say(sink, f"requirements {requirements}: {_held_text(pins)} held at the base's versions ({HOLD_HINT})")
            forecast = await self._forecast(
                interp, command, req_file, target, env_dir.parent, working_dir, pip_env, hold_base
            )
            if forecast:
                _say(sink, f"requirements {requirements}: {forecast}")
            if self.sandbox is not None:
                argv = await self._sandboxed(argv, target, env_dir.parent, working_dir)
            code = await _run(f"pip install -r {requirements}", argv, working_dir, pip_env, sink)
            if self.sandbox is not None:
                await asyncio.to_thread(
                    chown_tree, target, os.geteuid(), os.getegid()
                )  # the layer is the agent's again: no job user writes it later
            if code != 0:
                shutil.rmtree(target, ignore_errors=True)
                raise ExecutorError(f"pip install -r {requirements} failed (exit {code}); its output is in the log")
            (target / _DONE).write_text(requirements + "\n")
            _say(sink, f"requirements {requirements}: installed in {time.monotonic() - started:.1f}s, cached")
        return target

    async def _forecast(
        self,
        interp: Interpreter,
        command: list[str],
        req_file: Path,
        target: Path,
        job_dir: Path,
        working_dir: Path,
        pip_env: dict[str, str],
        hold_base: bool,
    ) -> str | None:
        """What pip would install, asked with the install's own constraints, index settings and
        sandbox: a line when that is a large framework download (agent/python/pip_report.py).
        A forecast only: any trouble is a debug line, and the install goes on."""
        from lanpool.agent.python import pip_report  # only when an install runs: urllib and a thread pool

        base = self.distributions(interp)
        if not pip_report.supports_report(base.get("pip", "")):
            return None  # an older pip has no --report: the install goes on without the forecast
        argv = [*command, "--no-input", "--quiet", "--dry-run", "--report", "-", "-r", str(req_file)]
        started = time.monotonic()
        try:
            if self.sandbox is not None:  # the dry run may build an sdist's metadata: job code
                argv = await self._sandboxed(argv, target, job_dir, working_dir)
            report = await pip_report.dry_run(argv, str(working_dir), _child_env(pip_env), _DRY_RUN_TIMEOUT_S)
            line = await pip_report.forecast(pip_report.read_report(report), base, hold_base)
        except Exception as exc:  # never the install's failure (a cancel is not an Exception: it goes on up)
            log.debug("requirements forecast skipped after %.2fs: %s", time.monotonic() - started, exc)
            return None
        log.debug("requirements forecast took %.2fs", time.monotonic() - started)
        return line

    async def _sandboxed(self, argv: list[str], target: Path, job_dir: Path, working_dir: Path) -> list[str]:
        """`argv` in the job's sandbox: the layer being built writable, the workspace read-only."""
        assert self.sandbox is not None
        tmp = job_dir / "tmp"
        tmp.mkdir(exist_ok=True)
        await asyncio.to_thread(self.sandbox.give, [target, tmp])
        workspace = (job_dir / "workspace").resolve()
        return self.sandbox.command(argv, [target.resolve()], tmp.resolve(), working_dir.resolve(), [workspace])


HOLD_HINT = "`hold_base: false` in the workflow lets them change"
_PIP_CONFIGS = ("/etc/pip.conf", "/etc/xdg/pip/pip.conf", "~/.config/pip/pip.conf", "~/.pip/pip.conf")


def constraints_text(pins: list[str]) -> str:
    """The job's constraints file: the constraints pip was already given on this runner (PIP_CONSTRAINT
    would replace them: each is named with `-c`), then the base's pins."""
    return "".join(f"-c {path}\n" for path in _configured_constraints()) + "".join(p + "\n" for p in pins)


def _configured_constraints() -> list[str]:
    """Constraint files pip's configuration names (its config files, then PIP_CONSTRAINT), as pip reads them."""
    parser = configparser.RawConfigParser()
    files = [os.path.expanduser(f) for f in _PIP_CONFIGS] + [os.environ.get("PIP_CONFIG_FILE", "")]
    with contextlib.suppress(configparser.Error, UnicodeDecodeError):
        parser.read([f for f in files if f and os.path.isfile(f)])
    found: list[str] = []
    for section in ("global", "install"):
        found += parser.get(section, "constraint", fallback="").split()
    found += os.environ.get("PIP_CONSTRAINT", "").split()
    return [f for f in dict.fromkeys(found) if os.path.isfile(f)]


def _held_text(pins: list[str]) -> str:
    """`torch==2.5.1, lightning==2.4.0 and 12 CUDA packages`."""
    main = [p for p in pins if not p.startswith(("nvidia-", "triton"))]
    cuda = len(pins) - len(main)
    return ", ".join(main) + (f" and {cuda} CUDA package{'s' if cuda != 1 else ''}" if cuda else "")


def _requirements_file(workspace: Path, working_dir: Path, requirements: str) -> Path:
    """The file, which must be in the job's workspace (relative to its working dir, as pip -r took it)."""
    path = (working_dir / requirements).resolve()
    if not path.is_relative_to(workspace.resolve()) or not path.is_file():
        raise ExecutorError(f"requirements {requirements!r}: no such file in the job's workspace")
    return path


async def _make_venv(interp: Interpreter, env_dir: Path, layers: list[str], shapes: dict[str, VenvShape]) -> None:
    """A venv without pip, seeing `layers` after its own site-packages; `pip` runs the layers' pip into it.
    `shapes`: what venv wrote for each interpreter, to write its later envs without it (agent/python/venv.py)."""
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    shape = shapes.get(interp.path)
    if shape is not None:
        try:
            await asyncio.to_thread(shape.write, env_dir)
        except OSError as exc:
            raise ExecutorError(f"could not create the job's python {interp.version} environment: {exc}") from None
    else:
        code = await _run(
            "python -m venv", [interp.path, "-I", "-m", "venv", "--without-pip", str(env_dir)], env_dir.parent, {}, None
        )
        if code != 0:
            raise ExecutorError(f"could not create the job's python {interp.version} environment (venv exit {code})")
        await asyncio.to_thread(_write_shims, interp, env_dir)  # part of the shape: later envs get them as written
        read = await asyncio.to_thread(VenvShape.read, env_dir)
        if read is not None:
            shapes[interp.path] = read
    # `import site` lines so the layers' own .pth files (editable installs) are read too.
    pth = "".join(f"import site; site.addsitedir({d!r})\n" for d in layers)
    (_site_packages(env_dir) / "_lanpool.pth").write_text(pth)
    python = env_dir / "bin" / "python"
    for name in ("pip", "pip3", f"pip{interp.version}"):
        script = env_dir / "bin" / name
        script.write_text(f'#!/bin/sh\nexec "{python}" -m pip "$@"\n')
        script.chmod(0o755)


def console_scripts(interp: Interpreter) -> list[str]:
    """The names of the interpreter's console scripts in its bin/: files whose `#!` line runs
    that very interpreter (not another Python's tools that share /usr/bin)."""
    own = os.path.realpath(interp.path)
    names = []
    try:
        entries = sorted(os.scandir(interp.bin_dir), key=lambda e: e.name)
    except OSError:
        return []
    for entry in entries:
        if entry.name.startswith(("python", "pip", "activate")) or not entry.is_file(follow_symlinks=False):
            continue
        try:
            with open(entry.path, "rb") as f:
                first = f.readline(512)
        except OSError:
            continue
        words = first[2:].split() if first.startswith(b"#!") else []
        if words and os.path.realpath(os.fsdecode(words[0])) == own:
            names.append(entry.name)
    return names


def _write_shims(interp: Interpreter, env_dir: Path) -> None:
    """A shim in the env's bin/ for each console script of the interpreter: the script run by the
    env's python, so it sees what the job installed (the env's own scripts are left as they are)."""
    python = env_dir / "bin" / "python"
    for name in console_scripts(interp):
        shim = env_dir / "bin" / name
        if shim.exists() or shim.is_symlink():
            continue
        script = os.path.join(interp.bin_dir, name)
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(str(python))} {shlex.quote(script)} "$@"\n')
        shim.chmod(0o755)


def _site_packages(env_dir: Path) -> Path:
    found = sorted((env_dir / "lib").glob("python3*/site-packages"))
    if not found:
        raise ExecutorError(f"the python environment {env_dir.name} has no site-packages")
    return found[0]


async def _run(what: str, argv: list[str], cwd: Path, extra_env: dict[str, str], sink: OutputSink | None) -> int:
    """Run a helper command, its output to the job's log; killed with its group if the start is cancelled."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=_child_env(extra_env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        limit=_MAX_LINE,
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(_INSTALL_TIMEOUT_S):
            async for line in proc.stdout:
                if sink is not None:
                    sink("out", line if line.endswith(b"\n") else line + b"\n")
            return await proc.wait()
    except (asyncio.CancelledError, TimeoutError, ValueError) as exc:  # ValueError: a line past _MAX_LINE
        await kill_and_reap(proc)
        if isinstance(exc, asyncio.CancelledError):
            raise
        why = f"ran over {_INSTALL_TIMEOUT_S / 3600:g} h" if isinstance(exc, TimeoutError) else "wrote a line too long"
        raise ExecutorError(f"{what} {why}; killed") from None


def _child_env(extra_env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH", "PIP_USER")}
    env.update(extra_env)
    return env


def _say(sink: OutputSink, text: str) -> None:
    sink("sys", f"lanpool: {text}\n".encode())
