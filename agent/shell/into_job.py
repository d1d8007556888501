"""Into a running job: one command, or a shell on a PTY, inside it, for an authorized controller.

The SSH session channel's exec request is the only door, and it takes one fixed
grammar, validated like any peer input: `lanpool-exec JOB_ID [-- ARGV...]` (no
ARGV: an interactive shell). The job must be running on this runner. A process
job's command runs in its working directory with its environment (read back
from the job's own process), in a process group of its own that is hung up when
the job ends; a container job's runs through `docker exec` (agent/shell/container.py).
"""

import asyncio
import contextlib
import fcntl
import logging
import os
import pty
import shlex
import signal
import struct
import subprocess
import termios
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import asyncssh

from lanpool.agent.jobs.job import Job
from lanpool.agent.jobs.manager import JobManager
from lanpool.agent.jobs.request import JobError, check_job_id
from lanpool.protocol.shell_direct import DIRECT_FLAG
from lanpool.protocol.shell_sshd import SSHD_FLAG, SSHD_UNUSED, key_blob_b64

if TYPE_CHECKING:
    from lanpool.agent.direct import DirectSender

log = logging.getLogger(__name__)

EXEC_VERB = "lanpool-exec"
_MAX_COMMAND = 64 * 1024  # characters of an exec request
_READ_SIZE = 64 * 1024
_WRITE_HIGH = 1024 * 1024  # bytes queued on the channel before a PTY's output is paused
_DRAIN_S = 1.0  # after the command exits, how long children holding its PTY may still write
NOT_RUNNING_EXIT = 255  # as ssh reports a session that could not run


@dataclass(frozen=True)
class ShellRequest:
    job_id: str
    argv: tuple[str, ...]  # empty: an interactive shell
    direct: bool = False  # the terminal's bytes on a TLS connection of their own (agent/shell/direct.py)
    sshd_key: str = ""  # a one-time sshd for this key's holder (agent/shell/sshd.py): base64 of an ed25519 key

    def describe(self) -> str:
        return shlex.join(self.argv)[:200] if self.argv else "(shell)"


def parse_exec(command: str) -> ShellRequest | None:
    """The request an exec command names, or None when it is not the one grammar allowed."""
    if len(command) > _MAX_COMMAND or "\0" in command:
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if len(words) < 2 or words[0] != EXEC_VERB:
        return None
    try:
        check_job_id(words[1])
    except JobError:
        return None
    rest = words[2:]
    direct = bool(rest) and rest[0] == DIRECT_FLAG
    if direct:
        rest = rest[1:]
    sshd_key = ""
    if not direct and rest and rest[0] == SSHD_FLAG:
        key = key_blob_b64(rest[1]) if len(rest) > 1 else None
        if key is None:
            return None
        sshd_key, rest = key, rest[2:]
    if rest and (rest[0] != "--" or len(rest) == 1):
        return None
    return ShellRequest(words[1], tuple(rest[1:]), direct, sshd_key)


def exec_command(job_id: str, argv: list[str]) -> str:
    """The exec request for `argv` in job `job_id` (the controller's side of parse_exec)."""
    return shlex.join([EXEC_VERB, job_id, *(["--", *argv] if argv else [])])


def running_job(manager: JobManager, job_id: str) -> Job | None:
    job = manager.jobs.get(job_id)
    if job is None or job.record.terminal or job.execution is None:
        return None
    return job


async def serve_exec(
    process: asyncssh.SSHServerProcess[bytes],
    manager: JobManager,
    request: ShellRequest,
    direct: "DirectSender | None" = None,
) -> None:
    """Run the request in its job, relaying the channel (or, asked `--direct` with a PTY and
    `direct` given, a TLS connection of its own: agent/shell/direct.py); the channel's exit
    status is the command's."""
    job = running_job(manager, request.job_id)
    if job is None:
        known = manager.jobs.get(request.job_id)
        why = f"ended ({known.record.state})" if known and known.record.terminal else "is not running"
        if known is None:
            why = "does not exist"
        process.stderr.write(f"lanpool: job {request.job_id} {why} on this runner\n".encode())
        process.exit(NOT_RUNNING_EXIT)
        return
    if request.sshd_key:
        await _serve_sshd(process, job, request, direct)
        return
    try:
        code = None
        if request.direct and direct is not None and process.term_type:
            from lanpool.agent.shell.direct import serve_direct

            code = await serve_direct(process, job, request.argv, direct)
        if code is None and job.record.container_id:
            from lanpool.agent.shell.container import exec_in_container

            code = await exec_in_container(process, job, request.argv)
        elif code is None:
            code = await _exec_in_process_job(process, job, request.argv)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:  # not the whole connection
        log.warning("exec into job %s failed: %s", request.job_id, exc)
        process.stderr.write(f"lanpool: cannot run in job {request.job_id}: {exc}\n".encode())
        code = NOT_RUNNING_EXIT
    log.info("exec session in job %s ended (exit %s)", request.job_id, code)
    with contextlib.suppress(OSError, asyncssh.Error):
        process.exit(code)


async def _serve_sshd(
    process: asyncssh.SSHServerProcess[bytes], job: Job, request: ShellRequest, direct: "DirectSender | None"
) -> None:
    """A one-time sshd for the shell (agent/shell/sshd.py); the channel's exit status says
    whether a session ran in it (protocol/shell_sshd.py)."""
    from lanpool.agent.shell.sshd import serve_sshd

    listen = direct.listen_plain if direct is not None else None
    try:
        outcome = await serve_sshd(process, job, request.argv, request.sshd_key, listen)
    except (OSError, RuntimeError, ValueError, asyncssh.Error) as exc:
        log.warning("sshd shell in job %s failed: %s", request.job_id, exc)
        outcome = SSHD_UNUSED
    with contextlib.suppress(OSError, asyncssh.Error):
        process.exit(outcome)


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


async def _exec_in_process_job(process: asyncssh.SSHServerProcess[bytes], job: Job, argv: tuple[str, ...]) -> int:
    env, cwd = job_environment(job)
    term = process.term_type
    if term:
        env["TERM"] = term
    if term:
        command = list(argv) or ["bash", "-i"]
        return await _run_on_pty(process, job, command, env, cwd)
    proc = await asyncio.create_subprocess_exec(
        *(argv or ["bash"]),
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
    return await _supervise(job, proc, feeder, pumps)


async def _supervise(
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


def _set_size(fd: int, width: int, height: int) -> None:
    if width > 0 and height > 0:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", min(height, 9999), min(width, 9999), 0, 0))


def _take_terminal(slave: int) -> Callable[[], None]:
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
    _set_size(master, width, height)
    try:
        proc = await asyncio.create_subprocess_exec(
            *command, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave, preexec_fn=_take_terminal(slave)
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
                _set_size(master, exc.width, exc.height)
                continue
            except (asyncssh.BreakReceived, asyncssh.SignalReceived):
                continue
            if not data:  # a terminal has no EOF of its own (^D is a byte): the channel closed
                await process.channel.wait_closed()
                return
            typed.write(data)

    loop.add_reader(master, readable)
    try:
        return await _supervise(job, proc, asyncio.create_task(feed()), [asyncio.create_task(pump_out())])
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
            _set_size(self._master, exc.width, exc.height)

    def write_eof(self) -> None:
        pass  # a terminal has no EOF of its own

    def close(self) -> None:
        if self._waiting:
            self._waiting = False
            self._loop.remove_writer(self._master)
