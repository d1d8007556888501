"""Run a job as plain processes: bash in the job's workspace, in its own process group."""

import asyncio
import contextlib
import os
import signal

from lanpool.agent.executors.base import Adoption, ExecutorError, Handle, Launch, Outcome, OutputSink
from lanpool.agent.executors.pipe_pump import open_pipe, pump
from lanpool.agent.python.interpreters import Pythons
from lanpool.agent.python.job_envs import JobPythons

# After the main process exits, children that kept the pipes open get this
# long before they are killed (unless a stop is under way: then the stop's own
# grace period and SIGKILL decide).
_DRAIN_TIMEOUT_S = 5.0


class ProcessExecutor:
    name = "process"
    in_container = False
    outlives_agent = False  # its pipes die with the agent
    # Building the job's Python environment may install requirements for minutes:
    # a stop gives that up (a cancelled spawn kills the just-started bash).
    cancellable_start = True

    def __init__(self, pythons: JobPythons | None = None) -> None:
        """`pythons` None: the agent's own interpreter as the base, requirements uncached."""
        self.pythons = pythons or JobPythons(Pythons.discover(), None)

    async def start(self, launch: Launch, sink: OutputSink) -> "ProcessExecution":
        env = dict(os.environ)
        env.pop("PYTHONHOME", None)
        # The job's own env (jobs/<id>/pyenv) on a base that has torch and lightning: `python`
        # and `pip` in the commands are its, so a `pip install` never writes the agent's.
        env.update(
            await self.pythons.prepare(
                launch.workspace.parent / "pyenv",
                launch.workspace,
                launch.working_dir,
                launch.python,
                launch.requirements,
                sink,
            )
        )
        env.update(launch.env)
        # set -e: a failing command ends the job with its exit code, as in dstack.
        script = "set -e\n" + "\n".join(launch.commands) + "\n"
        (out_r, out_w), (err_r, err_w) = open_pipe(), open_pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                "bash",
                "-c",
                script,
                cwd=launch.working_dir,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                start_new_session=True,  # own process group: signals reach the whole tree
            )
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:  # the child has its copies: the job's end closes the pipes (EOF to the pumps)
            os.close(out_w)
            os.close(err_w)
        return ProcessExecution(proc, sink, out_r, err_r)

    async def adopt(self, job: Adoption, sink: OutputSink) -> "ProcessExecution":
        """Never: the job's pipes died with the agent. Its process group is killed rather than left running unseen."""
        if job.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(job.pid, signal.SIGKILL)
        raise ExecutorError("the agent restarted while the job ran; the job was ended")

    async def remove_leftovers(self, active: set[str]) -> list[str]:
        return []  # a process leaves nothing behind but its workspace, which is the job's


class ProcessExecution:
    def __init__(self, proc: asyncio.subprocess.Process, sink: OutputSink, out_fd: int, err_fd: int) -> None:
        """`out_fd`, `err_fd`: the read ends of the job's stdout and stderr (pipe_pump.open_pipe), closed by their pumps."""
        self._proc = proc
        self.pid = proc.pid
        self._pumps = [
            asyncio.create_task(pump(out_fd, "out", sink)),
            asyncio.create_task(pump(err_fd, "err", sink)),
        ]
        self._stopping = False

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
        _done, pending = await asyncio.wait(self._pumps, timeout=None if self._stopping else _DRAIN_TIMEOUT_S)
        if pending:
            self._killpg(signal.SIGKILL)
            _done, pending = await asyncio.wait(pending, timeout=1.0)
            for task in pending:
                task.cancel()
        self._killpg(signal.SIGKILL)  # stragglers that closed their pipes
        return Outcome(128 - code if code < 0 else code)

    def send_signal(self, sig: int) -> None:
        if sig == signal.SIGTERM:
            self._stopping = True
        self._killpg(sig)

    async def detach(self) -> None:
        pass  # nothing to let go of: a process job is stopped before the agent exits

    async def remove(self) -> None:
        pass  # the process group is gone once wait() returned

    def _killpg(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
