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

Standard library only, run with `-I -S` (no site, no lanpool import), and the system ssh started
before anything is imported but `os` and `sys` (which Python has loaded already): this is on the
path of every cold connection, and imports cost ~30 ms of a ~0.1 s hop (scripts/bench-dev).
Errors: one `lanpool:` line on stderr, exit 255 (what ssh shows of a ProxyCommand that failed).
"""

import os
import sys

PROXY_FAILED = 255
CONNECT_S = 10
MAX_OFFER_LINE = 256  # protocol/shell_sshd.py MAX_OFFER_LINE
MAX_SAID = 300  # characters of what the runner said, on the user's terminal
NO_OFFER = b"lanpool-sshd -\n"
RELAY_LINE = b"lanpool-sshd relay\n"
_B64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_USER_FIRST = frozenset(b"abcdefghijklmnopqrstuvwxyz_")
_USER_REST = _USER_FIRST | frozenset(b"0123456789.-")
_ADDRESS = frozenset("0123456789abcdefABCDEF.:")


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
        "ConnectTimeout": str(CONNECT_S),
        "ServerAliveInterval": "15",
        "LogLevel": "ERROR",
    }
    argv = ["ssh", "-F", "/dev/null", "-T", "-p", str(port), "-l", "lanpool", "-i", os.path.join(home, "id_ed25519")]
    for name, value in options.items():
        argv += ["-o", f"{name}={value}"]
    return [*argv, "--", host, exec_request]


def spawn_ssh(argv: list[str], fds: dict[int, int]) -> int:
    """Start the system ssh with `fds` as its standard fds ({its fd: ours}); its pid. Our other fds
    are close-on-exec (PEP 446): it gets these and nothing else of ours."""
    actions = [(os.POSIX_SPAWN_DUP2, ours, theirs) for theirs, ours in fds.items()]
    try:
        return os.posix_spawnp(argv[0], argv, dict(os.environ), file_actions=actions)
    except OSError as exc:
        raise HopError(f"cannot start ssh ({exc.strerror or exc}): install OpenSSH's client") from None


class Outer:
    """A system ssh to the agent, its stdin, stdout and stderr pipes ours (fds, no `subprocess`:
    its import is ~10 ms)."""

    def __init__(self, argv: list[str]) -> None:
        in_r, self.stdin = os.pipe()
        self.stdout, out_w = os.pipe()
        self.stderr, err_w = os.pipe()
        try:
            self.pid = spawn_ssh(argv, {0: in_r, 1: out_w, 2: err_w})
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)

    def said(self) -> bytes:
        """All it wrote on stderr, once it ended (bounded)."""
        data = b""
        while len(data) < 65536 and (chunk := os.read(self.stderr, 65536)):
            data += chunk
        return data


def literal(host: str) -> bool:
    """An IP address as written (the store's usual): it needs no lookup before ssh starts."""
    if ":" in host:
        return set(host) <= _ADDRESS
    parts = host.split(".")
    return len(parts) == 4 and all(part.isdigit() and len(part) <= 3 for part in parts)


def early(args: list[str]) -> Outer | None:
    """The ssh to the agent, started before the imports below, for a well-formed command line
    whose host is an address (else main() starts it, after resolving the name)."""
    if len(args) != 5 or not args[2].isdigit() or not literal(args[1]):
        return None
    try:
        return Outer(outer_ssh(args[0], args[1], int(args[2]), args[3], args[4]))
    except HopError:
        return None  # main() says why


# Before the imports: the agent's handshake (~65 ms) runs while they do.
_STARTED = early(sys.argv[1:]) if __name__ == "__main__" else None

import socket  # noqa: E402


def said(text: bytes) -> str:
    """The runner's last words as one printable line (they are its, not ours: no escapes reach
    the terminal)."""
    lines = [line for line in text.decode(errors="replace").splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return "".join(ch if ch.isprintable() else "?" for ch in last)[:MAX_SAID]


def read_offer(source: int | socket.socket) -> bytes:
    """The offer line, read a byte at a time from an fd or a socket (what follows it is sshd's,
    not ours to take); b"" when it ended first."""
    line = b""
    while not line.endswith(b"\n") and len(line) < MAX_OFFER_LINE:
        byte = source.recv(1) if isinstance(source, socket.socket) else os.read(source, 1)
        if not byte:
            return b""
        line += byte
    return line


def offer_port(line: bytes) -> int | None:
    """The port of an offer line `lanpool-sshd PORT USER HOSTKEY\\n` (protocol/shell_sshd.py;
    the host key is checked again by ssh against the pinned one), else None."""
    words = line.removesuffix(b"\n").split(b" ")
    if not line.endswith(b"\n") or len(words) != 4 or words[0] != b"lanpool-sshd":
        return None
    port, user, key = words[1:]
    user_ok = 1 <= len(user) <= 33 and user[0] in _USER_FIRST and set(user.removesuffix(b"$")) <= _USER_REST
    if not (port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535) or not user_ok:
        return None
    return int(port) if len(key) == 68 and set(key) <= _B64 else None


def offered_port(line: bytes, stderr: bytes, what: str) -> int:
    port = offer_port(line)
    if port is not None:
        return port
    if line == NO_OFFER:
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


def connect(host: str, port: int) -> socket.socket:
    """The connection for ssh, with Nagle off: ssh turns it off for a terminal only, and without
    one (`ssh HOST CMD`, scp, rsync) each handshake step it sends behind an unacknowledged one
    would wait for the sshd's delayed ACK (40 ms, several times a connection:
    protocol/runtime/ssh_transport.py says more)."""
    sock = socket.create_connection((host, port), CONNECT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def pass_fd(sock: socket.socket) -> None:
    """Hand `sock` to ssh on our stdout (ProxyUseFdpass: a unix socket)."""
    with socket.socket(fileno=os.dup(1)) as out:
        socket.send_fds(out, [b"\0"], [sock.fileno()])


def keep(outer: Outer) -> None:
    """In a child of our own, outliving us: the offer's channel open (its stdin held) until the
    agent closes it, which it does once the session's sshd ended."""
    if os.fork():
        return
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        while os.read(outer.stdout, 65536):
            pass
        while os.read(outer.stderr, 65536):
            pass
    finally:
        os._exit(0)


def relay(argv: list[str], where: str) -> None:
    """A second offer whose channel is the connection: its ssh's stdin and stdout are one end of
    a socket pair, the other end goes to ssh once the offer line is read off it. Its stderr is
    ours (what the runner says reaches the user's terminal through ssh)."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        spawn_ssh(argv, {0: theirs.fileno(), 1: theirs.fileno()})
        theirs.close()
        ours.sendall(RELAY_LINE)
        offered_port(read_offer(ours), b"", where)
        print(f"lanpool: {where}: relayed on lanpool's connection (slower)", file=sys.stderr, flush=True)
        pass_fd(ours)


def hop(home: str, host: str, port: int, alias: str, exec_request: str, outer: Outer | None = None) -> None:
    where = f"runner {host}:{port}"
    if outer is None:
        # One address for both connections: the agent takes the dev sshd's connection only from
        # the address its SSH connection came from.
        try:
            host = str(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0])
        except OSError as exc:
            raise HopError(f"{where}: {exc.strerror or exc} (`app headless runners` shows its address)") from None
        outer = Outer(outer_ssh(home, host, port, alias, exec_request))
    line = read_offer(outer.stdout)
    if not line:
        os.waitpid(outer.pid, 0)
        offered_port(b"", outer.said(), where)
    sshd_port = offered_port(line, b"", where)
    try:
        sock = connect(host, sshd_port)
    except OSError as exc:
        os.close(outer.stdin)  # this offer is done: the agent drops its listener
        unreachable = f"cannot reach {where}'s dev sshd at port {sshd_port} ({exc.strerror or exc})"
        relay(outer_ssh(home, host, port, alias, exec_request), unreachable)
        return
    with sock:
        pass_fd(sock)
    keep(outer)


def main(args: list[str], started: Outer | None = None) -> int:
    if len(args) != 5 or not args[2].isdigit():
        print(
            "lanpool: usage: ssh_hop.py HOME HOST PORT ALIAS EXEC (an ssh-config entry's ProxyCommand)", file=sys.stderr
        )
        return PROXY_FAILED
    home, host, port, alias, exec_request = args
    try:
        hop(home, host, int(port), alias, exec_request, started)
    except HopError as exc:
        print(f"lanpool: {exc}", file=sys.stderr, flush=True)
        return PROXY_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], _STARTED))
