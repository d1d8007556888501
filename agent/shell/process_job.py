"""A command or shell inside a process job, for the exec door (agent/shell/into_job.py).

It runs in the job's working directory with the job's environment (read back from the job's
own process), in a process group of its own that is hung up when the job ends or the
channel closes: on pipes, or on a PTY whose output goes to the channel as it comes (a slow
client pauses it) and whose input comes from asyncssh's data callback.
"""

import asyncio
import contextlib
import fcntl
import os
import pty
import signal
import struct
import termios
from collections.abc import Callable
from pathlib import Path

import asyncssh

from lanpool.agent.executors.process import ProcessExecutor
from lanpool.agent.jobs.job import Job

_READ_SIZE = 64 * 1024
_WRITE_HIGH = 1024 * 1024  # bytes queued on the channel before a PTY's output is paused
_DRAIN_S = 1.0  # after the command exits, how long children holding its PTY may still write


def job_environment(job: Job) -> tuple[dict[str, str], Path]:
    """A process job's environment and working directory, as its own process has them."""
    pid = job.record.pid
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
        env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        return env, Path(os.readlink(f"/proc/{pid}/cwd"))
    except (OSError, ValueError):  # no /proc (not Linux) or the bash already gone: what the record says
        env = {**os.environ, **job.record.env}
        return env, job.dir / "workspace" / job.record.working_dir


def inside(job: Job, command: list[str], cwd: Path) -> list[str]:
    """`command` as it runs where the job runs: in its sandbox, as its user (agent.executors.sandbox),
    or as it is for an unsandboxed job. ExecutorError once the job's sandbox is gone."""
    executor = job.executor
    if isinstance(executor, ProcessExecutor) and job.record.pid:
        return executor.enter(job.record.pid, command, cwd)
    return command


async def exec_in_process_job(process: asyncssh.SSHServerProcess[bytes], job: Job, argv: tuple[str, ...]) -> int:
    env, cwd = job_environment(job)
    shell = ["bash", "-i"] if process.term_type else ["bash"]
    return await run_in_job(process, job, inside(job, list(argv) or shell, cwd), env, cwd)


async def run_in_job(
    process: asyncssh.SSHServerProcess[bytes], job: Job, command: list[str], env: dict[str, str], cwd: Path
) -> int:
    """Run `command` for the channel until it exits, the channel closes or the job ends: on a
    PTY when the client asked for a terminal, else on pipes. Its exit code."""
    if process.term_type:
        return await _run_on_pty(process, job, command, {**env, "TERM": process.term_type}, cwd)
    proc = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdin and proc.stdout and proc.stderr
    feeder = asyncio.create_task(_feed_pipe(process, proc.stdin))
    pumps = [
        asyncio.create_task(_copy_out(proc.stdout, process.stdout)),
        asyncio.create_task(_copy_out(proc.stderr, process.stderr)),
    ]
    return await supervise(job, proc, feeder, pumps)


