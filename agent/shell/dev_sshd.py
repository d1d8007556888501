"""A job's dev OpenSSH server: what `ssh lanpool-RUN` (an `app headless ssh-config` entry, its
ProxyCommand app/shell/ssh_hop.py) logs in to, for ssh, scp, sftp, rsync, VS Code Remote-SSH
and `-L` to the job's own ports.

It is the one-time sshd of agent/shell/sshd.py (the same offer on the exec channel, listener,
peer check, bounds, login detection and cleanup), with three differences:
- its host key is the runner's persistent dev host key (AgentHome.dev_sshd_host_key, in the
  agent's data dir, which every job's sandbox sees as an empty tmpfs), said in Hello, so that the
  controller's known_hosts line stays right across sessions and ControlMaster connections;
- the only key it takes is the key of the controller that owns the job (checked in serve_exec);
- every session, whatever the client asked (a shell, a command, the sftp subsystem, scp's and
  rsync's `--server`, VS Code's bootstrap), goes through one forced command, the dispatcher
  (dev_script), which runs it inside the job: its sandbox, its user, its environment. sshd runs
  the forced command for a subsystem too, with SSH_ORIGINAL_COMMAND set to the subsystem's
  command, so sftp is the external sftp-server run in the job (never internal-sftp, which would
  serve files as sshd's user, outside the sandbox). The client's text only ever reaches `sh -c`
  inside the job; nothing of it is evaluated outside.
In a container job the dispatcher is the engine's own `docker exec` into the job's container
(dev_container_script): the session runs as the container's user, in its filesystem and with
its environment; what the client asked reaches only the container's `sh -c`. sftp, scp and rsync
then need their server programs in the image (sftp-server, rsync), as with any sshd in it.
sshd itself does one thing beyond that: local forwarding (`-L`, `-W`) to 127.0.0.1 at the ports
the job declared, as `app headless ports` gives (PermitOpen, decided when the connection starts:
a declared port some other process listens on is left out). Remote forwarding, unix sockets,
agent, X11 and tun are off.
"""

import os
import pwd
import re
import shlex
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

import asyncssh

from lanpool.agent.jobs.job import Job
from lanpool.agent.shell.listeners import job_listens

# Where distributions put OpenSSH's sftp-server (Debian, Fedora, Arch, others); the same path is
# there inside a job's sandbox, whose `/` is the host's, read-only.
SFTP_SERVERS = (
    "/usr/lib/openssh/sftp-server",
    "/usr/libexec/openssh/sftp-server",
    "/usr/lib/ssh/sftp-server",
    "/usr/libexec/sftp-server",
)
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}\$?")  # Hello.sshd_user's bound (protocol/schema.py)
MAX_SESSIONS = 10  # sessions on one connection: a ControlMaster's, VS Code's several channels


def load_or_create_host_key(path: Path) -> str:
    """The base64 of the runner's dev sshd host key (ed25519), made on first use: 0600, written
    whole then renamed, so that a second agent start never reads half a key."""
    if path.exists():
        key = asyncssh.read_private_key(str(path))
    else:
        key = asyncssh.generate_private_key("ssh-ed25519", comment="lanpool-dev-sshd")
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key.export_private_key())
        os.replace(tmp, path)
    return key.export_public_key().decode().split()[1]


def sshd_user() -> str:
    """Who sshd lets in (AllowUsers): this agent's own user, as the Hello and ssh's `User` name it;
    "" when it has no name a Hello may carry (then no dev sshd is offered)."""
    try:
        name = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return ""
    return name if _USER.fullmatch(name) else ""


def sftp_server_path(candidates: Sequence[str] = SFTP_SERVERS) -> str | None:
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    return None


def dev_permit_open(job: Job) -> list[int]:
    """The job's declared ports that a forward may reach: those no process of another listens on
    now (nothing listening yet: the job's server may come later)."""
    return [p for p in job.record.ports if job_listens(job.record.job_id, p) is not False]


def login_lines(host_key: Path, authorized_keys: Path, user: str) -> list[str]:
    """What every sshd a runner starts for a job (the one-time shell's, the dev one) says of who
    may log in: one key file, the agent's own user, a public key and nothing else."""
    return [
        f"HostKey {host_key}",
        f"AuthorizedKeysFile {authorized_keys}",
        f"AllowUsers {user}",
        "AuthenticationMethods publickey",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "HostbasedAuthentication no",
        "UsePAM no",
        "PermitRootLogin prohibit-password",
        "StrictModes no",  # the files are ours, 0600 in a 0700 directory
    ]


