"""lanpool on Slurm: `echo` end to end through an agent with --executor slurm against `srun`
directly (alternating, same cluster: the dispatch ratio), log latency (print -> the
controller's attach), and char-GPT DDP on 2 nodes (a tiny config, CPU) through lanpool
(one job, resources nodes: 2) against `srun -N2` by hand (Lightning's own Slurm wiring),
alternating: samples/s of the steps after the first interval, and wall time.
Needs the private cluster: scripts/slurm up netns 2 (root).
    scripts/bench-slurm [--rounds N] [--gpt-rounds N] [--gpt-steps N]"""

import argparse
import asyncio
import os
import re
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
from lanpool.protocol import JobStatus, LogChunk, SubmitJob  # noqa: E402
from tests.harness import start_agent  # noqa: E402

CONF = os.environ.get("SLURM_CONF", "/tmp/lanpool-slurm/etc/slurm.conf")
REPO = Path(__file__).resolve().parent.parent
BLOCK = 32  # tokens per sample in the tiny config below
_RATE = re.compile(r"step (\d+) train_loss \S+ tokens/s (\d+)")


def gpt_command(data: Path, steps: int) -> list[str]:
    return [
        sys.executable, "-m", "training.chargpt", "train", "--data", str(data), "--out", "ck",
        "--max-steps", str(steps), "--log-every", "10", "--eval-every", "100000", "--snapshot-every", "100000",
        "--block-size", str(BLOCK), "--batch-size", "16", "--n-layer", "2", "--n-head", "2", "--n-embd", "32",
        "--accelerator", "cpu", "--devices", "1", "--num-nodes", "2",
    ]  # fmt: skip


def samples_per_s(text: str) -> float:
    """Samples/s over the intervals after the first (start-up): the harmonic mean of the
    per-interval rates, i.e. samples over time. 0 when the run printed none."""
    rates = [int(m.group(2)) for m in _RATE.finditer(text)][1:]
    return len(rates) / sum(1 / r for r in rates) / BLOCK if rates and all(rates) else 0.0


