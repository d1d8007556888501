"""The ProxyCommand of an `ssh-config` Host entry (app/shell/ssh_config.py), with ProxyUseFdpass:
it hands `ssh` a TCP connection to the job's dev sshd and exits.

    python -I -S ssh_hop.py HOME HOST PORT ALIAS EXEC

How: the system's own `ssh` (not asyncssh: a Python start with asyncssh costs ~0.3 s, the most of
a cold `ssh lanpool-RUN`) connects to the runner's agent at HOST:PORT with the controller's key
HOME/id_ed25519, the agent's host key pinned in HOME/ssh/known_hosts under ALIAS (what
`ssh-config` pinned from the store: the trust root), and asks for the dev offer EXEC (`lanpool-exec
JOB --dev-sshd KEY`: protocol/shell_sshd.py). The agent answers with the offer line; this connects
to the offered port and passes the socket to `ssh` (ProxyUseFdpass), so the session's bytes go from
`ssh` to sshd with no process between them. The offer's channel must stay open for the session
(the agent stops the sshd when it closes): a child of ours keeps it, and ends when the agent
closes it (the session ended).

Where the offered port cannot be reached (a firewall that lets lanpool's port through only), a
second offer's channel is the connection itself (RELAY_LINE): that `ssh`'s stdin and stdout are one
end of a socket pair whose other end is passed; slower (the agent's per-packet work), said in one line.

Standard library only, run with `-I -S` (no site, no lanpool import): this is on the path of
every cold connection. Errors: one `lanpool:` line on stderr, exit 255 (what ssh shows of a
ProxyCommand that failed).
"""

import os
import re
import socket
import subprocess
import sys
from typing import IO

PROXY_FAILED = 255
CONNECT_S = 10.0
MAX_OFFER_LINE = 256  # protocol/shell_sshd.py MAX_OFFER_LINE
MAX_SAID = 300  # characters of what the runner said, on the user's terminal
# protocol/shell_sshd.py's offer line, checked again by sshd's host key pin (StrictHostKeyChecking).
_OFFER = re.compile(rb"lanpool-sshd ([0-9]{1,5}) [a-z_][a-z0-9_.-]{0,31}\$? [A-Za-z0-9+/]{68}\n")
_NO_OFFER = b"lanpool-sshd -\n"
RELAY_LINE = b"lanpool-sshd relay\n"


class HopError(Exception):
    """One line for the user: what went wrong and what to do."""


def outer_ssh(home: str, host: str, port: int, alias: str, exec_request: str) -> list[str]:
    """The system ssh to the agent: our key only, its pinned host key only, nothing of the user's
    ~/.ssh/config (-F /dev/null: a `Host *` with ProxyJump or ControlMaster would change it), no
    agent, X11 or forwarding, no prompt."""
    options = {
        "IdentitiesOnly": "yes",
        "IdentityAgent": "none",
        "PreferredAuthentications": "publickey",
        "BatchMode": "yes",
        "UserKnownHostsFile": os.path.join(home, "ssh", "known_hosts"),
        "GlobalKnownHostsFile": "/dev/null",
        "HostKeyAlias": alias,
        "StrictHostKeyChecking": "yes",
        "UpdateHostKeys": "no",
        "CheckHostIP": "no",
        "ControlMaster": "no",
        "ControlPath": "none",
        "ForwardAgent": "no",
        "ForwardX11": "no",
        "ClearAllForwardings": "yes",
        "ConnectTimeout": str(int(CONNECT_S)),
        "ServerAliveInterval": "15",
        "LogLevel": "ERROR",
    }
    argv = ["ssh", "-F", "/dev/null", "-T", "-p", str(port), "-l", "lanpool", "-i", os.path.join(home, "id_ed25519")]
    for name, value in options.items():
        argv += ["-o", f"{name}={value}"]
    return [*argv, "--", host, exec_request]


