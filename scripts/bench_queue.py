"""The runner's queue: `run -d`-like submit latency, hand-over latency (first job ends ->
second starts), the agent's CPU and memory with N queued jobs, and `run -d` of a
3-step DAG and of a 2-node gang to the prompt (the real CLI; a 1-job `run -d`
alternated with each as the baseline, so the machine's load weighs on both alike).
Loopback only. Figures go to docs/bench/bench-queue.json (scripts/bench-report).
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

from lanpool.app.home import ControllerHome  # noqa: E402
from lanpool.app.keys import load_or_create_client_key  # noqa: E402
from lanpool.app.runners.client import RunnerSession  # noqa: E402
from lanpool.protocol import SubmitJob  # noqa: E402
from tests.harness import APP_MODULE, authorize_key, controller_key, lanpool_env, start_agent, write_project  # noqa: E402

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
GANG = """
workflows:
  - name: pair
    nodes: 2
    commands: ["echo rank $NODE_RANK"]
  - name: solo
    commands: ["echo solo"]
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


async def bench(agent, n: int) -> dict:
    key = load_or_create_client_key(ControllerHome.default().key)
    async with await RunnerSession.open(agent.host, agent.port, key, None) as s:
        job = lambda i, cmd: SubmitJob(f"j{i}", "r", "w", [cmd], resources={"cpu": 1})  # noqa: E731
        t0 = time.perf_counter()
        await s.submit(job(0, "sleep 1"))
        await s.submit(job(1, "true"))
        submit_ms = 1000 * (time.perf_counter() - t0) / 2
        print(f"submit (accepted, queued): {submit_ms:.1f} ms each")
        for i in range(2, 8):  # a short line: each ends, the next starts
            await s.submit(SubmitJob(f"h{i}", "r", "w", ["true"], resources={"cpu": 1}))
        while (await s.status("h7")).state != "DONE":
            await asyncio.sleep(0.05)
        chain = [await s.status(j) for j in ("j0", "j1", *(f"h{i}" for i in range(2, 8)))]
        handover_ms = _median_gap(chain)
        print(f"hand-over latency (median of {len(chain) - 1}): {handover_ms:.0f} ms")
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
    return {
        "submit_ms": round(submit_ms, 1),
        "handover_ms": round(handover_ms),
        "queued_each_ms": round(1000 * took / n, 1),
        "rss_mb": (round(rss0 / 1024), round(rss1 / 1024)),
        "idle_cpu_pct": round((cpu2 - cpu1) / 5 * 100, 1),
    }


def _median_gap(chain: list) -> float:
    """The median time (ms) between a job's end and the next one's start, in start order."""
    ran = sorted((j for j in chain if j.started_at and j.finished_at), key=lambda j: j.started_at)
    return statistics.median(1000 * (b.started_at - a.finished_at) for a, b in zip(ran, ran[1:], strict=False))


async def fair_turns(agent, keys: list, n: int) -> dict:
    """Fair turns (agent/jobs/turns.py): `n` jobs queued by len(keys) owners behind a holder, each
    submit timed; then the hand-over when the holder ends, with all of them in line."""
    sessions = [await RunnerSession.open(agent.host, agent.port, key, None) for key in keys]
    try:
        job = lambda i, cmd: SubmitJob(f"f{i}", "r", "w", [cmd], resources={"cpu": 1}, detached=True)  # noqa: E731
        await sessions[0].submit(job(0, "sleep 600"))  # holds the runner until all are in line
        per_owner = n // len(sessions)
        t0 = time.perf_counter()
        for k in range(per_owner):  # the owners' submits interleave, as people's do
            for o, s in enumerate(sessions):
                await s.submit(job(1 + o * per_owner + k, "true"))
        took = time.perf_counter() - t0
        # The holder ends, then each job in turn ("true": it ends at once): the first rounds' hand-overs,
        # with the rest of the thousand still in line (and no submit arriving meanwhile).
        await sessions[0].stop("f0", True, 0)
        firsts = [(o, 1 + o * per_owner + k) for k in range(3) for o in range(len(sessions))]
        while (await sessions[firsts[-1][0]].status(f"f{firsts[-1][1]}")).state not in ("DONE", "FAILED"):
            await asyncio.sleep(0.05)
        chain = [await sessions[0].status("f0")] + [await sessions[o].status(f"f{i}") for o, i in firsts]
        handover_ms = _median_gap(chain)
        print(
            f"{n} queued of {len(sessions)} owners: {1000 * took / n:.1f} ms a submit; "
            f"hand-over (median of {len(chain) - 1}) {handover_ms:.0f} ms"
        )
        return {"queued_each_ms": round(1000 * took / n, 1), "handover_ms": round(handover_ms)}
    finally:
        for s in sessions:
            s.close()


