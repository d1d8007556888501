"""`app headless ssh-config`: an OpenSSH Host entry per running job, so that `ssh lanpool-RUN`,
scp, sftp, rsync and VS Code Remote-SSH reach the job's dev sshd (agent/shell/dev_sshd.py).

Each entry's ProxyCommand is app/shell/ssh_hop.py (with ProxyUseFdpass): the way in is the system
ssh to the runner's agent, whose host key ssh-config pins from the store (the trust root) under
`lanpool-agent-NAME`, asking for the job's dev offer; the hop hands ssh a connection to the offered
port, so the entry needs no address of its own (HostName is a name that never resolves). The key is
the controller's own (the one that owns the job, the only one the dev sshd takes); the runner's dev
sshd host key (its Hello's) is pinned in the same known_hosts of ours, under `lanpool-runner-NAME`.
A runner that moved to another address needs `ssh-config` run again (the entry holds the address
the store had). Nothing of the user's own ssh configuration is changed,
except with `--install`: an Include of ours as the first line of ~/.ssh/config (an Include after a
`Host` block would apply to that block only).
"""

import hashlib
import os
import re
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lanpool.app.errors import UsageError
from lanpool.protocol.shell_sshd import KEY_PREFIX
from lanpool.protocol.wire import exec_command

HOP = Path(__file__).with_name("ssh_hop.py")  # the ProxyCommand: standard library only, run with -I -S

HOST_PREFIX = "lanpool-"
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a Host pattern with no wildcard, space or `!`
# A ControlPath must fit a unix socket's path (sun_path: 104 bytes on macOS, 108 on Linux);
# `cm-%C` expands to 43 characters.
_SUN_PATH = 104
_CM_NAME = 3 + 40


@dataclass(frozen=True)
class HostEntry:
    """One node of a running job, as its Host entry names it."""

    aliases: tuple[str, ...]  # lanpool-RUN (when the run has this one job), lanpool-JOB; -K for node K
    job_id: str
    node: int  # the job's node (0 for a job on one runner)
    runner: str
    user: str  # the runner's dev sshd user (Hello.sshd_user)
    host_key: str  # base64 of its ed25519 host key (Hello.sshd_host_key)
    host: str  # the runner's agent: its address and port, as the store has them
    port: int
    agent_key: str  # the agent's own host key as the store pinned it ("ssh-ed25519 BASE64")


def runner_alias(runner: str, kind: str = "runner") -> str:
    """The name a runner's dev host key is pinned under (HostKeyAlias; `kind` "agent": its agent's
    own key): its name when that is a plain word, else a plain form of it with a hash of the whole
    (two names never share one)."""
    if _SAFE.fullmatch(runner) and len(runner) <= 64:
        return f"{HOST_PREFIX}{kind}-{runner}"
    plain = re.sub(r"[^A-Za-z0-9._-]", "_", runner)[:40]
    return f"{HOST_PREFIX}{kind}-{plain}-{hashlib.sha256(runner.encode()).hexdigest()[:10]}"


def agent_alias(runner: str) -> str:
    return runner_alias(runner, "agent")


def aliases(run_name: str, job_id: str, node: int, run_alias: bool) -> tuple[str, ...]:
    """lanpool-RUN (when `run_alias` and the run's name is a plain word) and lanpool-JOB; node K >= 1
    of a multi-node job gets `-K` after each."""
    suffix = f"-{node}" if node else ""
    names = [f"{HOST_PREFIX}{run_name}{suffix}"] if run_alias and _SAFE.fullmatch(run_name) else []
    names.append(f"{HOST_PREFIX}{job_id}{suffix}")
    return tuple(dict.fromkeys(names))


def _path(path: Path | str) -> str:
    """A path as ssh_config takes it: `%` and `~` would be expanded (tokens), so `%` is doubled;
    double quotes keep spaces. A path with a double quote or a line break cannot be written."""
    text = str(path)
    if '"' in text or "\n" in text or "\r" in text:
        raise UsageError(f"{text!r} holds a double quote or a line break, which an ssh_config cannot hold")
    return '"' + text.replace("%", "%%") + '"'


def control_path(home: Path) -> str:
    """Where ControlMaster's sockets go: ours when the path fits a unix socket, else ~/.ssh."""
    if len(str(home / "ssh")) + 1 + _CM_NAME < _SUN_PATH:
        return _path(home / "ssh")[:-1] + '/cm-%C"'  # the home's own `%` doubled, then ssh's token
    return '"~/.ssh/lanpool-cm-%C"'


def proxy_command(entry: HostEntry, home: Path, python: str, client_key_b64: str) -> str:
    """ProxyCommand's text (app/shell/ssh_hop.py): ssh runs it with the user's shell, after
    expanding `%` tokens. The exec request names the job only: each node's entry goes to that
    node's runner."""
    request = exec_command(entry.job_id, [], None, dev_sshd_key=f"{KEY_PREFIX}{client_key_b64}")
    words = [python, "-I", "-S", str(HOP), str(home), entry.host, str(entry.port), agent_alias(entry.runner), request]
    text = " ".join(shlex.quote(w) for w in words)
    if "\n" in text or "\r" in text:
        raise UsageError(f"{home!r}, {python!r} or {entry.host!r} holds a line break, which an ssh_config cannot hold")
    return text.replace("%", "%%")


