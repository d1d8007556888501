"""The runner's queue: `run -d`-like submit latency, hand-over latency (first job ends ->
second starts), the agent's CPU and memory with N queued jobs, and `run -d` of a
3-step DAG to the prompt (the real CLI; a 1-job `run -d` alternated with it as the
baseline, so the machine's load weighs on both). Loopback only.
    scripts/bench-queue [--jobs N] [--dag-rounds R]"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.home import ControllerHome  # noqa: E402
from app.keys import load_or_create_client_key  # noqa: E402
from app.runner_client import RunnerSession  # noqa: E402
from protocol import SubmitJob  # noqa: E402
from tests.harness import APP_MODULE, lanpool_env, start_agent, write_project  # noqa: E402

DAG = """
workflows:
  - name: one
    commands: ["echo 1 > one.txt"]
    artifacts: [one.txt]
  - name: two
    depends-on: [one]
    commands: ["cat one.txt > two.txt"]
    artifacts: [two.txt]
  - name: three
    depends-on: [two]
    commands: ["cat two.txt"]
"""


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


def bench_dag(agent, home: Path, project: Path, rounds: int) -> None:
    """Seconds from `run -d` to the prompt: a 3-step DAG (no step reusable: --no-cache) and one job."""
    env = lanpool_env(home)

    def app(*args: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([*APP_MODULE, *args], cwd=project, env=env, check=True, capture_output=True, timeout=120)
        return time.perf_counter() - t0

    app("headless", "runners", "add", agent.address)
    dag: list[float] = []
    single: list[float] = []
    for _ in range(rounds):  # alternated, so the machine's load weighs on both alike
        dag.append(app("headless", "run", "three", "-d", "--no-cache"))
        single.append(app("headless", "run", "one", "-d", "--no-cache"))
    d, o = statistics.median(dag), statistics.median(single)
    print(f"run -d to the prompt, median of {rounds}: 3-step DAG {d:.2f}s, one job {o:.2f}s (ratio {d / o:.2f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--dag-rounds", type=int, default=5)
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
        agent = start_agent(Path(tmp) / "agent2", Path(tmp) / "controller", verbose=False)
        try:
            bench_dag(agent, Path(tmp) / "controller", write_project(Path(tmp) / "project", DAG), args.dag_rounds)
        finally:
            agent.stop()


if __name__ == "__main__":
    main()
