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
Then one listener in the direct transfers' ports takes connections from the address the SSH
connection came from (others are closed and logged), each handed to an `sshd -i` of its own on its
stdin and stdout, until one logs in with the session's key (sshd's "Accepted publickey" line with
that key's fingerprint): then the listener closes and the other connections are cut. A wrong key,
or a connection that says nothing, does not use the offer up (the controller's `ssh` may come
after it), and what it may cost is bounded: MAX_TRIES connections, MAX_PENDING logging in at
once, each for LOGIN_GRACE_S (sshd's LoginGraceTime), new ones for ACCEPT_S. The channel closing
or the job ending stops every sshd of the offer; their log lines go to the agent's log.
A job's dev sshd (`--dev-sshd`, agent/shell/dev_sshd.py) is the same offer with the runner's dev
host key, its own config and dispatcher, and a login that counts as a session of the job.
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
from pathlib import Path, PurePosixPath
from typing import Any

import asyncssh

from lanpool.agent.jobs.job import Job
from lanpool.agent.shell.dev_sshd import (
    dev_config,
    dev_container_script,
    dev_permit_open,
    dev_script,
    docker_cli,
    engine_env,
    load_or_create_host_key,
    login_lines,
    sftp_server_path,
)
from lanpool.agent.shell.process_job import inside, job_environment
from lanpool.protocol.errors import clip
from lanpool.protocol.shell_sshd import NO_OFFER_LINE, RELAY_LINE, SSHD_ENV, SSHD_RAN, SSHD_UNUSED, offer_line

log = logging.getLogger(__name__)

ACCEPT_S = 15.0  # how long the offer takes new connections for the controller's ssh
LOGIN_GRACE_S = 15  # how long one connection may take to log in (sshd's LoginGraceTime)
MAX_STRANGERS = 8  # connections from other addresses before the offer is withdrawn
# Connections from the controller's address that may try to log in, in all and at once: enough
# for the controller's ssh after a few that failed (a wrong key, a port scan), and no more sshds.
MAX_TRIES = 8
MAX_PENDING = 4
_STOP_S = 5.0
_LOG_LINES = 200  # of one sshd's stderr, into the agent's log
_RELAY_CHUNK = 256 * 1024
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}\$?")
_SBIN = "/usr/sbin:/usr/local/sbin:/sbin"
_PRIVSEP_DIR = Path("/run/sshd")  # Debian's sshd will not start as root without it
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_SAFE_PATH = re.compile(r"[A-Za-z0-9_./-]+")
_DIR_PREFIX = "lanpool-sshd-"
_STALE_DIR = re.compile(re.escape(_DIR_PREFIX) + r"([0-9]{1,10})-[A-Za-z0-9_]+")
# sshd's line for a login (-e: on stderr, with no prefix; OpenSSH 9.8+ may name sshd-session).
# Anchored at the start: sshd escapes what a client sends (a user name with a newline in it)
# before it logs, so no client can start a line; the fingerprint must be the session's key.
_ACCEPTED = re.compile(
    r"(?:sshd(?:-session)?(?:\[[0-9]+\])?: )?Accepted publickey for \S+ from \S+ port [0-9]+ ssh2: ED25519 (SHA256:\S+)"
)


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
    dev_host_key: Path | None = None,
) -> int:
    """Offer a one-time sshd for the job's shell and serve it; SSHD_RAN or SSHD_UNUSED. `listen`
    gives a listener on a host in the direct connections' ports (DirectSender.listen_plain).
    `dev_host_key`: the job's dev sshd instead (agent/shell/dev_sshd.py), with that host key."""
    what = f"{'dev sshd' if dev_host_key else 'sshd shell'} in job {job.record.job_id}"
    # A container's or a Slurm job's shell goes on the SSH channel (agent/shell/container.py,
    # slurm_job.py); a container's dev sshd runs here and enters it with `docker exec`.
    why = unusable_because()
    if why is None and job.record.container_id:
        if dev_host_key is None:
            why = "a container job"
        elif docker_cli() is None:
            why = "no docker command on this runner's PATH (a container job's dev sessions use `docker exec`)"
    if why is None and dev_host_key is not None and not dev_host_key.is_file():
        why = f"no dev host key at {dev_host_key}"
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
        if dev_host_key is not None:
            script, host_b64 = await _prepare_dev(workdir, job, client_key_b64, dev_host_key)
        else:
            script, host_b64 = _prepare(workdir, job, argv, client_key_b64)
        port = listener.getsockname()[1]
        process.stdout.write(offer_line(port, pwd.getpwuid(os.getuid()).pw_name, host_b64))
        fingerprint = asyncssh.import_public_key(f"ssh-ed25519 {client_key_b64}").get_fingerprint("sha256")
        how = _Sshd(workdir / "sshd_config", fingerprint, what, job, dev=dev_host_key is not None)
        logged_in = await _serve(process, job, listener, str(peername[0]), how)
        # One-time: the forced command's first act is to delete itself, which no client can fake.
        # Dev: the script stays for every session of the connection; sshd's login line tells.
        ran = logged_in if dev_host_key is not None else not script.exists()
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
    _write(script, _session_script(env, cwd, tuple(inside(job, list(argv) or ["bash", "-i"], cwd))))
    me = pwd.getpwuid(os.getuid()).pw_name
    _write(
        workdir / "sshd_config",
        "\n".join(
            [
                *login_lines(workdir / "host_key", workdir / "authorized_keys", me),
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
                f"LoginGraceTime {LOGIN_GRACE_S}",
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


async def _prepare_dev(workdir: Path, job: Job, client_key_b64: str, host_key: Path) -> tuple[Path, str]:
    """The dev sshd's files in `workdir` (agent/shell/dev_sshd.py); the dispatcher's path and the
    base64 of the runner's dev host key."""
    host_b64 = load_or_create_host_key(host_key)  # made at start: read here
    keys = workdir / "authorized_keys"
    _write(keys, f"restrict,pty,port-forwarding ssh-ed25519 {client_key_b64} lanpool-controller\n")
    script = workdir / "dev.sh"
    docker = docker_cli()
    if job.record.container_id and docker:
        from lanpool.agent.executors.docker import WORKSPACE  # the docker SDK: container jobs' only

        cwd = str(PurePosixPath(WORKSPACE) / job.record.working_dir)
        config_dir = workdir / "docker"
        config_dir.mkdir(mode=0o700)
        _write(script, dev_container_script(docker, job.record.container_id, cwd, engine_env(), config_dir))
    else:
        env, host_cwd = job_environment(job)
        _write(script, dev_script(env, host_cwd, inside(job, [], host_cwd)))
    ports = await asyncio.to_thread(dev_permit_open, job)  # reads /proc: every process's fds
    config = dev_config(
        host_key=host_key,
        authorized_keys=keys,
        user=pwd.getpwuid(os.getuid()).pw_name,
        ports=ports,
        sftp_server=sftp_server_path(),
        script=script,
        login_grace_s=LOGIN_GRACE_S,
    )
    _write(workdir / "sshd_config", config)
    return script, host_b64


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


class _Relay:
    """A dev offer whose channel may become the connection itself (RELAY_LINE): `asked` is done once
    the controller wrote the line, `sock` once an sshd holds the other end of our socket pair."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.asked: asyncio.Future[None] = loop.create_future()
        self.sock: asyncio.Future[socket.socket] = loop.create_future()
        self.down: asyncio.Future[None] | None = None  # sshd's bytes to the channel

    async def start(self, process: asyncssh.SSHServerProcess[bytes], how: "_Sshd") -> "_Login":
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        login = await _Login.start(theirs, how)
        self.sock.set_result(ours)
        self.down = asyncio.ensure_future(_relay_down(ours, process))
        return login

    async def close(self) -> None:
        if self.down is not None:
            await asyncio.wait([self.down], timeout=_STOP_S)  # what sshd said last reaches the controller
            self.down.cancel()
        if self.sock.done() and not self.sock.cancelled():
            self.sock.result().close()
        self.sock.cancel()


async def _client_done(process: asyncssh.SSHServerProcess[bytes], relay: _Relay | None = None) -> None:
    """Returns once the controller is done with the session: it sent EOF on the channel (its
    `ssh` ended, whether or not it ever connected) or closed it. A dev offer's channel that
    starts with RELAY_LINE is the connection: what follows goes to the relay's sshd; anything
    else is read and dropped."""
    with contextlib.suppress(asyncssh.Error, OSError, asyncio.IncompleteReadError):
        if relay is not None and await process.stdin.readexactly(len(RELAY_LINE)) == RELAY_LINE:
            relay.asked.set_result(None)
            sock = await relay.sock
            loop = asyncio.get_running_loop()
            try:
                while data := await process.stdin.read(_RELAY_CHUNK):
                    await loop.sock_sendall(sock, data)
            finally:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
            return
        while await process.stdin.read(4096):
            pass


async def _relay_down(sock: socket.socket, process: asyncssh.SSHServerProcess[bytes]) -> None:
    """The relay's sshd to the channel, with the channel's backpressure, until sshd closes."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError, asyncssh.Error):
        while data := await loop.sock_recv(sock, _RELAY_CHUNK):
            process.stdout.write(data)
            await process.stdout.drain()
        process.stdout.write_eof()


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


class _Sshd:
    """What every `sshd -i` of one offer is started with, and how its login is told."""

    def __init__(
        self, config: Path, fingerprint: str, what: str, counted: Job | None = None, dev: bool = False
    ) -> None:
        self.config = config
        self.fingerprint = fingerprint  # of the session's key, as sshd logs it
        self.what = what
        # A login (a dev sshd's, or the one-time shell's) is a session of its job for as long as its
        # connection lasts (a dev environment's idle limit counts them: Job.session_opened/closed).
        self.counted = counted
        self.dev = dev


class _Login:
    """One connection from the controller's address, in an `sshd -i` of its own: `accepted` is done
    once sshd logged it in with the session's key, `ended` once that sshd exited."""

    def __init__(self, sshd: asyncio.subprocess.Process, how: _Sshd) -> None:
        assert sshd.stderr is not None
        self.sshd = sshd
        self.accepted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ended = asyncio.ensure_future(sshd.wait())
        self.logging = asyncio.ensure_future(_log_lines(sshd.stderr, how, self.accepted))

    @classmethod
    async def start(cls, conn: socket.socket, how: _Sshd) -> "_Login":
        binary = sshd_binary()
        assert binary is not None  # unusable_because() checked it
        conn.setblocking(True)
        try:
            sshd = await asyncio.create_subprocess_exec(
                binary, "-i", "-e", "-f", str(how.config), stdin=conn.fileno(), stdout=conn.fileno(),
                stderr=asyncio.subprocess.PIPE, start_new_session=True, preexec_fn=_die_with_parent(),
            )  # fmt: skip
        finally:
            conn.close()  # the child has its own copy
        return cls(sshd, how)

    async def stop(self) -> None:
        """Hang the session up (sshd does on SIGTERM), by force after _STOP_S."""
        with contextlib.suppress(ProcessLookupError):
            self.sshd.terminate()
        try:
            await asyncio.wait_for(asyncio.shield(self.ended), _STOP_S)
        except TimeoutError:
            self.kill()
            await self.ended

    def kill(self) -> None:
        """Its sshd and whatever it started gone (a session of its own: the pid is the group)."""
        if self.sshd.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.sshd.pid, signal.SIGKILL)

    def drop(self) -> None:
        self.kill()
        self.ended.cancel()
        self.logging.cancel()


async def _serve(
    process: asyncssh.SSHServerProcess[bytes], job: Job, listener: socket.socket, peer: str, how: _Sshd
) -> bool:
    """The offer, from its listener to the end of its session: the first connection that logs in
    (_first_login) is served until its sshd ends, the controller is done or the job ends; every
    other connection's sshd is killed once one logged in, or when the offer ends without one.
    Whether one logged in."""
    relay = _Relay() if how.dev else None
    closed = asyncio.ensure_future(_client_done(process, relay))
    ended = asyncio.ensure_future(job.wait_terminal())
    logins: list[_Login] = []
    try:
        login = await _first_login(listener, peer, how, logins, closed, ended, relay, process)
        listener.close()
        for other in logins:
            if other is not login:
                other.kill()  # before a login, so no session of ours
        if login is None:
            return False
        log.info(
            "%s: %s logged in; the session runs in a %s sshd",
            how.what,
            peer,
            "dev" if how.dev else "one-time",
        )
        if how.counted is not None:
            how.counted.session_opened()
        try:
            await asyncio.wait([login.ended, closed, ended], return_when=asyncio.FIRST_COMPLETED)
            if not login.ended.done():
                log.info(
                    "%s: %s; stopping its sshd",
                    how.what,
                    "the job ended" if ended.done() else "the controller is done",
                )
                await login.stop()
        finally:
            if how.counted is not None:
                how.counted.session_closed()
        await asyncio.wait([login.logging], timeout=1.0)
        return True
    finally:
        if relay is not None:
            await relay.close()
        closed.cancel()
        ended.cancel()
        for each in logins:  # cancelled (the agent stopping) too: no session outlives its agent
            each.drop()


async def _first_login(
    listener: socket.socket,
    peer: str,
    how: _Sshd,
    logins: list[_Login],
    closed: asyncio.Future[None],
    ended: asyncio.Future[None],
    relay: _Relay | None = None,
    process: asyncssh.SSHServerProcess[bytes] | None = None,
) -> _Login | None:
    """Connections from the SSH connection's address, each into an sshd of its own (appended to
    `logins`), until one logs in with the session's key: that one. None when the controller is
    done or the job ends first, or when no connection is pending and none may come any more
    (ACCEPT_S passed, MAX_TRIES taken, MAX_STRANGERS closed). Connections from elsewhere, and
    those over MAX_PENDING, are closed unread. A relay the controller asks for (RELAY_LINE) is one
    more connection, on the channel itself, from the owner's authenticated connection."""
    loop = asyncio.get_running_loop()
    listener.setblocking(False)
    deadline = loop.time() + ACCEPT_S
    strangers = tries = 0
    accepting: asyncio.Future[tuple[socket.socket, Any]] | None = None
    try:
        while True:
            taking = tries < MAX_TRIES and strangers < MAX_STRANGERS and loop.time() < deadline
            if taking and accepting is None:
                accepting = asyncio.ensure_future(loop.sock_accept(listener))
            elif not taking and accepting is not None:
                accepting.cancel()
                accepting = None
            if accepting is None and not logins:
                _log_no_login(how.what, tries, strangers)
                return None
            waits: set[asyncio.Future[Any]] = {closed, ended, *(w for x in logins for w in (x.accepted, x.ended))}
            if accepting is not None:
                waits.add(accepting)
            if relay is not None and not relay.sock.done():
                waits.add(relay.asked)
            timeout = max(0.0, deadline - loop.time()) if accepting is not None else None
            done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if closed in done or ended in done:
                log.info("%s: %s", how.what, "the controller gave up first" if closed.done() else "the job ended")
                return None
            if relay is not None and relay.asked.done() and not relay.sock.done() and process is not None:
                log.info("%s: %s asked for the session on its SSH channel (its port unreachable?)", how.what, peer)
                logins.append(await relay.start(process, how))
                continue
            for login in list(logins):
                if login.ended.done() and not login.accepted.done():
                    await asyncio.wait([login.logging], timeout=1.0)  # its last lines: did it log in?
                    if not login.accepted.done():
                        logins.remove(login)
                        login.drop()
                if login.accepted.done():
                    return login
            if accepting is None or accepting not in done:
                continue
            conn, address = accepting.result()
            accepting = None
            if not _same_host(address[0], peer):
                strangers += 1
                log.warning("%s: a connection from %s, not the controller's %s; closed", how.what, address[0], peer)
                conn.close()
                continue
            tries += 1
            if len(logins) >= MAX_PENDING:
                log.warning("%s: a connection from %s while %d are logging in; closed", how.what, peer, len(logins))
                conn.close()
                continue
            log.info(
                "%s: %s connected (%d of %d); it may log in to the one-time sshd", how.what, peer, tries, MAX_TRIES
            )
            logins.append(await _Login.start(conn, how))
    finally:
        if accepting is not None:
            accepting.cancel()
            if accepting.done() and not accepting.cancelled() and accepting.exception() is None:
                accepting.result()[0].close()  # taken just as the offer ended


def _log_no_login(what: str, tries: int, strangers: int) -> None:
    if strangers >= MAX_STRANGERS:
        log.warning("%s: %d connections from elsewhere; the offer is withdrawn", what, strangers)
    elif tries >= MAX_TRIES:
        log.warning("%s: %d connections, none logged in; the offer is withdrawn", what, tries)
    else:
        log.info("%s: %s", what, "no connection logged in" if tries else "no connection came")


def _die_with_parent() -> Callable[[], object] | None:
    """For the child: SIGKILL when the agent dies, however it dies (a session of its own is out of
    reach of the signals that end the agent's process group, and a killed agent runs no cleanup).
    libc is loaded here, in the parent: nothing may be imported between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return functools.partial(prctl, _PR_SET_PDEATHSIG, signal.SIGKILL)


async def _log_lines(stream: asyncio.StreamReader, how: _Sshd, accepted: asyncio.Future[None]) -> None:
    """sshd's own lines (who logged in, why one was refused) into the agent's log, bounded;
    `accepted` done at its line for a login with the session's key."""
    logged = 0
    try:
        while line := await stream.readline():
            text = line.decode(errors="replace").strip()
            if not accepted.done() and (m := _ACCEPTED.fullmatch(text)) and m.group(1) == how.fingerprint:
                accepted.set_result(None)
            if logged < _LOG_LINES:
                log.info("%s: sshd: %s", how.what, clip(text, 300))
                logged += 1
    except ValueError:  # a line over the reader's limit: what sshd says is not worth more
        return
