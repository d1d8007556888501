"""Run a job as plain processes: bash in the job's workspace, in its own process group."""

import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path

from lanpool.agent.executors.base import Adoption, ExecutorError, Handle, Launch, Outcome, OutputSink
from lanpool.agent.executors.pipe_pump import open_pipe, pump
from lanpool.agent.executors.sandbox import Sandbox, SandboxError
from lanpool.agent.python.interpreters import Pythons
from lanpool.agent.python.job_envs import JobPythons

# After the main process exits, children that kept the pipes open get this
# long before they are killed (a stop under way: this long after its SIGKILL,
# the stop's own grace period deciding until then).
_DRAIN_TIMEOUT_S = 5.0

# What a process job takes from the agent's own environment (docs/runners.md, "A process
# job's environment"): where programs and libraries are, the locale, and the runner's own
# settings for pip, CUDA and NCCL. Not the rest: the agent's may hold its operator's tokens.
_KEPT = ("PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "HOME", "USER", "LOGNAME", "TERM")
_KEPT_PREFIXES = ("LC_", "PIP_", "CUDA_", "NCCL_", "GLOO_", "NVIDIA_", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


def base_environment(agent_env: dict[str, str] | None = None) -> dict[str, str]:
    """The variables a process job starts from (before its Python env, lanpool's and its own)."""
    source = os.environ if agent_env is None else agent_env
    env = {k: v for k, v in source.items() if k in _KEPT or k.upper().startswith(_KEPT_PREFIXES)}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    return env


class ProcessExecutor:
    name = "process"
    in_container = False
    outlives_agent = False  # its pipes die with the agent
    # Building the job's Python environment may install requirements for minutes:
    # a stop gives that up (a cancelled spawn kills the just-started bash).
    cancellable_start = True

    def __init__(
        self, pythons: JobPythons | None = None, sandbox: Sandbox | None = None, isolation: str = "none"
    ) -> None:
        """`pythons` None: the agent's own interpreter as the base, requirements uncached.
        `sandbox` None: jobs run unsandboxed, as the agent's user (agent.executors.sandbox);
        `isolation` says so for `runners` ("bwrap as nobody", "none (why)")."""
        self.pythons = pythons or JobPythons(Pythons.discover(), None)
        self.sandbox = sandbox
        self.isolation = isolation

    async def start(self, launch: Launch, sink: OutputSink) -> "ProcessExecution":
        env = base_environment()
        pyenv = launch.workspace.parent / "pyenv"
        # The job's own env (jobs/<id>/pyenv) on a base that has torch and lightning: `python`
        # and `pip` in the commands are its, so a `pip install` never writes the agent's.
        env.update(
            await self.pythons.prepare(
                pyenv,
                launch.workspace,
                launch.working_dir,
                launch.python,
                launch.requirements,
                sink,
                launch.hold_base,
            )
        )
        env.update(launch.env)
        # set -e: a failing command ends the job with its exit code, as in dstack.
        argv = ["bash", "-c", "set -e\n" + "\n".join(launch.commands) + "\n"]
        status_r = status_w = -1
        if self.sandbox is not None:
            status_r, status_w = os.pipe()
            try:
                argv = await self._sandboxed(argv, launch, pyenv, env, status_w)
            except BaseException:
                os.close(status_r)
                os.close(status_w)
                raise
        (out_r, out_w), (err_r, err_w) = open_pipe(), open_pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=launch.working_dir,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                start_new_session=True,  # own process group: signals reach the whole tree
                pass_fds=(status_w,) if status_w >= 0 else (),
            )
        except BaseException:
            for fd in (out_r, err_r, status_r):
                if fd >= 0:
                    os.close(fd)
            raise
        finally:  # the child has its copies: the job's end closes the pipes (EOF to the pumps)
            os.close(out_w)
            os.close(err_w)
            if status_w >= 0:
                os.close(status_w)
        pid = proc.pid
        if status_r >= 0:
            # The sandbox's PID 1 leads the job's process group (bwrap --new-session): signals go there.
            pid = await asyncio.to_thread(_sandbox_pid, status_r) or proc.pid
        return ProcessExecution(proc, sink, out_r, err_r, pid, status_r)

    async def _sandboxed(
        self, argv: list[str], launch: Launch, pyenv: Path, env: dict[str, str], status_fd: int
    ) -> list[str]:
        """`argv` inside the job's sandbox; the job's own home and /tmp beside its workspace."""
        assert self.sandbox is not None
        job_dir = launch.workspace.parent
        home, tmp = job_dir / "home", job_dir / "tmp"
        try:
            home.mkdir(exist_ok=True)
            tmp.mkdir(exist_ok=True)
            await asyncio.to_thread(self.sandbox.give, [launch.workspace, pyenv, home, tmp])
        except OSError as exc:
            raise ExecutorError(f"could not prepare the job's sandbox: {exc}") from None
        env.update(HOME=str(home.resolve()), TMPDIR="/tmp")
        if self.sandbox.user is not None:
            env.update(USER=self.sandbox.user.name, LOGNAME=self.sandbox.user.name)
        binds = [launch.workspace.resolve(), pyenv.resolve(), home.resolve()]
        return self.sandbox.command(argv, binds, tmp.resolve(), launch.working_dir.resolve(), status_fd=status_fd)

    def enter(self, pid: int, argv: list[str], cwd: Path) -> list[str]:
        """argv that runs `argv` where the job whose main process is `pid` runs (the exec door):
        inside its sandbox, as its user; `argv` itself without one. ExecutorError once it is gone."""
        if self.sandbox is None:
            return argv
        try:
            return self.sandbox.enter(pid, argv, cwd)
        except SandboxError as exc:
            raise ExecutorError(str(exc)) from None

    async def adopt(self, job: Adoption, sink: OutputSink) -> "ProcessExecution":
        """Never: the job's pipes died with the agent. Its process group is killed rather than left running unseen."""
        if job.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(job.pid, signal.SIGKILL)
        raise ExecutorError("the agent restarted while the job ran; the job was ended")

    async def remove_leftovers(self, active: set[str]) -> list[str]:
        return []  # a process leaves nothing behind but its workspace, which is the job's


def _sandbox_pid(fd: int) -> int:
    """The sandbox's PID 1 from bwrap's first status line (0 if bwrap ended before one: its error is
    in the job's log). The pipe stays open: bwrap writes the exit code to it later."""
    data = b""
    while b"\n" not in data:
        chunk = os.read(fd, 4096)
        if not chunk:
            return 0
        data += chunk
    try:
        return int(json.loads(data.split(b"\n", 1)[0]).get("child-pid", 0))
    except (ValueError, TypeError, AttributeError):
        return 0


class ProcessExecution:
    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        sink: OutputSink,
        out_fd: int,
        err_fd: int,
        pid: int = 0,
        status_fd: int = -1,
    ) -> None:
        """`out_fd`, `err_fd`: the read ends of the job's stdout and stderr (pipe_pump.open_pipe), closed by their pumps.
        `pid`: the leader of the job's process group (default: `proc`'s; a sandbox's PID 1);
        `status_fd`: bwrap's status pipe, closed once the job has ended."""
        self._proc = proc
        self.pid = pid or proc.pid
        self._status_fd = status_fd
        self._pumps = [
            asyncio.create_task(pump(out_fd, "out", sink)),
            asyncio.create_task(pump(err_fd, "err", sink)),
        ]
        self._stopping = False
        self._killed = asyncio.Event()

    def describe(self) -> Handle:
        return Handle(pid=self.pid)

    async def wait(self) -> Outcome:
        """The job ends when bash has exited and its children are gone.

        On SIGTERM bash itself dies at once while e.g. python may still be
        saving a checkpoint: that child keeps the job running until it exits
        or the stop's SIGKILL comes. Whatever is left at the end is killed, as
        a container's processes die with it.
        """
        code = await self._proc.wait()
        if self._stopping:
            await self._until_killed_or_drained()
        _done, pending = await asyncio.wait(self._pumps, timeout=_DRAIN_TIMEOUT_S)
        if pending:
            self._killpg(signal.SIGKILL)
            _done, pending = await asyncio.wait(pending, timeout=1.0)
            for task in pending:
                task.cancel()
        self._killpg(signal.SIGKILL)  # stragglers that closed their pipes
        if self._status_fd >= 0:
            os.close(self._status_fd)
            self._status_fd = -1
        return Outcome(128 - code if code < 0 else code)

    async def _until_killed_or_drained(self) -> None:
        """A stopped job's output stays open while what is left of it (python saving a checkpoint)
        runs, until its SIGKILL: from then on, only _DRAIN_TIMEOUT_S more. A process that left the
        job's group (setsid) outlives the SIGKILL with the pipes open: without this bound the job
        would stay RUNNING for as long as that process lives."""
        drained = asyncio.ensure_future(asyncio.wait(self._pumps))
        killed = asyncio.ensure_future(self._killed.wait())
        try:
            await asyncio.wait([drained, killed], return_when=asyncio.FIRST_COMPLETED)
        finally:
            drained.cancel()  # the wait only: the pumps go on
            killed.cancel()

    def send_signal(self, sig: int) -> None:
        if sig == signal.SIGTERM:
            self._stopping = True
        if sig == signal.SIGKILL:
            self._killed.set()
        self._killpg(sig)
        if sig == signal.SIGKILL and self.pid != self._proc.pid:
            # bwrap outside the sandbox's group ends once its PID 1 is gone, unless it was stopped
            # itself (SIGSTOP): then nothing else would end the job's wait.
            # os.kill, not Process.kill(): Popen's poll() inside it may reap bwrap (just ended by the
            # killpg) before asyncio's child watcher does, which then reports exit 255 instead of
            # 137 (CPython #86276; seen in CI under load). A zombie takes the signal harmlessly.
            if self._proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._proc.pid, signal.SIGKILL)

    async def detach(self) -> None:
        pass  # nothing to let go of: a process job is stopped before the agent exits

    async def remove(self) -> None:
        pass  # the process group is gone once wait() returned

    def _killpg(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