def dev_config(
    *,
    host_key: Path,
    authorized_keys: Path,
    user: str,
    ports: Iterable[int],
    sftp_server: str | None,
    script: Path,
    login_grace_s: int,
) -> str:
    """The dev sshd's sshd_config: the controller's key only, every session through `script`,
    local forwarding to the job's `ports` only."""
    ports = sorted(set(ports))
    permit = " ".join(f"{host}:{p}" for p in ports for host in ("127.0.0.1", "localhost"))
    lines = [
        *login_lines(host_key, authorized_keys, user),
        "PermitUserEnvironment no",
        "PermitUserRC no",
        "PrintMotd no",
        "PrintLastLog no",
        "PermitTTY yes",
        f"MaxSessions {MAX_SESSIONS}",
        "MaxAuthTries 2",
        f"LoginGraceTime {login_grace_s}",
        "ClientAliveInterval 15",
        "ClientAliveCountMax 3",
        # `-L`/`-W` to the job's own ports: `local` allows no `-R`; PermitOpen names each target.
        f"AllowTcpForwarding {'local' if ports else 'no'}",
        f"PermitOpen {permit or 'none'}",
        "PermitListen none",
        "GatewayPorts no",
        "AllowStreamLocalForwarding no",
        "AllowAgentForwarding no",
        "X11Forwarding no",
        "PermitTunnel no",
        "PidFile none",
        "LogLevel INFO",
    ]
    if sftp_server:  # without one, scp -O and rsync still work; sftp says the subsystem failed
        lines.append(f"Subsystem sftp {sftp_server}")
    lines += [f"ForceCommand /bin/sh {script}", ""]
    return "\n".join(lines)


def dev_script(env: dict[str, str], cwd: Path, prefix: Sequence[str]) -> str:
    """The dispatcher every session runs (ForceCommand): enter the job's directory, pick what to run
    (the client's command, or a shell: interactive on a terminal), and run it with exactly the job's
    environment, the client's TERM and SSH_CONNECTION, behind `prefix` (inside(job, [], cwd): the
    sandbox's nsenter/setpriv, nothing for an unsandboxed job). The client's command is only ever
    an argument of `sh -c` at the end of the line, after the sandbox is entered. Every value is
    quoted for sh; names env(1) would take as an option or cannot hold are left out."""
    assignments = " ".join(
        shlex.quote(f"{name}={value}")
        for name, value in env.items()
        if name
        and name not in ("TERM", "SSH_CONNECTION")
        and not name.startswith("-")
        and "=" not in name
        and "\0" not in name + value
    )
    enter = " ".join(shlex.quote(word) for word in prefix)
    return (
        f"cd -- {shlex.quote(str(cwd))} || exit 1\n"
        'if [ -n "${SSH_ORIGINAL_COMMAND-}" ]; then set -- /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n'
        "elif [ -t 0 ]; then set -- bash -i\n"
        "else set -- bash\n"
        "fi\n"
        f'exec /usr/bin/env -i {assignments} "TERM=${{TERM:-xterm}}" "SSH_CONNECTION=${{SSH_CONNECTION-}}" '
        f'{enter} "$@"\n'
    )


def docker_cli() -> str | None:
    """The engine's command line, which a container job's dev sessions go through; None: no dev
    sshd for container jobs on this runner (the agent itself talks to the engine by its API)."""
    return shutil.which("docker")


def engine_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """What tells the docker CLI which engine the agent uses (DOCKER_HOST, its TLS settings)."""
    environ = dict(os.environ) if environ is None else environ
    return {k: v for k, v in environ.items() if k in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")}


def dev_container_script(docker: str, container_id: str, cwd: str, engine: dict[str, str], config_dir: Path) -> str:
    """The dispatcher of a container job's dev sshd: each session is a `docker exec` into the job's
    container, in `cwd` there, with a terminal when the client has one; the client's command only
    ever an argument of the container's `sh -c`. The CLI runs with nothing of the session's
    environment but the engine's address and a config dir of its own (no user's ~/.docker)."""
    assignments = " ".join(
        shlex.quote(f"{name}={value}") for name, value in {**engine, "DOCKER_CONFIG": str(config_dir)}.items()
    )
    shell = "if command -v bash >/dev/null; then exec bash $0; else exec sh $0; fi"
    return (
        'if [ -n "${SSH_ORIGINAL_COMMAND-}" ]; then set -- /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n'
        f"elif [ -t 0 ]; then set -- /bin/sh -c {shlex.quote(shell)} -i\n"
        f"else set -- /bin/sh -c {shlex.quote(shell)} -s\n"
        "fi\n"
        "tty=; if [ -t 0 ]; then tty=-t; fi\n"
        f"exec /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin {assignments} {shlex.quote(docker)} exec -i $tty "
        f'-w {shlex.quote(cwd)} -e "TERM=${{TERM:-xterm}}" -e "SSH_CONNECTION=${{SSH_CONNECTION-}}" '
        f'{shlex.quote(container_id)} "$@"\n'
    )