def host_entry(entry: HostEntry, home: Path, python: str, client_key_b64: str, control_master: bool = True) -> str:
    """The Host block of one entry: our key only, the runner's dev host key pinned, no agent and
    no X11 forwarded, a ControlMaster (the second ssh needs no new proxy: ~3x faster)."""
    lines = [
        f"Host {' '.join(entry.aliases)}",
        f"    HostName {entry.job_id}.lanpool.invalid",
        f"    User {entry.user}",
        f"    ProxyCommand {proxy_command(entry, home, python, client_key_b64)}",
        "    ProxyUseFdpass yes",
        f"    IdentityFile {_path(home / 'id_ed25519')}",
        "    IdentitiesOnly yes",
        "    IdentityAgent none",
        "    PreferredAuthentications publickey",
        f"    UserKnownHostsFile {_path(home / 'ssh' / 'known_hosts')}",
        "    GlobalKnownHostsFile /dev/null",
        f"    HostKeyAlias {runner_alias(entry.runner)}",
        "    StrictHostKeyChecking yes",
        "    UpdateHostKeys no",
        "    CheckHostIP no",
        "    ForwardAgent no",
        "    ForwardX11 no",
    ]
    if control_master:
        lines += [
            "    ControlMaster auto",
            f"    ControlPath {control_path(home)}",
            "    ControlPersist 10m",
        ]
    lines.append("    ServerAliveInterval 15")
    return "\n".join(lines) + "\n"


def config_text(
    entries: Sequence[HostEntry], home: Path, python: str, client_key_b64: str, control_master: bool = True
) -> str:
    head = (
        "# Written by `app headless ssh-config`: a Host per running job of this controller. It is\n"
        "# written again on each run of it; edits here are lost.\n"
    )
    return head + "".join("\n" + host_entry(e, home, python, client_key_b64, control_master) for e in entries)


def known_hosts_line(runner: str, host_key: str) -> str:
    return f"{runner_alias(runner)} ssh-ed25519 {host_key}\n"


def pinned(known_hosts: Path, alias: str, key_type: str = "ssh-ed25519") -> str | None:
    """The key of `key_type` pinned under `alias` (base64), or None."""
    try:
        lines = known_hosts.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        words = line.split()
        if len(words) >= 3 and words[0] == alias and words[1] == key_type:
            return words[2]
    return None


def pin(known_hosts: Path, alias: str, host_key: str, key_type: str = "ssh-ed25519") -> None:
    """`alias key_type host_key` as the one line for `alias`, the other lines kept."""
    if pinned(known_hosts, alias, key_type) == host_key:
        return
    try:
        kept = [line for line in known_hosts.read_text().splitlines() if line.split()[:1] != [alias]]
    except OSError:
        kept = []
    write_private(known_hosts, "".join(f"{line}\n" for line in kept) + f"{alias} {key_type} {host_key}\n")


def write_private(path: Path, text: str) -> None:
    """`text` into `path`, 0600 in a 0700 directory, whole or not at all (a concurrent ssh reads
    either the old file or the new)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_ssh_config(
    home: Path, entries: Sequence[HostEntry], python: str, client_key_b64: str, control_master: bool = True
) -> str:
    """Write <home>/ssh/config (the entries) and the host keys of their runners (each one's dev
    sshd key and its agent's) into <home>/ssh/known_hosts, keeping the pins of runners not named;
    the config's text."""
    ssh_dir = home / "ssh"
    text = config_text(entries, home, python, client_key_b64, control_master)
    for entry in entries:
        pin(ssh_dir / "known_hosts", runner_alias(entry.runner), entry.host_key)
        key_type, _, key = entry.agent_key.partition(" ")
        pin(ssh_dir / "known_hosts", agent_alias(entry.runner), key, key_type)
    if control_master and control_path(home).startswith('"~/.ssh/'):
        # ssh makes no directory for a ControlPath: without ~/.ssh the first `ssh` would fail.
        (Path.home() / ".ssh").mkdir(mode=0o700, exist_ok=True)
    write_private(ssh_dir / "config", text)  # after the pins: an entry is never there before its keys
    return text


def include_line(home: Path) -> str:
    return f"Include {_path(home / 'ssh' / 'config')}"


def install_include(home: Path, user_config: Path) -> bool:
    """Put the Include of ours as the first line of `user_config` (~/.ssh/config: made 0600, its
    directory 0700, when missing); False when it is there already."""
    line = include_line(home)
    try:
        text = user_config.read_text()
    except FileNotFoundError:
        text = ""
    if line in (each.strip() for each in text.splitlines()):
        return False
    user_config.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    why = "# ^ lanpool's running jobs (`app headless ssh-config`): first, so that no Host block holds it\n"
    # A config that is a link (a dotfiles checkout) stays one: its target is what is written.
    write_private(user_config.resolve(), f"{line}\n{why}\n{text}")
    return True
