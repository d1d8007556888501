"""What the trust checks cost and what they bound, against a real agent on 127.0.0.1.

1. Pairing with the PAKE: median time of N pairings, in-process (`RunnerSession.open` +
   `pair`) and through the CLI (`app headless runners pair`), each by a new controller key.
2. A hostile frame: the agent's peak RSS (VmHWM) before and after one 16 MiB frame of
   empty maps (the decoder walks the structure before building it), and its reply.

    scripts/bench-trust [--repeat N]
"""

import argparse
import asyncio
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import asyncssh  # noqa: E402

from lanpool.agent.ssh.pairing import Pairing  # noqa: E402
from lanpool.app.runners.client import RunnerSession  # noqa: E402
from lanpool.protocol import MAX_FRAME_BYTES, SUBSYSTEM  # noqa: E402
from tests.harness import AgentProc, lanpool_env, start_agent  # noqa: E402


def peak_rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) // 1024


async def pair_once(agent: AgentProc) -> float:
    key = asyncssh.generate_private_key("ssh-ed25519")  # a new controller each time: a code is used once
    code = Pairing(agent.data_dir / "pairing.json").issue().code
    start = time.perf_counter()
    async with await RunnerSession.open(agent.host, agent.port, key, None, pairing=True) as session:
        await session.pair(code, key.export_public_key().decode().strip(), "bench")
    return time.perf_counter() - start


def pair_cli(agent: AgentProc, home: Path) -> float:
    code = Pairing(agent.data_dir / "pairing.json").issue().code
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "lanpool.app.cli.main", "headless", "runners", "pair", agent.address, code],
        env=lanpool_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"bench-trust: pairing through the CLI failed: {result.stderr.strip()}")
    return elapsed


async def hostile_frame(agent: AgentProc, key: asyncssh.SSHKey) -> tuple[int, int, bytes]:
    async with asyncssh.connect(
        agent.host, agent.port, username="lanpool", client_keys=[key], known_hosts=None, agent_path=None, config=[]
    ) as conn:
        proc = await conn.create_process(subsystem=SUBSYSTEM, encoding=None)
        await proc.stdout.read(65536)  # Hello
        n = MAX_FRAME_BYTES - 32
        # A ping whose extra field is an array of n empty maps: each costs 1 byte on the wire.
        body = b"\x83\xa1t\xa4ping\xa5nonce\x01\xa1x\xdd" + n.to_bytes(4, "big") + b"\x80" * n
        before = peak_rss_mib(agent.proc.pid)
        proc.stdin.write(struct.pack(">I", len(body)) + body)
        reply = await asyncio.wait_for(proc.stdout.read(65536), 120)
        return before, peak_rss_mib(agent.proc.pid), reply


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-trust", allow_abbrev=False)
    parser.add_argument("--repeat", type=int, default=10, help="pairings of each kind (default 10; median)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lanpool-bench-trust-"))
    agent = start_agent(tmp / "agent", tmp / "controller", name="bench-trust", extra_args=("--no-mdns",))
    try:
        inproc = [asyncio.run(pair_once(agent)) for _ in range(args.repeat)]
        cli = [pair_cli(agent, tmp / f"controller-{i}") for i in range(args.repeat)]
        print(f"pairing (PAKE), median of {args.repeat}:")
        print(
            f"  in-process open + pair       {statistics.median(inproc) * 1000:7.1f} ms (min {min(inproc) * 1000:.1f})"
        )
        print(f"  app headless runners pair    {statistics.median(cli) * 1000:7.1f} ms (min {min(cli) * 1000:.1f})")
        key = asyncssh.read_private_key(str(tmp / "controller" / "id_ed25519"))
        before, after, reply = asyncio.run(hostile_frame(agent, key))
        print(f"hostile 16 MiB frame of empty maps: agent peak RSS {before} -> {after} MiB (+{after - before} MiB)")
        print(f"  reply: {reply[4:100]!r}")
    finally:
        agent.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    # docs/bench/bench-trust.json -> docs/benchmarks.md (scripts/bench-report)
    from bench_results import record, row

    record(
        "bench-trust",
        [
            row("pairing with the PAKE, in-process (median)", statistics.median(inproc), unit="s"),
            row("pairing through `app headless runners pair` (median)", statistics.median(cli), unit="s"),
            row("a hostile 16 MiB frame: agent peak RSS after, vs before", after, before, unit="MiB"),
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
