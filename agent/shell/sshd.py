"""A process job's shell in a one-time OpenSSH server: the runner's side (protocol/shell_sshd.py says why).

Asked on the exec channel (authorized, the job checked running: agent/shell/into_job.py), the
agent makes, in a private directory (0700, in /dev/shm where there is one, removed at the end):
- an ed25519 host key for this session only (sent in the offer; the runner's own host key
  is never handed to sshd),
- an authorized_keys with the one key the controller sent, `restrict,pty` (no forwarding of
  any kind, no agent, no X11, no ~/.ssh/rc),
- an sshd_config that allows that key and nothing else, forces the session's command and
  turns off every forwarding and the user's environment files,
- the session's command: a script that deletes itself first (so the job's environment, which
  may hold secrets, is on disk only until the session starts, and its absence tells the agent
  the session ran), enters the job's working directory and runs the shell with the job's
  environment, as the job's own process has it.
Then one listener in the direct transfers' ports takes ONE connection from the address the
SSH connection came from (others are closed and logged), handed to `sshd -i` on its stdin and
stdout. The channel closing or the job ending stops that sshd; its log lines go to the agent's log.
"""

import asyncio
import contextlib
import functools
import ipaddress
import logging
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import asyncssh

from lanpool.agent.jobs.job import Job
from lanpool.agent.shell.process_job import job_environment
from lanpool.protocol.errors import clip
from lanpool.protocol.shell_sshd import NO_OFFER_LINE, SSHD_ENV, SSHD_RAN, SSHD_UNUSED, offer_line

log = logging.getLogger(__name__)

ACCEPT_S = 15.0  # how long the offer waits for the controller's ssh
MAX_STRANGERS = 8  # connections from other addresses before the offer is withdrawn
_STOP_S = 5.0
_LOG_LINES = 200  # of one sshd's stderr, into the agent's log
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}\$?")
_SBIN = "/usr/sbin:/usr/local/sbin:/sbin"
_PRIVSEP_DIR = Path("/run/sshd")  # Debian's sshd will not start as root without it
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_SAFE_PATH = re.compile(r"[A-Za-z0-9_./-]+")
_DIR_PREFIX = "lanpool-sshd-"
_STALE_DIR = re.compile(re.escape(_DIR_PREFIX) + r"([0-9]{1,10})-[A-Za-z0-9_]+")


def sshd_binary() -> str | None:
    """The sshd to run, by absolute path (sshd re-executes itself by it), or None."""
    found = shutil.which("sshd", path=_SBIN + os.pathsep + os.environ.get("PATH", ""))
    return os.path.abspath(found) if found else None


def sshd_offered() -> bool:
    """Whether to tell controllers this runner takes `--sshd` (Hello.features): an sshd is
    installed and not turned off. What else could stop it is checked per session (unusable_because)."""
    return os.environ.get(SSHD_ENV, "1").strip() != "0" and sshd_binary() is not None


def unusable_because() -> str | None:
    """Why a one-time sshd cannot serve a session here, or None when it can."""
    if os.environ.get(SSHD_ENV, "1").strip() == "0":
        return f"{SSHD_ENV}=0"
    if sshd_binary() is None:
        return "no sshd installed (openssh-server)"
    try:
        me = pwd.getpwuid(os.getuid())
    except KeyError:
        return "this user has no passwd entry"
    if not _USER.fullmatch(me.pw_name):
        return f"the user name {me.pw_name!r} is not one the offer can carry"
    if os.path.basename(me.pw_shell or "") in ("nologin", "false", ""):
        return f"this user's login shell is {me.pw_shell or 'empty'} (sshd runs the session's command with it)"
    if os.getuid() == 0:
        if _locked_root():
            return "root's password is locked with '!' (sshd without PAM refuses a locked account)"
        try:
            _PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        except OSError as exc:
            return f"no {_PRIVSEP_DIR} for sshd's privilege separation: {exc.strerror}"
    return None