async def lanpool_gpt(s: RunnerSession, job_id: str, data: Path, steps: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    cmd = " ".join(gpt_command(data, steps))
    env = {"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    await s.submit(SubmitJob(job_id, "r", "w", [cmd], env=env, resources={"nodes": 2}))
    out = []
    async for batch in s.attach(job_id, 0, True):
        for msg in batch:
            if isinstance(msg, LogChunk) and msg.stream == "out":
                out.append(msg.data.decode(errors="replace"))
            elif isinstance(msg, JobStatus):
                if msg.state != "DONE":
                    raise SystemExit(f"lanpool char-GPT job ended {msg.state}: {msg.error}")
                return samples_per_s("".join(out)), time.perf_counter() - t0
    raise SystemExit("lanpool char-GPT job: the attach ended without its status")


def srun_gpt(data: Path, steps: int) -> tuple[float, float]:
    """By hand: srun -N2, one task per node, Lightning's SLURMEnvironment doing the wiring.
    One thread per process, as lanpool sets for a multi-node job (both nodes share these cores)."""
    env = {**os.environ, "SLURM_CONF": CONF, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    done = subprocess.run(
        ["srun", "-N2", "--ntasks-per-node=1", f"--chdir={data.parent}", *gpt_command(data, steps)],
        capture_output=True,
        text=True,
        env=env,
    )
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"srun char-GPT failed: {done.stderr.strip()[-500:]}")
    return samples_per_s(done.stdout), took


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


async def bench(agent, rounds: int, gpt_rounds: int, gpt_steps: int, data: Path) -> dict:
    """Prints the figures as they come; returns them (recorded at the end of main)."""
    res: dict = {"rounds": rounds, "gpt_rounds": gpt_rounds, "gpt_steps": gpt_steps}
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
        res["echo_s"] = {"lanpool": mo, "srun": mt, "sbatch": mb}
        delays = sorted(await log_latency(s, 25))
        res["log_latency_s"] = {"median": statistics.median(delays), "max": delays[-1]}
        print(
            f"log latency print -> controller: median {statistics.median(delays) * 1000:.0f} ms, max {delays[-1] * 1000:.0f} ms"
        )
        if gpt_rounds <= 0:
            return res
        gpt_ours, gpt_theirs = [], []
        for i in range(gpt_rounds):  # alternating, which goes first too (load drifts within a round)
            if i % 2:
                gpt_theirs.append(await asyncio.to_thread(srun_gpt, data, gpt_steps))
            gpt_ours.append(await lanpool_gpt(s, f"gpt{i}", data, gpt_steps))
            if not i % 2:
                gpt_theirs.append(await asyncio.to_thread(srun_gpt, data, gpt_steps))
            (so, wo), (st, wt) = gpt_ours[-1], gpt_theirs[-1]
            print(
                f"  char-GPT round {i + 1}: lanpool {so:.0f} samples/s, {wo:.1f} s; srun {st:.0f} samples/s, {wt:.1f} s"
            )
        so, st = (statistics.median(r[0] for r in x) for x in (gpt_ours, gpt_theirs))
        wo, wt = (statistics.median(r[1] for r in x) for x in (gpt_ours, gpt_theirs))
        print(
            f"char-GPT 2 nodes, {gpt_steps} steps, median of {gpt_rounds}: lanpool-on-Slurm {so:.0f} samples/s, "
            f"srun by hand {st:.0f} samples/s (ratio {so / st:.3f}); wall {wo:.1f} s vs {wt:.1f} s"
        )
        res["gpt"] = {"lanpool_sps": so, "srun_sps": st, "lanpool_wall_s": wo, "srun_wall_s": wt}
    return res


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--gpt-rounds", type=int, default=2, help="0: no char-GPT")
    parser.add_argument("--gpt-steps", type=int, default=150)
    args = parser.parse_args()
    # On storage both nodes see: the corpus, and srun's working dir.
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        from tests.system.test_training_chargpt import write_corpus

        (Path(tmp) / "gpt").mkdir()
        data = write_corpus(Path(tmp) / "gpt" / "corpus.txt", 20_000)
        os.environ["LANPOOL_HOME"] = str(Path(tmp) / "ctl")
        agent = start_agent(
            Path(tmp) / "agent",
            Path(tmp) / "ctl",
            extra_args=("--executor", "slurm"),
            extra_env={"SLURM_CONF": CONF},
        )
        try:
            res = asyncio.run(bench(agent, args.rounds, args.gpt_rounds, args.gpt_steps, data))
        finally:
            agent.stop()

    from bench_results import picked, record  # docs/bench/NAME.json -> docs/benchmarks.md (scripts/bench-report)

    rounds, gpt = f"median of {args.rounds}", f"2 nodes, {args.gpt_steps} steps, median of {args.gpt_rounds}"
    record(
        "bench-slurm",
        [
            picked(res, f"`echo` through lanpool-on-Slurm vs `srun` ({rounds})", "echo_s.lanpool",
                   "echo_s.srun", unit="s"),
            picked(res, f"`echo` through lanpool-on-Slurm vs `sbatch` + `squeue` polled by hand ({rounds})",
                   "echo_s.lanpool", "echo_s.sbatch", unit="s"),
            picked(res, "log latency, print -> controller (median of 25)", "log_latency_s.median", unit="s"),
            picked(res, "log latency, print -> controller (max of 25)", "log_latency_s.max", unit="s"),
            picked(res, f"char-GPT DDP samples/s through lanpool-on-Slurm vs `srun -N2` by hand ({gpt})",
                   "gpt.lanpool_sps", "gpt.srun_sps", target=">= 0.97", unit="samples/s"),
            picked(res, f"char-GPT DDP wall time, lanpool-on-Slurm vs `srun -N2` by hand ({gpt})",
                   "gpt.lanpool_wall_s", "gpt.srun_wall_s", unit="s"),
        ],
    )  # fmt: skip


if __name__ == "__main__":
    main()