async def supervise(
    job: Job, proc: asyncio.subprocess.Process, feeder: asyncio.Task[None], pumps: list[asyncio.Task[None]]
) -> int:
    """Wait for the command; the job's end or a closed channel hangs it up (its own process group)."""
    ended = asyncio.ensure_future(job.wait_terminal())
    waiting = asyncio.ensure_future(proc.wait())
    try:
        await asyncio.wait([waiting, ended, feeder], return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done() and (ended.done() or feeder.done()):
            _signal_group(proc.pid, signal.SIGHUP)
        try:
            code = await asyncio.wait_for(asyncio.shield(waiting), 5.0)
        except TimeoutError:
            _signal_group(proc.pid, signal.SIGKILL)
            code = await waiting
        await asyncio.wait(pumps, timeout=_DRAIN_S)
        return 128 - code if code < 0 else code
    finally:
        for task in (ended, feeder, *pumps):
            task.cancel()
        _signal_group(proc.pid, signal.SIGHUP)  # what it left in the background goes with the session


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _feed_pipe(process: asyncssh.SSHServerProcess[bytes], stdin: asyncio.StreamWriter) -> None:
    """The channel's input into the command; EOF closes its stdin. Returns when the channel's input ends."""
    while True:
        try:
            data = await process.stdin.read(_READ_SIZE)
        except (asyncssh.TerminalSizeChanged, asyncssh.BreakReceived, asyncssh.SignalReceived):
            continue
        if not data:
            with contextlib.suppress(OSError):
                stdin.close()
            await process.channel.wait_closed()  # the command runs on: only a closed channel ends this
            return
        stdin.write(data)
        with contextlib.suppress(OSError):
            await stdin.drain()


async def _copy_out(reader: asyncio.StreamReader, out: asyncssh.SSHWriter[bytes]) -> None:
    while data := await reader.read(_READ_SIZE):
        out.write(data)
        await out.drain()


def set_size(fd: int, width: int, height: int) -> None:
    if width > 0 and height > 0:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", min(height, 9999), min(width, 9999), 0, 0))


def take_terminal(slave: int) -> Callable[[], None]:
    """In the child: a session of its own, with the PTY as its controlling terminal (so Ctrl-C works).
    Through the slave's own descriptor, not fd 0: uvloop runs preexec_fn before it moves the
    child's stdio into place (fd 0 is still the agent's /dev/null there: ENOTTY)."""

    def take() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    return take


async def _run_on_pty(
    process: asyncssh.SSHServerProcess[bytes], job: Job, command: list[str], env: dict[str, str], cwd: Path
) -> int:
    master, slave = pty.openpty()
    width, height, _pw, _ph = process.term_size
    set_size(master, width, height)
    try:
        proc = await asyncio.create_subprocess_exec(
            *command, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave, preexec_fn=take_terminal(slave)
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    os.set_blocking(master, False)
    loop = asyncio.get_running_loop()
    closed = asyncio.Event()
    resuming: set[asyncio.Task[None]] = set()

    def readable() -> None:
        # Output goes to the channel from here, with no task hop: each keystroke's echo is one turn sooner.
        try:
            data = os.read(master, _READ_SIZE)
        except BlockingIOError:
            return
        except OSError:  # EIO: every holder of the PTY closed it
            data = b""
        if not data:
            loop.remove_reader(master)
            closed.set()
            return
        process.stdout.write(data)
        if process.channel.get_write_buffer_size() > _WRITE_HIGH:  # a slow client: stop reading until it drains
            loop.remove_reader(master)
            task = asyncio.ensure_future(resume())
            resuming.add(task)
            task.add_done_callback(resuming.discard)

    async def resume() -> None:
        with contextlib.suppress(OSError, asyncssh.Error):
            await process.stdout.drain()
        if not closed.is_set():
            loop.add_reader(master, readable)

    async def pump_out() -> None:
        await closed.wait()

    typed = _PtyInput(process, master)
    # Typed bytes and resizes go into the PTY from asyncssh's data callback (no task hop per
    # keystroke); what still comes through the reader arrived before this, or is the end.
    process.set_writer(typed, False, None)

    async def feed() -> None:
        while True:
            try:
                data = await process.stdin.read(_READ_SIZE)
            except asyncssh.TerminalSizeChanged as exc:
                set_size(master, exc.width, exc.height)
                continue
            except (asyncssh.BreakReceived, asyncssh.SignalReceived):
                continue
            if not data:  # a terminal has no EOF of its own (^D is a byte): the channel closed
                await process.channel.wait_closed()
                return
            typed.write(data)

    loop.add_reader(master, readable)
    try:
        return await supervise(job, proc, asyncio.create_task(feed()), [asyncio.create_task(pump_out())])
    finally:
        process.set_writer(None, False, None)  # closes `typed`: it stops watching the master
        loop.remove_reader(master)
        os.close(master)


class _PtyInput:
    """The channel's bytes into a PTY master as they arrive (asyncssh's writer protocol). What
    the PTY cannot take yet waits here with the channel paused, so the SSH window holds the
    client back, until the master is writable again."""

    def __init__(self, process: asyncssh.SSHServerProcess[bytes], master: int) -> None:
        self._process = process
        self._master = master
        self._loop = asyncio.get_running_loop()
        self._pending = b""
        self._waiting = False  # paused, and watching the master for room

    def write(self, data: bytes) -> None:
        self._pending += data
        if not self._waiting:
            self._flush()

    def _flush(self) -> None:
        try:
            while self._pending:
                self._pending = self._pending[os.write(self._master, self._pending) :]
        except BlockingIOError:
            pass
        except OSError:  # EIO: nothing holds the terminal any more; input goes nowhere, as on a hung-up tty
            self._pending = b""
        if self._pending and not self._waiting:
            self._waiting = True
            self._process.channel.pause_reading()
            self._loop.add_writer(self._master, self._writable)
        elif not self._pending and self._waiting:
            self.close()
            self._process.channel.resume_reading()

    def _writable(self) -> None:
        self._flush()

    def write_exception(self, exc: Exception) -> None:
        # A server process hands the writer its channel's resizes (breaks and signals: ignored).
        if isinstance(exc, asyncssh.TerminalSizeChanged):
            set_size(self._master, exc.width, exc.height)

    def write_eof(self) -> None:
        pass  # a terminal has no EOF of its own

    def close(self) -> None:
        if self._waiting:
            self._waiting = False
            self._loop.remove_writer(self._master)
