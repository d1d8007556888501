"""lanpool on Slurm: `echo` end to end through an agent with --executor slurm against `srun`
directly (alternating, same cluster: the dispatch ratio), and log latency (print -> the
controller's attach). Needs the private cluster: scripts/slurm up netns 2 (root).
    scripts/bench-slurm [--rounds N]"""

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
from protocol import JobStatus, LogChunk, SubmitJob  # noqa: E402
from tests.harness import start_agent  # noqa: E402

CONF = os.environ.get("SLURM_CONF", "/tmp/lanpool-slurm/etc/slurm.conf")


async def lanpool_echo(s: RunnerSession, job_id: str) -> float:
    t0 = time.perf_counter()
    await s.submit(SubmitJob(job_id, "r", "w", ["echo hi"]))
    while (await s.status(job_id)).state not in ("DONE", "FAILED"):
        await asyncio.sleep(0.02)
    return time.perf_counter() - t0


def srun_echo() -> float:
    t0 = time.perf_counter()
    subprocess.run(
        ["srun", "-N1", "echo", "hi"], check=True, capture_output=True, env={**os.environ, "SLURM_CONF": CONF}
    )
    return time.perf_counter() - t0


def sbatch_echo(out: Path) -> float:
    """sbatch by hand, polled until Slurm says it ended (as a script would without --wait)."""
    env = {**os.environ, "SLURM_CONF": CONF}
    t0 = time.perf_counter()
    job = subprocess.run(
        ["sbatch", "--parsable", f"--output={out}", "--wrap", "echo hi"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()
    while subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, env=env
    ).stdout.strip():
        time.sleep(0.02)
    return time.perf_counter() - t0


async def log_latency(s: RunnerSession, n: int) -> list[float]:
    code = f"import time\nfor _ in range({n}):\n    print(time.time(), flush=True)\n    time.sleep(0.2)"
    await s.submit(SubmitJob("lat", "r", "w", [f"{sys.executable} -c '{code}'"]))
    delays = []
    async for batch in s.attach("lat", 0, True):
        now = time.time()
        for msg in batch:
            if isinstance(msg, LogChunk) and msg.stream == "out":
                delays += [now - float(line) for line in msg.data.decode().split()]
            elif isinstance(msg, JobStatus):
                return delays
    return delays


async def bench(agent, rounds: int) -> None:
    key = load_or_create_client_key(ControllerHome.default().key)
    async with await RunnerSession.open(agent.host, agent.port, key, None) as s:
        ours, theirs, batch = [], [], []
        for i in range(rounds):  # alternating, so load affects all three
            ours.append(await lanpool_echo(s, f"e{i}"))
            theirs.append(await asyncio.to_thread(srun_echo))
            batch.append(await asyncio.to_thread(sbatch_echo, Path(tempfile.gettempdir()) / f"bench-sbatch-{i}.out"))
        mo, mt, mb = (statistics.median(x) for x in (ours, theirs, batch))
        print(
            f"echo, median of {rounds}: lanpool-on-Slurm {mo * 1000:.0f} ms, srun {mt * 1000:.0f} ms "
            f"(ratio {mo / mt:.2f}), sbatch + squeue poll by hand {mb * 1000:.0f} ms (ratio {mo / mb:.2f})"
        )
        delays = sorted(await log_latency(s, 25))
        print(
            f"log latency print -> controller: median {statistics.median(delays) * 1000:.0f} ms, max {delays[-1] * 1000:.0f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LANPOOL_HOME"] = str(Path(tmp) / "ctl")
        agent = start_agent(
            Path(tmp) / "agent",
            Path(tmp) / "ctl",
            extra_args=("--executor", "slurm"),
            extra_env={"SLURM_CONF": CONF},
        )
        try:
            asyncio.run(bench(agent, args.rounds))
        finally:
            agent.stop()


if __name__ == "__main__":
    main()
