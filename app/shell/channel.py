"""A job's command or shell on the SSH channel itself: the exec request in the agent's one
grammar (`lanpool-exec JOB_ID [--node K] [-- ARGV]`, protocol/wire.py exec_command), our terminal on the
channel, and the exit status as ssh reports it. A shell through the runner's one-time sshd
(app/shell/sshd.py) falls back to it.
"""

import asyncio
import contextlib
import os
import select
import signal
import termios
import tty

import asyncssh

from lanpool.app.errors import RunnerError
from lanpool.app.runners.client import RunnerSession
from lanpool.protocol.wire import exec_command

READ_SIZE = 64 * 1024


async def open_terminal(
    session: RunnerSession, job_id: str, argv: list[str], fd: int, node: int | None = None
) -> tuple[asyncssh.SSHClientChannel[bytes], "TerminalSession"]:
    loop = asyncio.get_running_loop()
    term = TerminalSession(loop)
    cols, rows = os.get_terminal_size(fd)
    try:
        chan, _ = await session.conn.create_session(
            lambda: term,
            exec_command(job_id, argv, node),
            encoding=None,
            term_type=os.environ.get("TERM", "xterm-256color"),
            term_size=(cols, rows),
        )
    except (OSError, asyncssh.Error) as exc:
        raise RunnerError(f"{session.where} refused a shell in job {job_id}: {reason(exc)}") from None
    return chan, term


async def attach(chan: asyncssh.SSHClientChannel[bytes], term: "TerminalSession", fd: int) -> int:
    """Our terminal on the channel until it closes; the exit status."""
    loop = asyncio.get_running_loop()
    saved = termios.tcgetattr(fd)

    # Each keystroke goes from the terminal to the channel in one callback (no stream, no task).
    def typed() -> None:
        data = os.read(fd, READ_SIZE)
        if data:
            chan.write(data)
        else:
            loop.remove_reader(fd)
            chan.write_eof()

    def resized() -> None:
        with contextlib.suppress(OSError):
            chan.change_terminal_size(*os.get_terminal_size(fd))

    tty.setraw(fd)
    loop.add_reader(fd, typed)
    loop.add_signal_handler(signal.SIGWINCH, resized)
    try:
        await term.closed
    finally:
        loop.remove_reader(fd)
        loop.remove_signal_handler(signal.SIGWINCH)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    return channel_status(chan)


def channel_status(chan: asyncssh.SSHClientChannel[bytes]) -> int:
    status = chan.get_exit_status()
    return status if status is not None and status >= 0 else 255  # a signal or no status: as ssh reports it


class TerminalSession(asyncssh.SSHClientSession[bytes]):
    """The job's output written straight to our terminal as each packet arrives: an echo costs
    one callback, not a stream reader's wake-up of a copying task (scripts/bench-shell)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.closed: asyncio.Future[None] = loop.create_future()

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        write_all(2 if datatype == asyncssh.EXTENDED_DATA_STDERR else 1, data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to a terminal. Blocking on purpose: a slow terminal holds the job's output back
    (the channel's window fills, so the runner stops sending) rather than piling it up here."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:  # a terminal someone set non-blocking
            select.select([], [fd], [])


def exit_code_of(proc: asyncssh.SSHClientProcess[bytes]) -> int:
    if proc.exit_status is not None and proc.exit_status >= 0:
        return proc.exit_status
    return 255  # ended by a signal or without a status: as ssh reports it


def reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or exc)