def said(text: bytes) -> str:
    """The runner's last words as one printable line (they are its, not ours: no escapes reach
    the terminal)."""
    lines = [line for line in text.decode(errors="replace").splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return "".join(ch if ch.isprintable() else "?" for ch in last)[:MAX_SAID]


def read_offer(read: "IO[bytes] | socket.socket") -> bytes:
    """The offer line, read a byte at a time (what follows it is sshd's, not ours to take); b""
    when the channel ended first."""
    line = b""
    while not line.endswith(b"\n") and len(line) < MAX_OFFER_LINE:
        byte = read.recv(1) if isinstance(read, socket.socket) else read.read(1)
        if not byte:
            return b""
        line += byte
    return line


def offered_port(line: bytes, stderr: bytes, what: str) -> int:
    match = _OFFER.fullmatch(line)
    if match is not None and 1 <= int(match[1]) <= 65535:
        return int(match[1])
    if line == _NO_OFFER:
        raise HopError(
            f"{what}: the runner offers no dev sshd for it (no sshd or docker command there, or "
            "LANPOOL_SSHD_SHELLS=0: its agent log says which)"
        )
    if not line:
        why = said(stderr)
        if "host key verification failed" in why.lower():
            why += " (its pinned key is not the one it showed: `app headless runners` says more)"
        raise HopError(f"{what}: {why}" if why else f"{what}: the runner closed the connection (its reason above)")
    raise HopError(f"{what}: the runner answered {said(line)!r}, not an offer")


def pass_fd(sock: socket.socket) -> None:
    """Hand `sock` to ssh on our stdout (ProxyUseFdpass: a unix socket)."""
    with socket.socket(fileno=os.dup(1)) as out:
        socket.send_fds(out, [b"\0"], [sock.fileno()])


def keep(outer: "subprocess.Popen[bytes]") -> None:
    """In a child of our own, outliving us: the offer's channel open (its stdin held) until the
    agent closes it, which it does once the session's sshd ended."""
    if os.fork():
        return
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        assert outer.stdout is not None and outer.stderr is not None
        while outer.stdout.read(65536):
            pass
        while outer.stderr.read(65536):
            pass
    finally:
        os._exit(0)


def relay(argv: list[str], where: str) -> None:
    """A second offer whose channel is the connection: its ssh's stdin and stdout are one end of
    a socket pair, the other end goes to ssh once the offer line is read off it. Its stderr is
    ours (what the runner says reaches the user's terminal through ssh)."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        subprocess.Popen(argv, stdin=theirs.fileno(), stdout=theirs.fileno())
        theirs.close()
        ours.sendall(RELAY_LINE)
        offered_port(read_offer(ours), b"", where)
        print(f"lanpool: {where}: relayed on lanpool's connection (slower)", file=sys.stderr, flush=True)
        pass_fd(ours)


def hop(home: str, host: str, port: int, alias: str, exec_request: str) -> None:
    where = f"runner {host}:{port}"
    # One address for both connections: the agent takes the dev sshd's connection only from the
    # address its SSH connection came from.
    try:
        host = str(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0])
    except OSError as exc:
        raise HopError(f"{where}: {exc.strerror or exc} (`app headless runners` shows its address)") from None
    argv = outer_ssh(home, host, port, alias, exec_request)
    try:
        outer = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        raise HopError(f"cannot start ssh ({exc.strerror or exc}): install OpenSSH's client") from None
    assert outer.stdout is not None and outer.stderr is not None and outer.stdin is not None
    line = read_offer(outer.stdout)
    if not line:
        outer.wait()
        offered_port(b"", outer.stderr.read(), where)
    offer_port = offered_port(line, b"", where)
    try:
        sock = socket.create_connection((host, offer_port), CONNECT_S)
    except OSError as exc:
        outer.stdin.close()  # this offer is done: the agent drops its listener
        unreachable = f"cannot reach {where}'s dev sshd at port {offer_port} ({exc.strerror or exc})"
        relay(argv, unreachable)
        return
    with sock:
        pass_fd(sock)
    keep(outer)


def main(args: list[str]) -> int:
    if len(args) != 5 or not args[2].isdigit():
        print(
            "lanpool: usage: ssh_hop.py HOME HOST PORT ALIAS EXEC (an ssh-config entry's ProxyCommand)", file=sys.stderr
        )
        return PROXY_FAILED
    home, host, port, alias, exec_request = args
    try:
        hop(home, host, int(port), alias, exec_request)
    except HopError as exc:
        print(f"lanpool: {exc}", file=sys.stderr, flush=True)
        return PROXY_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
