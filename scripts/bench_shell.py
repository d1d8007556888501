"""Into a running job, measured on this machine (figures, no pass/fail exit code):

1. keystroke echo: one byte typed into a PTY running `cat` in a job through the
   agent's exec door, until its echo is back, vs the same through a loopback
   OpenSSH server (scripts/bench_downloads.py's Sshd). The same asyncssh client
   drives both, so the figure compares the two servers' paths; ratio target <= 1.2.
2. a forwarded port: --size-mb from a TCP server on the runner's loopback, read
   through the agent's forward of a job's declared port vs read directly;
   ratio target >= 0.8.
Needs /usr/sbin/sshd (openssh-server) for 1.
"""

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import asyncssh  # noqa: E402
from bench_downloads import Sshd  # noqa: E402

from app.home import ControllerHome  # noqa: E402
from app.job_shell import exec_command  # noqa: E402
from app.keys import load_or_create_client_key  # noqa: E402
from app.runner_client import RunnerSession  # noqa: E402
from protocol import SubmitJob  # noqa: E402
from tests import harness  # noqa: E402


async def _echo_ms(conn: asyncssh.SSHClientConnection, command: str, keys: int) -> list[float]:
    proc = await conn.create_process(command, term_type="xterm", term_size=(80, 24), encoding=None)
    await asyncio.sleep(0.5)  # the shell / cat started
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


async def _serve_bytes(size: int) -> tuple[asyncio.Server, int]:
    block = os.urandom(1 << 20)

    async def send(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        left = size
        while left:
            n = min(left, len(block))
            writer.write(block[:n])
            await writer.drain()
            left -= n
        writer.close()

    server = await asyncio.start_server(send, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _read_all(port: int) -> float:
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    total = 0
    while data := await reader.read(1 << 20):
        total += len(data)
    writer.close()
    return total / (time.perf_counter() - t0) / 2**20


async def main_async(args: argparse.Namespace, tmp: Path) -> None:
    home = tmp / "controller"
    os.environ["LANPOOL_HOME"] = str(home)
    agent = harness.start_agent(tmp / "agent", home)
    sshd = Sshd(tmp) if not args.no_sshd else None
    server, port = await _serve_bytes(args.size_mb << 20)
    try:
        key = load_or_create_client_key(ControllerHome.default().key)
        async with await RunnerSession.open(agent.host, agent.port, key, None) as session:
            await session.submit(
                SubmitJob(job_id="bench1", run_name="bench", workflow="w", commands=["sleep 600"], ports=[port])
            )
            await asyncio.sleep(1.0)
            lp = await _echo_ms(session.conn, exec_command("bench1", ["cat"]), args.keys)
            listener = await session.conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", port)
            fwd = [await _read_all(listener.get_port()) for _ in range(args.pairs)]
            direct = [await _read_all(port) for _ in range(args.pairs)]
            await session.stop("bench1", True, 0)
        print(
            f"keystroke echo via lanpool: median {statistics.median(lp):.2f} ms (p90 {sorted(lp)[int(len(lp) * 0.9)]:.2f})"
        )
        if sshd is not None:
            async with asyncssh.connect(
                "127.0.0.1",
                sshd.port,
                username=os.environ.get("USER", "root"),
                client_keys=[str(sshd.dir / "client")],
                known_hosts=None,
                config=[],
            ) as conn:
                ossh = await _echo_ms(conn, "cat", args.keys)
            print(
                f"keystroke echo via OpenSSH: median {statistics.median(ossh):.2f} ms (p90 {sorted(ossh)[int(len(ossh) * 0.9)]:.2f})"
            )
            print(f"echo ratio lanpool/OpenSSH: {statistics.median(lp) / statistics.median(ossh):.2f} (target <= 1.2)")
        f, d = statistics.median(fwd), statistics.median(direct)
        print(
            f"port {args.size_mb} MiB: forwarded {f:.0f} MiB/s, direct {d:.0f} MiB/s, ratio {f / d:.2f} (target >= 0.8)"
        )
    finally:
        server.close()
        if sshd is not None:
            sshd.stop()
        agent.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=300, help="keystrokes timed")
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--no-sshd", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main_async(args, Path(tmp)))


if __name__ == "__main__":
    main()