def _locked_root() -> bool:
    try:
        with open("/etc/shadow", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("root:"):
                    return line.split(":", 2)[1].startswith("!")
    except OSError:
        pass
    return False


async def serve_sshd(
    process: asyncssh.SSHServerProcess[bytes],
    job: Job,
    argv: tuple[str, ...],
    client_key_b64: str,
    listen: Callable[[str], socket.socket] | None,
) -> int:
    """Offer a one-time sshd for the job's shell and serve it; SSHD_RAN or SSHD_UNUSED. `listen`
    gives a listener on a host in the direct connections' ports (DirectSender.listen_plain)."""
    what = f"sshd shell in job {job.record.job_id}"
    why = "a container job (its shell goes direct)" if job.record.container_id else unusable_because()
    sockname = process.channel.get_extra_info("sockname")
    peername = process.channel.get_extra_info("peername")
    if why is None and (listen is None or not sockname or not peername):
        why = "no direct connections on this runner"
    listener = None
    if why is None:
        try:
            assert listen is not None
            listener = listen(str(sockname[0]))
        except OSError as exc:
            why = f"cannot listen: {exc}"
    base = _private_tmp()
    if why is None and not _SAFE_PATH.fullmatch(base):
        why = f"the temporary directory {base!r} is not a path sshd_config can hold"
    if why is not None or listener is None:
        if listener is not None:
            listener.close()
        log.info("%s: not offered (%s)", what, why)
        process.stdout.write(NO_OFFER_LINE)
        return SSHD_UNUSED
    sweep_stale(base)
    # The agent's pid in the name: a directory whose agent was killed (SIGKILL skips the
    # finally below) is found and removed by the next agent's sweep_stale.
    workdir = Path(tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-", dir=base))
    try:
        script, host_b64 = _prepare(workdir, job, argv, client_key_b64)
        port = listener.getsockname()[1]
        process.stdout.write(offer_line(port, pwd.getpwuid(os.getuid()).pw_name, host_b64))
        conn = await _accept(process, listener, str(peername[0]), what)
        listener.close()
        if conn is None:
            return SSHD_UNUSED
        log.info("%s: %s connected; the session runs in a one-time sshd", what, peername[0])
        await _run_sshd(process, job, conn, workdir / "sshd_config", what)
        ran = not script.exists()
        log.info("%s: ended (%s)", what, "a session ran" if ran else "no session ran")
        return SSHD_RAN if ran else SSHD_UNUSED
    finally:
        listener.close()
        shutil.rmtree(workdir, ignore_errors=True)


def sweep_stale(base: str | None = None) -> list[str]:
    """Remove the session directories of agents that are gone (killed before their cleanup:
    the session script in them holds the job's environment, which may hold secrets); returns
    their names. Only directories (never a link) owned by this user, named for a pid that no
    longer runs; a pid taken again by another process keeps its directory until that ends."""
    base = base or _private_tmp()
    removed: list[str] = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        m = _STALE_DIR.fullmatch(name)
        if m is None or _alive(int(m.group(1))):
            continue
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(name)
    if removed:
        log.info(
            "removed %d one-time sshd director%s of agents that are gone: %s",
            len(removed),
            "y" if len(removed) == 1 else "ies",
            ", ".join(removed),
        )
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it runs, as someone else
        return True
    return True


def _private_tmp() -> str:
    """/dev/shm (memory, never on disk) where this user can write there, else the default."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else tempfile.gettempdir()


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def _prepare(workdir: Path, job: Job, argv: tuple[str, ...], client_key_b64: str) -> tuple[Path, str]:
    """The session's files in `workdir`; the path of its command script and the base64 of the
    session's host key (what the offer names)."""
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    _write(workdir / "host_key", host_key.export_private_key().decode())
    _write(workdir / "authorized_keys", f"restrict,pty ssh-ed25519 {client_key_b64} lanpool-controller\n")
    env, cwd = job_environment(job)
    script = workdir / "session.sh"
    _write(script, _session_script(env, cwd, argv))
    me = pwd.getpwuid(os.getuid()).pw_name
    _write(
        workdir / "sshd_config",
        "\n".join(
            [
                f"HostKey {workdir / 'host_key'}",
                f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
                f"AllowUsers {me}",
                "AuthenticationMethods publickey",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "HostbasedAuthentication no",
                "UsePAM no",
                "PermitRootLogin prohibit-password",
                "StrictModes no",  # the files are ours, 0600 in a 0700 directory
                "AllowTcpForwarding no",
                "AllowStreamLocalForwarding no",
                "AllowAgentForwarding no",
                "X11Forwarding no",
                "PermitTunnel no",
                "GatewayPorts no",
                "PermitUserEnvironment no",
                "PermitUserRC no",
                "PermitTTY yes",
                "PrintMotd no",
                "PrintLastLog no",
                "MaxAuthTries 2",
                "MaxSessions 1",
                "LoginGraceTime 15",
                "ClientAliveInterval 15",
                "ClientAliveCountMax 3",
                "PidFile none",
                "LogLevel INFO",
                f"ForceCommand /bin/sh {script}",
                "",
            ]
        ),
    )
    return script, host_key.export_public_key().decode().split()[1]


def _session_script(env: dict[str, str], cwd: Path, argv: tuple[str, ...]) -> str:
    """The forced command: delete itself, enter the job's directory, run the shell (or `argv`)
    with exactly the job's environment and the client's TERM. Every value is quoted for sh;
    names that cannot be assignments are left out."""
    assignments = " ".join(
        shlex.quote(f"{name}={value}")
        for name, value in env.items()
        if name and name != "TERM" and "=" not in name and "\0" not in name + value
    )
    command = " ".join(shlex.quote(word) for word in (argv or ("bash", "-i")))
    return (
        'rm -f -- "$0"\n'
        f"cd -- {shlex.quote(str(cwd))} || exit 1\n"
        # `sh -c 'exec "$@"'`: a first word with "=" in it is still the command, not an assignment to env.
        f'exec /usr/bin/env -i {assignments} "TERM=${{TERM:-xterm}}" /bin/sh -c \'exec "$@"\' sh {command}\n'
    )


async def _client_done(process: asyncssh.SSHServerProcess[bytes]) -> None:
    """Returns once the controller is done with the session: it sent EOF on the channel (its
    `ssh` ended, whether or not it ever connected) or closed it. Nothing else is read from it."""
    with contextlib.suppress(asyncssh.Error, OSError):
        while await process.stdin.read(4096):
            pass


def _same_host(a: str, b: str) -> bool:
    try:
        x, y = ipaddress.ip_address(a), ipaddress.ip_address(b)
    except ValueError:
        return a == b
    if isinstance(x, ipaddress.IPv6Address) and x.ipv4_mapped:
        x = x.ipv4_mapped
    if isinstance(y, ipaddress.IPv6Address) and y.ipv4_mapped:
        y = y.ipv4_mapped
    return x == y


async def _accept(
    process: asyncssh.SSHServerProcess[bytes], listener: socket.socket, peer: str, what: str
) -> socket.socket | None:
    """The controller's connection: the first from the SSH connection's address, within ACCEPT_S,
    while the controller waits for it; None otherwise. Connections from elsewhere are closed unread."""
    loop = asyncio.get_running_loop()
    listener.setblocking(False)
    closed = asyncio.ensure_future(_client_done(process))
    deadline = loop.time() + ACCEPT_S
    strangers = 0
    try:
        while strangers < MAX_STRANGERS:
            accepting = asyncio.ensure_future(loop.sock_accept(listener))
            done, _ = await asyncio.wait(
                [accepting, closed], timeout=max(0.0, deadline - loop.time()), return_when=asyncio.FIRST_COMPLETED
            )
            if accepting not in done:
                accepting.cancel()
                log.info("%s: %s", what, "the controller gave up first" if closed in done else "no connection came")
                return None
            conn, address = accepting.result()
            if _same_host(address[0], peer):
                return conn
            strangers += 1
            log.warning("%s: a connection from %s, not the controller's %s; closed", what, address[0], peer)
            conn.close()
        log.warning("%s: %d connections from elsewhere; the offer is withdrawn", what, strangers)
        return None
    finally:
        closed.cancel()


async def _run_sshd(
    process: asyncssh.SSHServerProcess[bytes], job: Job, conn: socket.socket, config: Path, what: str
) -> None:
    """`sshd -i` on the connection until it ends, the controller is done or the job ends."""
    binary = sshd_binary()
    assert binary is not None  # unusable_because() checked it
    conn.setblocking(True)
    try:
        sshd = await asyncio.create_subprocess_exec(
            binary, "-i", "-e", "-f", str(config), stdin=conn.fileno(), stdout=conn.fileno(),
            stderr=asyncio.subprocess.PIPE, start_new_session=True, preexec_fn=_die_with_parent(),
        )  # fmt: skip
    finally:
        conn.close()  # the child has its own copy
    assert sshd.stderr is not None
    logging_task = asyncio.ensure_future(_log_lines(sshd.stderr, what))
    waiting = asyncio.ensure_future(sshd.wait())
    closed = asyncio.ensure_future(_client_done(process))
    ended = asyncio.ensure_future(job.wait_terminal())
    try:
        await asyncio.wait([waiting, closed, ended], return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            log.info("%s: %s; stopping its sshd", what, "the job ended" if ended.done() else "the controller is done")
            with contextlib.suppress(ProcessLookupError):
                sshd.terminate()  # sshd hangs the session up
            try:
                await asyncio.wait_for(asyncio.shield(waiting), _STOP_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(sshd.pid, signal.SIGKILL)
                await waiting
        await asyncio.wait([logging_task], timeout=1.0)
    finally:
        for task in (closed, ended, logging_task):
            task.cancel()
        if sshd.returncode is None:  # cancelled (the agent stopping): no session outlives its agent
            with contextlib.suppress(ProcessLookupError):
                os.killpg(sshd.pid, signal.SIGKILL)


def _die_with_parent() -> Callable[[], object] | None:
    """For the child: SIGKILL when the agent dies, however it dies (a session of its own is out of
    reach of the signals that end the agent's process group, and a killed agent runs no cleanup).
    libc is loaded here, in the parent: nothing may be imported between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return functools.partial(prctl, _PR_SET_PDEATHSIG, signal.SIGKILL)


async def _log_lines(stream: asyncio.StreamReader, what: str) -> None:
    """sshd's own lines (who logged in, why one was refused) into the agent's log, bounded."""
    logged = 0
    try:
        while line := await stream.readline():
            if logged < _LOG_LINES:
                log.info("%s: sshd: %s", what, clip(line.decode(errors="replace").strip(), 300))
                logged += 1
    except ValueError:  # a line over the reader's limit: what sshd says is not worth more
        return
