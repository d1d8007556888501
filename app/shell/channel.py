"""A job's command or shell on the SSH channel itself: the exec request in the agent's one
grammar (`lanpool-exec JOB_ID [--direct] [-- ARGV]`, protocol/wire.py EXEC_VERB), our terminal
on the channel, and the exit status as ssh reports it. The direct and sshd shells
(app/shell/direct.py, app/shell/sshd.py) start here too and fall back to it.
"""

import asyncio
import contextlib
import os
import select
import shlex
import signal
import termios
import tty

import asyncssh

from lanpool.app.errors import RunnerError
from lanpool.app.runners.client import RunnerSession
from lanpool.protocol import DirectOffer
from lanpool.protocol.shell_direct import DIRECT_FLAG, MAX_OFFER_LINE, NO_OFFER_LINE, OFFER_PREFIX, parse_offer_line
from lanpool.protocol.wire import EXEC_VERB

READ_SIZE = 64 * 1024


def exec_command(job_id: str, argv: list[str], direct: bool = False) -> str:
    return shlex.join([EXEC_VERB, job_id, *([DIRECT_FLAG] if direct else []), *(["--", *argv] if argv else [])])


async def open_terminal(
    session: RunnerSession, job_id: str, argv: list[str], fd: int, direct: bool
) -> tuple[asyncssh.SSHClientChannel[bytes], "TerminalSession"]:
    loop = asyncio.get_running_loop()
    term = TerminalSession(loop, direct)
    cols, rows = os.get_terminal_size(fd)
    try:
        chan, _ = await session.conn.create_session(
            lambda: term,
            exec_command(job_id, argv, direct),
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
    one callback, not a stream reader's wake-up of a copying task (scripts/bench-shell). Asked
    for a direct shell, the first line may be the runner's offer (protocol/shell_direct.py)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, expect_offer: bool = False) -> None:
        self.closed: asyncio.Future[None] = loop.create_future()
        self.offer: asyncio.Future[DirectOffer | None] = loop.create_future()
        self._head: bytes | None = b"" if expect_offer else None
        if not expect_offer:
            self.offer.set_result(None)

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype == asyncssh.EXTENDED_DATA_STDERR:
            write_all(2, data)
            return
        if self._head is not None:
            data = self._take_head(data)
        if data:
            write_all(1, data)

    def _take_head(self, data: bytes) -> bytes:
        """Whatever of `data` is not the offer line; settles `offer` once the line is known."""
        assert self._head is not None
        head = self._head + data
        line, newline, rest = head.partition(b"\n")
        prefix = OFFER_PREFIX[: len(line)]
        if not line.startswith(prefix) or len(line) > MAX_OFFER_LINE:
            offer = None  # not an offer: the shell runs on the channel, this is its output
        elif not newline:
            self._head = head
            return b""
        else:
            offer = parse_offer_line(line + newline, "")
            # The runner could not listen: the shell runs on the channel, after this line.
            head = rest if offer is not None or line + newline == NO_OFFER_LINE else head
        self._head = None
        self.offer.set_result(offer)
        return head

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head:
            write_all(1, self._head)
            self._head = None
        if not self.offer.done():
            self.offer.set_result(None)
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
