"""The runner's queue: `run -d`-like submit latency, hand-over latency (first job ends ->
second starts) and the agent's CPU and memory with N queued jobs. Loopback only.
    scripts/bench-queue [--jobs N]"""

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.home import ControllerHome  # noqa: E402
from app.keys import load_or_create_client_key  # noqa: E402
from app.runner_client import RunnerSession  # noqa: E402
from protocol import SubmitJob  # noqa: E402
from tests.harness import start_agent  # noqa: E402


def _proc(pid: int) -> tuple[float, int]:
    """CPU seconds and resident memory (KB) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS")
    )
    return cpu, rss


async def bench(agent, n: int) -> None:
    key = load_or_create_client_key(ControllerHome.default().key)
    async with await RunnerSession.open(agent.host, agent.port, key, None) as s:
        job = lambda i, cmd: SubmitJob(f"j{i}", "r", "w", [cmd], resources={"cpu": 1})  # noqa: E731
        t0 = time.perf_counter()
        await s.submit(job(0, "sleep 1"))
        await s.submit(job(1, "true"))
        print(f"submit (accepted, queued): {1000 * (time.perf_counter() - t0) / 2:.1f} ms each")
        while (second := await s.status("j1")).state != "DONE":
            await asyncio.sleep(0.05)
        first = await s.status("j0")
        print(f"hand-over latency: {1000 * (second.started_at - first.finished_at):.0f} ms")
        await s.submit(job(2, "sleep 600"))
        cpu0, rss0 = _proc(agent.proc.pid)
        t0 = time.perf_counter()
        for i in range(3, 3 + n):
            await s.submit(job(i, "true"))
        took = time.perf_counter() - t0
        cpu1, rss1 = _proc(agent.proc.pid)
        await asyncio.sleep(5)
        cpu2, _ = _proc(agent.proc.pid)
        print(f"{n} queued: submitted in {took:.1f}s ({1000 * took / n:.1f} ms each); agent CPU {cpu1 - cpu0:.1f}s")
        print(
            f"agent memory {rss0 / 1024:.0f} MB -> {rss1 / 1024:.0f} MB; idle CPU with the queue: {(cpu2 - cpu1) / 5 * 100:.1f}%"
        )
        last = await s.status(f"j{2 + n}")
        print(f"last job: {last.state}, position {last.position}: {last.reason}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LANPOOL_HOME"] = str(Path(tmp) / "controller")
        agent = start_agent(
            Path(tmp) / "agent", Path(tmp) / "controller", extra_env={"LANPOOL_FAKE_CPUS": "1"}, verbose=False
        )
        try:
            asyncio.run(bench(agent, args.jobs))
        finally:
            agent.stop()


if __name__ == "__main__":
    main()
