"""A job's shell through the runner's one-time sshd, with the system's `ssh`: the controller's
side (protocol/shell_sshd.py says why; agent/shell/sshd.py what the runner does).

The controller makes an ed25519 key for this session only and asks for the sshd on the
exec channel of the SSH connection whose host key is pinned; the runner's answer on that
channel names the port, the user and the sshd's own host key. `ssh` is then run on our
terminal with no user configuration (-F /dev/null), that key only (no ssh-agent), that host
key pinned (StrictHostKeyChecking), no forwarding of any kind: OpenSSH end to end, resize
and Ctrl-C included. The key and the pinned host key live in a 0700 directory removed at
the end. When the runner offers no sshd, or no session ran in it, the caller goes on with
the shell on the SSH channel (app/shell/channel.py).
"""

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import asyncssh

from lanpool.app.errors import RunnerError
from lanpool.app.runners.client import RunnerSession
from lanpool.app.shell.channel import exit_code_of
from lanpool.protocol.shell_sshd import (
    MAX_OFFER_LINE,
    NO_OFFER_LINE,
    SHELL_SSHD,
    SSHD_ENV,
    SSHD_UNUSED,
    parse_offer_line,
)
from lanpool.protocol.wire import ENCRYPTION_ALGS, exec_command

log = logging.getLogger(__name__)

OFFER_TIMEOUT_S = 20.0
_CLOSE_S = 10.0  # after ssh ends, how long the runner may take to say whether a session ran
_HOST_ALIAS = "lanpool-job"


def sshd_wanted(features: Sequence[str]) -> bool:
    """Whether to ask this runner for a one-time sshd: it offers them, `ssh` is installed,
    and LANPOOL_SSHD_SHELLS is not 0."""
    off = os.environ.get(SSHD_ENV, "1").strip() == "0"
    return SHELL_SSHD in features and not off and shutil.which("ssh") is not None


def sshd_command(job_id: str, argv: Sequence[str], key_b64: str) -> str:
    return exec_command(job_id, argv, sshd_key=f"ssh-ed25519:{key_b64}")


async def sshd_shell(session: RunnerSession, job_id: str, argv: Sequence[str]) -> int | None:
    """The shell (or `argv`) on our terminal through the runner's one-time sshd; its exit code.
    None: no sshd was offered or no session ran in it (the caller goes on another way)."""
    home = Path(tempfile.mkdtemp(prefix="lanpool-ssh-"))
    try:
        key = asyncssh.generate_private_key("ssh-ed25519")
        _write(home / "key", key.export_private_key().decode())
        key_b64 = key.export_public_key().decode().split()[1]
        try:
            proc = await session.conn.create_process(sshd_command(job_id, argv, key_b64), encoding=None)
        except (OSError, asyncssh.Error) as exc:
            raise RunnerError(f"{session.where} refused a shell in job {job_id}: {exc}") from None
        try:
            line = await first_line(proc)
            offer = parse_offer_line(line) if line else None
            if offer is None:
                if line == NO_OFFER_LINE:
                    log.info("%s offers no sshd for job %s", session.where, job_id)
                    return None
                if await refused(proc):  # the runner said why (the job ended, ...), shown on our stderr
                    return exit_code_of(proc)
                raise RunnerError(f"{session.where} answered the shell request with {line[:80]!r}")
            port, user, host_key = offer
            _write(home / "known_hosts", f"{_HOST_ALIAS} ssh-ed25519 {host_key}\n")
            host = session.peer_host
            ssh = await asyncio.create_subprocess_exec(*ssh_argv(home, host, port, user))
            code = await ssh.wait()
            proc.stdin.write_eof()  # done: the runner stops its sshd (or its wait) and says whether a session ran
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait_closed(), _CLOSE_S)
            if proc.exit_status == SSHD_UNUSED:
                print(
                    f"lanpool: no session ran in {session.where}'s one-time sshd (ssh exit {code}); "
                    "opening the shell on lanpool's own connection",
                    file=sys.stderr,
                )
                return None
            return code if code >= 0 else 255
        finally:
            proc.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def ssh_argv(home: Path, host: str, port: int, user: str) -> list[str]:
    """OpenSSH's client for the one-time sshd: nothing of the user's configuration, only this
    session's key, the offered host key pinned, no forwarding, a terminal."""
    options = {
        "IdentitiesOnly": "yes",
        "IdentityAgent": "none",
        "PreferredAuthentications": "publickey",
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        "BatchMode": "yes",
        "UserKnownHostsFile": str(home / "known_hosts"),
        "GlobalKnownHostsFile": "/dev/null",
        "HostKeyAlias": _HOST_ALIAS,
        "StrictHostKeyChecking": "yes",
        "UpdateHostKeys": "no",
        "CheckHostIP": "no",
        # lanpool's own choice (AES-GCM first: with AES-NI a keystroke's record is cheaper than
        # with chacha20-poly1305, ssh's first choice otherwise); the client's order decides.
        "Ciphers": ",".join(ENCRYPTION_ALGS),
        "ForwardAgent": "no",
        "ForwardX11": "no",
        "ClearAllForwardings": "yes",
        "PermitLocalCommand": "no",
        "ControlMaster": "no",
        "ControlPath": "none",
        "ConnectTimeout": "10",
        "ServerAliveInterval": "15",
        "LogLevel": "ERROR",
    }
    flags = [word for name, value in options.items() for word in ("-o", f"{name}={value}")]
    return ["ssh", "-F", "/dev/null", "-t", "-p", str(port), "-l", user, "-i", str(home / "key"), *flags, host]


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


async def first_line(proc: asyncssh.SSHClientProcess[bytes]) -> bytes:
    """The runner's first line (at most MAX_OFFER_LINE bytes), or what came before the channel closed."""
    head = b""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(OFFER_TIMEOUT_S):
            while b"\n" not in head and len(head) <= MAX_OFFER_LINE:
                part = await proc.stdout.read(MAX_OFFER_LINE + 1 - len(head))
                if not part:
                    break
                head += part
    return head


async def refused(proc: asyncssh.SSHClientProcess[bytes]) -> bool:
    """Whether the runner closed the channel with a reason on stderr (shown on ours)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait_closed(), _CLOSE_S)
    reason = await proc.stderr.read(4096) if proc.is_closing() else b""
    if reason:
        sys.stderr.buffer.write(reason[:4096])
        sys.stderr.buffer.flush()
    return bool(reason)
