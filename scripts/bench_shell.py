"""Into a running job, measured on this machine (figures, no pass/fail exit code):

1. keystroke echo, end to end: one byte typed into the terminal (a PTY) of
   lanpool's client (app/shell/into_job.py run_shell, as `app headless ssh` runs it:
   through the runner's one-time sshd with the system's `ssh`; again on the SSH
   channel, the fallback, LANPOOL_SSHD_SHELLS=0)
   with `cat` on a PTY in the job, until its echo is on that terminal, vs the
   same with OpenSSH's `ssh -tt` to a loopback sshd (scripts/bench_downloads.py's
   Sshd), rounds alternating; ratio target <= 1.2. Then the servers alone: the
   same asyncssh client typing into each, and the floor of any asyncssh
   server, a bare one echoing in-process (no PTY, no lanpool code).
2. a forwarded port: --size-mb from a TCP server in a process of its own on the
   runner's loopback (as a job's would be), read through the forward that
   `app headless ports` opens (app/shell/ports.py) vs read directly, pairs
   alternating; ratio target >= 0.8. The reader is a process of its own, as a
   browser or TensorBoard client would be.
Both on loopback (direct = GB/s without encryption), then again across a LAN-shaped
link (scripts/bench_lan.py: the runner, the job's server and the sshd in one network
namespace, the controller and the clients in another, 1 Gbit/s and 0.1 ms each way):
direct = the job's server read across the link. The LAN part needs root (skipped if not).
Needs /usr/sbin/sshd (openssh-server) for 1.
"""

import argparse
import asyncio
import json
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import asyncssh  # noqa: E402
from bench_downloads import CIPHER, Sshd  # noqa: E402
from bench_lan import RUN_IP, LanLink, in_controller, in_runner  # noqa: E402

from lanpool.app.home import ControllerHome  # noqa: E402
from lanpool.app.keys import load_or_create_client_key  # noqa: E402
from lanpool.app.runners.client import RunnerSession  # noqa: E402
from lanpool.app.shell.channel import exec_command  # noqa: E402
from lanpool.app.shell.ports import forward_local  # noqa: E402
from lanpool.protocol import ENCRYPTION_ALGS, SubmitJob  # noqa: E402
from tests import harness  # noqa: E402

# A job's server: SIZE bytes to each connection; prints its port.
BYTE_SERVER = """
import socket, sys, threading
size = int(sys.argv[1]); block = bytes(1 << 20)
srv = socket.create_server((sys.argv[2], 0)); print(srv.getsockname()[1], flush=True)
def send(c):
    with c:
        left = size
        while left:
            left -= c.send(memoryview(block)[: min(left, len(block))])
while True:
    threading.Thread(target=send, args=(srv.accept()[0],), daemon=True).start()
"""

# The floor: a bare asyncssh server echoing what it gets (no PTY, no lanpool code); prints its port.
ECHO_SERVER = """
import asyncio, sys, asyncssh
async def echo(process):
    while data := await process.stdin.read(65536):
        process.stdout.write(data)
    process.exit(0)
class Open(asyncssh.SSHServer):
    def begin_auth(self, username): return False
async def main():
    key = asyncssh.generate_private_key("ssh-ed25519")
    srv = await asyncssh.create_server(Open, sys.argv[2], 0, server_host_keys=[key], process_factory=echo,
        encoding=None, encryption_algs=sys.argv[1].split(","), line_editor=False)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


async def _echo_ms(conn: asyncssh.SSHClientConnection, command: str, keys: int) -> list[float]:
    proc = await conn.create_process(command, term_type="xterm", term_size=(80, 24), encoding=None)
    await asyncio.sleep(0.3)  # the shell / cat started
    times = []
    for i in range(keys):
        ch = bytes([97 + i % 26])
        t0 = time.perf_counter()
        proc.stdin.write(ch)
        got = b""
        while ch not in got:
            got += await asyncio.wait_for(proc.stdout.read(64), 10)
        times.append((time.perf_counter() - t0) * 1000)
    proc.stdin.write(b"\x04")
    proc.close()
    return times


# lanpool's client on a terminal: `app headless ssh`'s run_shell, with `cat` in the job.
SHELL_CLIENT = """
import asyncio, sys
from lanpool.app.home import ControllerHome
from lanpool.app.shell.into_job import run_shell
from lanpool.app.keys import load_or_create_client_key
from lanpool.app.runners.client import RunnerSession
async def main():
    key = load_or_create_client_key(ControllerHome.default().key)
    async with await RunnerSession.open(sys.argv[1], int(sys.argv[2]), key, None) as session:
        await run_shell(session, sys.argv[3], ["cat"])