def _prompt(agents: list, home: Path, project: Path, rounds: int, it: str, baseline: str) -> tuple[float, float]:
    """Median seconds from `run -d` to the prompt of workflow `it` and of `baseline` (one job),
    alternated, so the machine's load weighs on both alike (no step reusable: --no-cache)."""
    env = lanpool_env(home)
    # Bytecode cached as in any install (as scripts/bench.py does): with PYTHONDONTWRITEBYTECODE
    # set here, every `run` would compile lanpool's sources again, which no user's `run` does.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(home.parent / "pycache")

    def app(*args: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([*APP_MODULE, *args], cwd=project, env=env, check=True, capture_output=True, timeout=120)
        return time.perf_counter() - t0

    for agent in agents:
        app("headless", "runners", "add", agent.address)
    measured: list[float] = []
    single: list[float] = []
    for _ in range(rounds):
        measured.append(app("headless", "run", it, "-d", "--no-cache"))
        single.append(app("headless", "run", baseline, "-d", "--no-cache"))
    m, o = statistics.median(measured), statistics.median(single)
    print(f"run -d to the prompt, median of {rounds}: {it} {m:.2f}s, one job {o:.2f}s (ratio {m / o:.2f})")
    return m, o


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--dag-rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        os.environ["LANPOOL_HOME"] = str(tmp / "controller")
        room = ["--max-queued-per-owner", str(args.jobs + 10)]  # the default (100) bounds one person's line
        agent = start_agent(
            tmp / "agent", tmp / "controller", extra_env={"LANPOOL_FAKE_CPUS": "1"}, extra_args=room, verbose=False
        )
        try:
            queue = asyncio.run(bench(agent, args.jobs))
        finally:
            agent.stop()
        # Ten people on one runner: ten controller keys, each authorized with a label.
        homes = [tmp / f"owner{k}" for k in range(10)]
        agent = start_agent(
            tmp / "agent-fair", homes[0], extra_env={"LANPOOL_FAKE_CPUS": "1"}, extra_args=room, verbose=False
        )
        try:
            keys = []
            for home in homes:
                env = lanpool_env(home)
                authorize_key(controller_key(env), agent.data_dir, env)
                keys.append(load_or_create_client_key(ControllerHome(home).key))
            fair = asyncio.run(fair_turns(agent, keys, args.jobs))
        finally:
            agent.stop()
        agent = start_agent(tmp / "agent2", tmp / "controller", verbose=False)
        try:
            dag = _prompt([agent], tmp / "controller", write_project(tmp / "dag", DAG), args.dag_rounds, "three", "one")
        finally:
            agent.stop()
        home = tmp / "gang-controller"
        os.environ["LANPOOL_HOME"] = str(home)
        agents = [start_agent(tmp / f"node{k}", home, name=f"node-{k}", verbose=False) for k in range(2)]
        try:
            gang = _prompt(agents, home, write_project(tmp / "gang", GANG), args.dag_rounds, "pair", "solo")
        finally:
            for agent in agents:
                agent.stop()

    from bench_results import record, row  # docs/bench/NAME.json -> docs/benchmarks.md (scripts/bench-report)

    rss0, rss1 = queue["rss_mb"]
    record(
        "bench-queue",
        [
            row("submit to a runner's queue", queue["submit_ms"], target="< 500 ms", unit="ms"),
            row("hand-over (room frees -> next job starts)", queue["handover_ms"], target="< 1000 ms", unit="ms"),
            row(f"{args.jobs:,} queued jobs, submit each", queue["queued_each_ms"], unit="ms"),
            row(
                f"{args.jobs:,} queued jobs of 10 owners (fair turns), submit each (baseline: one owner)",
                fair["queued_each_ms"],
                queue["queued_each_ms"],
                target="<= 2x",
                unit="ms",
            ),
            row(
                f"hand-over with {args.jobs:,} queued jobs of 10 owners (baseline: an empty queue)",
                fair["handover_ms"],
                queue["handover_ms"],
                target="<= 2x",
                unit="ms",
            ),
            row(f"agent RSS with {args.jobs:,} queued jobs (before: baseline)", rss1, rss0, unit="MB"),
            row(f"agent idle CPU with {args.jobs:,} queued jobs", queue["idle_cpu_pct"], unit="%"),
            row("`run -d` of a 3-step DAG to the prompt, vs one job", round(dag[0], 2), round(dag[1], 2), unit="s"),
            row("`run -d` of a 2-node gang to the prompt, vs one job", round(gang[0], 2), round(gang[1], 2), unit="s"),
            row("`run -d` of a 2-node gang to the prompt", round(gang[0], 2), target="< 0.5 s", unit="s"),
            row("`run -d` of a 3-step DAG to the prompt", round(dag[0], 2), target="< 0.5 s", unit="s"),
            row("`run -d` of one job to the prompt", round(dag[1], 2), target="< 0.5 s", unit="s"),
        ],
    )


if __name__ == "__main__":
    main()