asyncio.run(main())
"""


class Terminal:
    """A client program on a PTY of ours: bytes typed into it, its screen read back."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.fd, slave = pty.openpty()
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True, env={**os.environ, **(env or {})}
        )
        os.close(slave)
        deadline = time.monotonic() + 30
        # The client has put its terminal in raw mode (no local echo to mistake for the far end's).
        while termios.tcgetattr(self.fd)[3] & termios.ECHO:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise TimeoutError(f"{argv[:2]!r} did not take its terminal")
            time.sleep(0.05)
        self.type_and_wait(b"!", 30)  # connected, and `cat` runs at the far end

    def type_and_wait(self, ch: bytes, timeout: float = 10) -> float:
        t0 = time.perf_counter()
        os.write(self.fd, ch)
        got = b""
        while ch not in got:
            if not select.select([self.fd], [], [], max(0.0, t0 + timeout - time.perf_counter()))[0]:
                raise TimeoutError(f"no echo of {ch!r} from {self.proc.args!r}")
            got += os.read(self.fd, 4096)
        return (time.perf_counter() - t0) * 1000

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.close(self.fd)


def _terminal_echo_ms(term: Terminal, keys: int) -> list[float]:
    return [term.type_and_wait(bytes([97 + i % 26])) for i in range(keys)]


def _ssh_options(sshd: Sshd) -> list[str]:
    return [
        *("-p", str(sshd.port), "-i", str(sshd.dir / "client"), "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"),
        *("-o", "StrictHostKeyChecking=no", "-o", f"UserKnownHostsFile={sshd.dir / 'known_hosts'}"),
        *("-o", f"Ciphers={CIPHER}", f"{os.environ.get('USER', 'root')}@{sshd.host}"),
    ]


def _spawn(script: str, *args: str, wrap: list[str]) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([*wrap, sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


# A client of the port in a process of its own: it reads to the end; prints MiB/s from connect to end.
READER = """
import socket, sys, time
buf = bytearray(1 << 20); total = 0; t0 = time.perf_counter()
with socket.create_connection((sys.argv[1], int(sys.argv[2]))) as s:
    while n := s.recv_into(buf):
        total += n
print(total / (time.perf_counter() - t0) / 2**20)
"""


async def _read_all(host: str, port: int) -> float:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", READER, host, str(port), stdout=subprocess.PIPE)
    out, _ = await proc.communicate()
    return float(out)


def _cpu_s(pid: int) -> float:
    """CPU seconds a process has used (Linux /proc): less swayed by the machine's load than wall time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _figure(name: str, ms: list[float]) -> str:
    return f"{name}: median {statistics.median(ms):.3f} ms (p90 {sorted(ms)[int(len(ms) * 0.9)]:.3f})"


async def main_async(args: argparse.Namespace, tmp: Path, lan: bool) -> dict:
    """The figures on loopback, or (`lan`, run in the controller's namespace) across the link."""
    home = tmp / "controller"
    os.environ["LANPOOL_HOME"] = str(home)
    host, wrap = (RUN_IP, in_runner([])) if lan else ("127.0.0.1", [])
    env = harness.lanpool_env(home)
    harness.authorize_key(harness.controller_key(env), tmp / "agent", env)
    agent = harness.spawn_agent(tmp / "agent", env, host=host, app=[*wrap, *harness.APP_MODULE]).wait_listening()
    sshd = Sshd(tmp, host, wrap) if not args.no_sshd else None
    server, port = _spawn(BYTE_SERVER, str(args.size_mb << 20), "0.0.0.0" if lan else host, wrap=wrap)
    floor, floor_port = _spawn(ECHO_SERVER, ",".join(ENCRYPTION_ALGS), host, wrap=wrap)
    echo: dict[str, list[float]] = {"lanpool": [], "OpenSSH": [], "bare asyncssh": []}
    e2e: dict[str, list[float]] = {"lanpool": [], "OpenSSH": [], "lanpool channel": []}
    try:
        key = load_or_create_client_key(ControllerHome.default().key)
        async with await RunnerSession.open(agent.host, agent.port, key, None) as session:
            await session.submit(
                SubmitJob(job_id="bench1", run_name="bench", workflow="w", commands=["sleep 600"], ports=[port])
            )
            await asyncio.sleep(1.0)
            client = [sys.executable, "-c", SHELL_CLIENT, agent.host, str(agent.port), "bench1"]
            # lanpool: as `app headless ssh` goes by default, through the runner's one-time sshd
            # (app/shell/sshd.py); "lanpool channel": on the SSH channel (the way without OpenSSH).
            terms = {
                "lanpool": Terminal(client),
                "lanpool channel": Terminal(client, {"LANPOOL_SSHD_SHELLS": "0"}),
            }
            if sshd is not None:
                terms["OpenSSH"] = Terminal(["ssh", "-tt", *_ssh_options(sshd), "cat"])
            try:
                for _ in range(args.rounds):  # alternating, so the machine's load falls on both alike
                    for name, term in terms.items():
                        e2e[name] += await asyncio.to_thread(_terminal_echo_ms, term, max(1, args.keys // args.rounds))
            finally:
                for term in terms.values():
                    term.close()
            others = {"bare asyncssh": (dict(port=floor_port, username="x"), "x")}
            if sshd is not None:
                client = [str(sshd.dir / "client")]
                user = os.environ.get("USER", "root")
                others["OpenSSH"] = (dict(port=sshd.port, username=user, client_keys=client), "cat")
            per_round = max(1, args.keys // args.rounds)
            for _ in range(args.rounds):  # alternating, so the machine's load falls on all alike
                echo["lanpool"] += await _echo_ms(session.conn, exec_command("bench1", ["cat"]), per_round)
                for name, (options, command) in others.items():
                    async with asyncssh.connect(
                        host, known_hosts=None, config=[], encryption_algs=ENCRYPTION_ALGS, **options
                    ) as conn:
                        echo[name] += await _echo_ms(conn, command, per_round)
            forward = await forward_local(session.conn, port)
            fwd, direct = [], []
            agent_cpu = our_cpu = 0.0
            for _ in range(args.pairs):
                a0, c0 = _cpu_s(agent.proc.pid), time.process_time()
                fwd.append(await _read_all("127.0.0.1", forward.get_port()))
                agent_cpu += _cpu_s(agent.proc.pid) - a0
                our_cpu += time.process_time() - c0
                direct.append(await _read_all(host, port))
            forward.close()
            await session.stop("bench1", True, 0)
        return _report(args, e2e, echo, fwd, direct, agent_cpu, our_cpu)
    finally:
        for proc in (server, floor):
            proc.kill()
            proc.wait()
        if sshd is not None:
            sshd.stop()
        agent.stop()


def _median(ms: list[float]) -> float | None:
    return statistics.median(ms) if ms else None


def _report(
    args: argparse.Namespace,
    e2e: dict[str, list[float]],
    echo: dict[str, list[float]],
    fwd: list[float],
    direct: list[float],
    agent_cpu: float,
    our_cpu: float,
) -> dict:
    """Print the figures; what record() keeps of them."""
    for kind, series in (("end to end", e2e), ("server alone", echo)):
        for name, ms in series.items():
            if ms:
                print(_figure(f"keystroke echo, {kind}, via {name}", ms))
    res: dict = {"e2e": {n: _median(ms) for n, ms in e2e.items()}, "server": {n: _median(ms) for n, ms in echo.items()}}
    for kind in ("e2e", "server"):
        lp, ossh = res[kind]["lanpool"], res[kind]["OpenSSH"]
        if lp and ossh:
            print(f"echo ratio lanpool/OpenSSH, {kind}: {lp / ossh:.2f} (target <= 1.2)")
    f, d = statistics.median(fwd), statistics.median(direct)
    print(f"port {args.size_mb} MiB: forwarded {f:.0f} MiB/s, direct {d:.0f} MiB/s, ratio {f / d:.2f} (target >= 0.8)")
    mib = args.size_mb * args.pairs
    res["port"] = {"forwarded": f, "direct": d, "agent_cpu_ms_per_mib": agent_cpu / mib * 1000}
    print(
        f"forwarded, CPU per MiB: agent {agent_cpu / mib * 1000:.2f} ms, controller (forward + reader) "
        f"{our_cpu / mib * 1000:.2f} ms; load average {os.getloadavg()[0]:.1f}"
    )
    return res


def _rows(r: dict, size_mb: int, where: str = "") -> list[dict]:
    """The figures of one place: loopback (`where` empty, the names as recorded before) or the LAN link."""
    from bench_results import picked  # docs/bench/NAME.json -> docs/benchmarks.md (scripts/bench-report)

    rows = [
        picked(
            r,
            "keystroke echo, end to end: `app headless ssh`'s client (through the runner's one-time sshd) vs "
            "`ssh -tt`, `cat` in the job / at an sshd beside the agent (median)",
            "e2e.lanpool",
            "e2e.OpenSSH",
            target="<= 1.2",
            unit="ms",
        ),
        picked(
            r,
            "keystroke echo, end to end, the shell on the SSH channel (LANPOOL_SSHD_SHELLS=0: no OpenSSH) vs `ssh -tt` "
            "(median)",
            "e2e.lanpool channel",
            "e2e.OpenSSH",
            unit="ms",
        ),
        picked(
            r,
            "keystroke echo, servers alone: the agent's exec door on the SSH channel vs the sshd, one asyncssh "
            "client (median)",
            "server.lanpool",
            "server.OpenSSH",
            unit="ms",
        ),
        picked(
            r,
            "keystroke echo, the floor of any asyncssh server (a bare echo, no PTY) vs the sshd (median)",
            "server.bare asyncssh",
            "server.OpenSSH",
            unit="ms",
        ),
        picked(
            r,
            f"forwarded port, {size_mb} MiB from a job's server, vs read directly (median)",
            "port.forwarded",
            "port.direct",
            target=">= 0.8",
            unit="MiB/s",
        ),
        picked(r, "agent CPU per forwarded MiB", "port.agent_cpu_ms_per_mib", unit="ms"),
    ]
    return [{**one, "figure": where + one["figure"]} for one in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=300, help="keystrokes timed per server")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds the keystrokes are split into")
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--no-sshd", action="store_true")
    parser.add_argument("--only", choices=["loopback", "lan"], help="one place only (default: both)")
    parser.add_argument("--inner-lan", action="store_true", help=argparse.SUPPRESS)  # in the controller's namespace
    args = parser.parse_args()
    if args.inner_lan:
        with tempfile.TemporaryDirectory() as tmp:
            print(RESULT + json.dumps(asyncio.run(main_async(args, Path(tmp), True))), flush=True)
        return
    rows = []
    if args.only != "lan":
        print("== loopback", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            rows += _rows(asyncio.run(main_async(args, Path(tmp), False)), args.size_mb)
    if args.only != "loopback":
        why = LanLink.unavailable()
        if why:
            print(f"LAN-shaped part skipped: {why}", flush=True)
        else:
            shape, results = _lan(args)
            rows += _rows(results, args.size_mb, f"LAN-shaped ({shape}): ")
    from bench_results import record

    record("bench-shell", rows)


RESULT = "bench-shell result: "


def _lan(args: argparse.Namespace) -> tuple[str, dict]:
    """main_async in the controller's namespace of a fresh link (a process of its own there)."""
    argv = [sys.executable, __file__, "--inner-lan", f"--keys={args.keys}", f"--rounds={args.rounds}"]
    argv += [f"--size-mb={args.size_mb}", f"--pairs={args.pairs}", *(["--no-sshd"] if args.no_sshd else [])]
    with LanLink() as link:
        print(f"== LAN-shaped: {link.shape}", flush=True)
        proc = subprocess.Popen(in_controller(argv), stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        result: dict = {}
        for line in proc.stdout:
            if line.startswith(RESULT):
                result = json.loads(line[len(RESULT) :])
            else:
                print(line, end="", flush=True)
        if proc.wait() != 0 or not result:
            raise SystemExit(f"bench-shell: the LAN-shaped part failed (exit {proc.returncode})")
    return link.shape, result


if __name__ == "__main__":
    main()
