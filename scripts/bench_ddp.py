"""lanpool multi-node benchmark: char-GPT DDP on 2 nodes launched by lanpool vs by hand.

Everything runs on 127.0.0.1 in a temp dir: a controller home (LANPOOL_HOME), two
real `app agent serve --host 127.0.0.1 --port 0 --no-mdns` runners, and a project
whose `chargpt` workflow has `nodes: 2`. Each repeat trains the same char-GPT twice,
in alternating order:

- lanpool: `app headless run chargpt` (gang placement on the two runners, snapshot
  upload, MASTER_ADDR/PORT and NODE_RANK from lanpool, logs streamed into SQLite);
- by hand: the same command line in two `bash -c 'set -e; ...'` processes started
  at once, each in its own copy of the project, with the env lanpool gives a node
  (MASTER_ADDR, MASTER_PORT, NODE_RANK, LANPOOL_NODE_RANK, LANPOOL_NUM_NODES,
  LANPOOL_NODES_IPS, LANPOOL_MASTER_ADDR, LANPOOL_GPUS_PER_NODE, GLOO_SOCKET_IFNAME,
  NCCL_SOCKET_IFNAME, OMP_NUM_THREADS=1, the venv first on PATH, as the agent does).

Throughput is read from the recipe's metrics (one `train_loss` point a step, each with
its wall-clock time, from rank zero): samples/s and tokens/s over the steps after
--skip-steps. "To first step" is from starting `app headless run` (or the two
processes) to the time of the first step's metric point; "to processes" is from there to
the later node's process start (the agents' journals; by hand: both Popen calls returned),
lanpool's own part of that delay without the trainers' noisy start-up. Prints figures, medians over
--repeat and the ratios; the exit code says only whether the benchmark could run.

    scripts/bench-ddp [--repeat N] [--steps S] [--skip-steps K] [--json] [--keep] [--probe]
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_stats import BenchError, children_cpu, proc_cpu, run_bench
from bench_stats import say as _say

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.harness
from tests import harness  # noqa: E402

PY = harness.venv_python()
APP = list(harness.venv_app())
RATIO_TARGET = 0.99  # lanpool samples/s over by-hand samples/s, at least
BLOCK, BATCH = 128, 32  # the recipe's defaults (4 layers x 128 dims): tokens a step per node = 4096


def say(text: str) -> None:
    _say(text, prefix="bench-ddp: ")


PROBE = Path(__file__).with_name("bench_ddp_probe.py")
PHASES = (
    "exec",
    "main",
    "torch",
    "lightning",
    "rendezvous_start",
    "rendezvous_done",
    "train_start",
    "batch0_start",
    "batch0_end",
)


def train_command(steps: int, corpus: str, probe: bool = False) -> str:
    # Validation and the snapshot happen once, after the last step: the timed window is training only.
    # --probe: the same recipe started through a script that times its start (scripts/bench_ddp_probe.py).
    start = f"python {PROBE.name}" if probe else "python -m training.chargpt"
    return (
        f"{start} train --data {corpus} --out ck --max-steps {steps} --log-every 1"
        f" --eval-every {steps} --eval-batches 2 --snapshot-every {steps} --block-size {BLOCK}"
        f" --batch-size {BATCH} --accelerator cpu --devices 1"
    )


def write_corpus(path: Path) -> str:
    """The Shakespeare corpus when scripts/fetch-data got it, else generated play-shaped text."""
    real = REPO / "data" / "shakespeare.txt"
    if real.is_file():
        shutil.copy(real, path)
        return f"data/shakespeare.txt ({real.stat().st_size // 1024} KiB)"
    rng = random.Random(0)
    words = (
        "the a my thy love night day sweet fair good lord lady heart star moon doth hath speak come go not"
        " and of to in what shall be with his her"
    ).split()
    lines = []
    while sum(map(len, lines)) < 400_000:
        lines.append(rng.choice(["ROMEO", "JULIET", "NURSE", "FRIAR"]) + ":")
        lines += [
            " ".join(rng.choice(words) for _ in range(rng.randint(4, 10))).capitalize() + "."
            for _ in range(rng.randint(1, 3))
        ]
        lines.append("")
    path.write_text("\n".join(lines))
    return "generated text (400 KB; run scripts/fetch-data for the real corpus)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_points(lines: list[str]) -> list[dict]:
    points = []
    for line in lines:
        try:
            p = json.loads(line)
        except ValueError:
            continue
        if isinstance(p, dict) and p.get("name") == "train_loss":
            points.append(p)
    return sorted(points, key=lambda p: p["step"])


def figures(points: list[dict], started: float, skip: int, nodes: int = 2) -> dict:
    """samples/s and tokens/s over the steps after `skip`, and start -> first step."""
    if len(points) < skip + 2:
        raise BenchError(f"only {len(points)} step metric points (need more than --skip-steps {skip} + 1)")
    a, b = points[skip], points[-1]
    steps, secs = b["step"] - a["step"], b["time"] - a["time"]
    samples = steps * BATCH * nodes / secs
    return {
        "samples_per_s": samples,
        "tokens_per_s": samples * BLOCK,
        "steps_timed": steps,
        "to_first_step_s": points[0]["time"] - started,
    }


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="lanpool-bench-ddp-"))
        self.home = self.tmp / "controller"
        self.env = harness.lanpool_env(self.home)
        self.agents: list[harness.AgentProc] = []
        self.running: list[subprocess.Popen] = []
        self.project = self.tmp / "project"

    # -- set-up ------------------------------------------------------------------

    def start(self) -> None:
        key = harness.controller_key(self.env, APP)
        for k in range(2):  # both start at once, then each is waited for
            data = self.tmp / f"agent{k}"
            harness.authorize_key(key, data, self.env, APP)
            self.agents.append(
                harness.spawn_agent(
                    data, self.env, name=f"bench-ddp-{k}", extra_args=["--no-mdns"], grace=3, verbose=False, app=APP
                )
            )
        for agent in self.agents:
            agent.wait_listening()
            subprocess.run(
                [*APP, "headless", "runners", "add", agent.address], env=self.env, capture_output=True, check=True
            )
        (self.project / ".lanpool").mkdir(parents=True)
        shutil.copytree(REPO / "training", self.project / "training", ignore=shutil.ignore_patterns("__pycache__"))
        self.corpus = write_corpus(self.project / "corpus.txt")
        self.command = train_command(self.args.steps, "corpus.txt", self.args.probe)
        if self.args.probe:
            shutil.copy(PROBE, self.project / PROBE.name)
        (self.project / ".lanpool" / "workflows.yaml").write_text(
            f"workflows:\n  - name: chargpt\n    nodes: 2\n    commands:\n      - {self.command}\n    artifacts: [ck]\n"
        )

    def stop(self) -> None:
        for proc in self.running:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for agent in self.agents:
            agent.stop()
        if self.args.keep:
            say(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the two launchers ---------------------------------------------------------

    def lanpool(self) -> dict:
        # Where lanpool's own CPU goes while it trains: the agents (own), the trainers
        # (the agents' children) and the `app headless run` controller (our child).
        agents0 = [proc_cpu(a.proc.pid) for a in self.agents]
        ctl0 = children_cpu()
        started = time.time()
        proc = subprocess.run(
            [*APP, "headless", "run", "chargpt"],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=self.args.timeout,
        )
        wall = time.time() - started
        agents1 = [proc_cpu(a.proc.pid) for a in self.agents]
        cpu = {
            "agents_cpu_s": sum(b[0] - a[0] for a, b in zip(agents0, agents1, strict=False)),
            "trainers_cpu_s": sum(b[1] - a[1] for a, b in zip(agents0, agents1, strict=False)),
            "controller_cpu_s": children_cpu() - ctl0,
        }
        if proc.returncode != 0:
            raise BenchError(f"app headless run exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
        run = json.loads(
            subprocess.run(
                [*APP, "headless", "status", "--json", "-n", "1", "--no-refresh"],
                env=self.env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )[0]
        job_id, run = run["jobs"][0]["job"], run["run"]
        metrics = subprocess.run(
            [*APP, "headless", "metrics", run, "--json"], env=self.env, capture_output=True, text=True, check=True
        ).stdout
        points = [p for p in json.loads(metrics) if p["name"] == "train_loss"]
        tagged = all(f"[node {k}]" in proc.stdout + proc.stderr for k in (0,)) and "[node 0] step" in proc.stdout
        if not tagged:
            raise BenchError("the run's log lacks node 0's step lines")
        ranked = sorted(points, key=lambda p: p["step"])
        workspaces = [self.tmp / f"agent{k}" / "jobs" / job_id / "workspace" for k in range(len(self.agents))]
        return {
            **figures(ranked, started, self.args.skip_steps),
            "wall_s": wall,
            "to_processes_s": self.processes_started(job_id) - started,
            **cpu,
            **self.probed(workspaces, started, ranked),
        }

    def probed(self, workspaces: list[Path], started: float, points: list[dict]) -> dict:
        """--probe: each node's start phases (s from the launch), and the first step's."""
        if not self.args.probe:
            return {}
        out: dict[str, float] = {}
        for k, w in enumerate(workspaces):
            try:
                marks = json.loads((w / "probe.json").read_text())
                for phase in PHASES:
                    out[f"node{k}_{phase}_s"] = float(marks[phase]) - started
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise BenchError(f"--probe: node {k} left no complete probe.json in {w} ({exc})") from None
            if k == 0:
                say(f"  probe node 0: {marks['executable']}, {len(marks['path'])} path entries, {marks['sched']}")
        out["first_step_s"] = points[0]["time"] - started
        # The trainers' own start (the later exec to the first step): the same program either way,
        # so lanpool vs by hand differ here only by what else the machine runs meanwhile.
        out["own_start_s"] = out["first_step_s"] - max(out[f"node{k}_exec_s"] for k in range(len(workspaces)))
        return out

    def processes_started(self, job_id: str) -> float:
        """When the later of the two nodes' processes started (each agent's journal): what lanpool
        adds before the trainers run, without their own start-up's noise."""
        times = []
        for k in range(len(self.agents)):
            record = json.loads((self.tmp / f"agent{k}" / "jobs" / job_id / "job.json").read_text())
            times.append(float(record["started_at"]))
        return max(times)

    def by_hand(self, rep: int) -> dict:
        port = free_port()
        procs, metrics = [], []
        workdirs = [self.tmp / f"hand-{rep}-node{k}" for k in range(2)]
        for w in workdirs:  # a workspace each, like a runner's
            shutil.copytree(self.project, w, ignore=shutil.ignore_patterns(".lanpool"))
        started = time.time()
        for k, w in enumerate(workdirs):
            env = dict(
                self.env,
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                NODE_RANK=str(k),
                LANPOOL_NODE_RANK=str(k),
                LANPOOL_NUM_NODES="2",
                LANPOOL_NODES_IPS="127.0.0.1,127.0.0.1",
                LANPOOL_MASTER_ADDR="127.0.0.1",
                LANPOOL_NODE_ADDR="127.0.0.1",
                LANPOOL_GPUS_PER_NODE="0",
                GLOO_SOCKET_IFNAME="lo",
                NCCL_SOCKET_IFNAME="lo",
                OMP_NUM_THREADS="1",
                LANPOOL_METRICS_FILE=str(w / "metrics.jsonl"),
                PATH=os.path.dirname(PY) + os.pathsep + os.environ.get("PATH", ""),
            )
            for name in ("LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
                env.pop(name, None)
            metrics.append(w / "metrics.jsonl")
            procs.append(
                subprocess.Popen(
                    ["bash", "-c", f"set -e\n{self.command}"],
                    cwd=w,
                    env=env,
                    stdout=open(w / "out.log", "wb"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        spawned = time.time()  # both Popen calls returned: the processes run
        self.running = procs
        try:
            for proc in procs:
                proc.wait(self.args.timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"the processes by hand ran over {self.args.timeout}s") from None
        wall = time.time() - started
        for k, proc in enumerate(procs):
            if proc.returncode != 0:
                tail = (workdirs[k] / "out.log").read_text()[-500:]
                raise BenchError(f"node {k} by hand exited {proc.returncode}: {tail}")
        self.running = []
        points = read_points(metrics[0].read_text().splitlines())
        result = {
            **figures(points, started, self.args.skip_steps),
            "wall_s": wall,
            "to_processes_s": spawned - started,
            **self.probed(workdirs, started, points),
        }
        if not self.args.keep:
            for w in workdirs:
                shutil.rmtree(w, ignore_errors=True)
        return result

    def run(self) -> dict:
        rows: dict[str, list[dict]] = {"lanpool": [], "hand": []}
        for rep in range(self.args.repeat):
            order = ["lanpool", "hand"] if rep % 2 == 0 else ["hand", "lanpool"]
            for arm in order:
                r = self.lanpool() if arm == "lanpool" else self.by_hand(rep)
                rows[arm].append(r)
                say(
                    f"repeat {rep + 1}/{self.args.repeat} {arm:7}: {r['samples_per_s']:.1f} samples/s "
                    f"({r['tokens_per_s']:.0f} tokens/s), processes after {r['to_processes_s']:.2f}s, "
                    f"first step after {r['to_first_step_s']:.2f}s, "
                    f"{r['wall_s']:.1f}s in all"
                )
        med = {arm: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for arm, rs in rows.items()}
        lp = med["lanpool"]
        say(
            f"lanpool's own processes while training (medians): agents {lp['agents_cpu_s']:.2f} CPU-s, "
            f"controller {lp['controller_cpu_s']:.2f} CPU-s, vs the trainers' {lp['trainers_cpu_s']:.1f} CPU-s "
            f"({100 * (lp['agents_cpu_s'] + lp['controller_cpu_s']) / max(lp['trainers_cpu_s'], 1e-9):.1f}%)"
        )
        return {
            "corpus": self.corpus,
            "command": self.command,
            "steps": self.args.steps,
            "skip_steps": self.args.skip_steps,
            "repeat": self.args.repeat,
            "runs": rows,
            "median": med,
            "ratio_samples_per_s": med["lanpool"]["samples_per_s"] / med["hand"]["samples_per_s"],
            "ratios_per_repeat": [
                a["samples_per_s"] / b["samples_per_s"] for a, b in zip(rows["lanpool"], rows["hand"], strict=False)
            ],
            # Each pair ran back to back (alternating which arm went first): the machine's speed, which drifts
            # by 10-30% over minutes on a shared VM, weighs on both arms of a pair alike.
            "ratio_per_pair_median": statistics.median(
                a["samples_per_s"] / b["samples_per_s"] for a, b in zip(rows["lanpool"], rows["hand"], strict=False)
            ),
            "first_step_extra_s": med["lanpool"]["to_first_step_s"] - med["hand"]["to_first_step_s"],
            "processes_extra_s": med["lanpool"]["to_processes_s"] - med["hand"]["to_processes_s"],
        }


def report(res: dict) -> None:
    def p(text: str = "") -> None:
        print(text, file=sys.stderr, flush=True)

    lp, hand = res["median"]["lanpool"], res["median"]["hand"]
    p()
    p(f"char-GPT (4 layers x 128, batch {BATCH} x {BLOCK} chars a node), 2 nodes x 1 CPU process on 127.0.0.1,")
    p(
        f"{res['steps']} steps, throughput over steps {res['skip_steps']}..{res['steps'] - 1}; corpus: {res['corpus']};"
        f" median of {res['repeat']}"
    )
    p(f"  {'':28} {'lanpool':>12} {'by hand':>12} {'ratio':>8}")
    p(
        f"  {'samples/s':28} {lp['samples_per_s']:12.1f} {hand['samples_per_s']:12.1f}"
        f" {res['ratio_samples_per_s']:8.3f}   (target >= {RATIO_TARGET})"
    )
    p(f"  {'tokens/s':28} {lp['tokens_per_s']:12.0f} {hand['tokens_per_s']:12.0f}")
    p(
        f"  {'start -> first step (s)':28} {lp['to_first_step_s']:12.2f} {hand['to_first_step_s']:12.2f}"
        f" {lp['to_first_step_s'] / hand['to_first_step_s']:8.2f}   (+{res['first_step_extra_s']:.2f}s)"
    )
    p(
        f"  {'start -> processes run (s)':28} {lp['to_processes_s']:12.2f} {hand['to_processes_s']:12.2f}"
        f" {'':8}   (+{res['processes_extra_s']:.2f}s: lanpool's part of the first step's delay)"
    )
    p(f"  {'start -> end (s)':28} {lp['wall_s']:12.1f} {hand['wall_s']:12.1f}")
    p(
        f"  ratio per repeat: {', '.join(f'{r:.3f}' for r in res['ratios_per_repeat'])}"
        f" (median {res['ratio_per_pair_median']:.3f})"
    )
    if "node0_exec_s" in lp:  # --probe: when each phase of the trainers' start ended, s from the launch
        p(f"  {'probe (s from start)':28} {'lanpool':>12} {'by hand':>12} {'extra':>8}")
        nodes = sorted({k.split("_")[0] for k in lp if k.startswith("node")})
        for key in [f"{n}_{phase}_s" for n in nodes for phase in PHASES] + ["first_step_s", "own_start_s"]:
            p(f"  {key:28} {lp[key]:12.2f} {hand[key]:12.2f} {lp[key] - hand[key]:+8.2f}")
    p(f"  command on each node: {res['command']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-ddp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each launcher (default 3; median)")
    parser.add_argument("--steps", type=int, default=60, help="training steps a run (default 60)")
    parser.add_argument("--skip-steps", type=int, default=10, help="first steps left out of throughput (default 10)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a run may take (default 600)")
    parser.add_argument("--json", action="store_true", help="also print one JSON object of all figures (stdout)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (paths printed)")
    parser.add_argument(
        "--probe", action="store_true", help="start the trainers through a script that times their start phases"
    )
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.steps < args.skip_steps + 5 or args.skip_steps < 0:
        parser.error("need --repeat >= 1 and --steps >= --skip-steps + 5")
    bench = Bench(args)

    def work() -> dict:
        bench.start()
        say(f"2 runners up; {args.repeat} x (lanpool, by hand), {args.steps} steps each")
        return bench.run()

    from bench_results import picked, recording  # docs/bench/NAME.json -> docs/benchmarks.md (scripts/bench-report)

    work = recording(
        "bench-ddp",
        work,
        lambda r: [
            picked(
                r,
                f"char-GPT on 2 nodes, samples/s via lanpool vs by hand (median of {args.repeat}, {args.steps} steps)",
                "median.lanpool.samples_per_s",
                "median.hand.samples_per_s",
                target=">= 0.99",
                unit="samples/s",
                ratio="ratio_samples_per_s",
            ),
            picked(r, "same, median of the per-pair ratios", "ratio_per_pair_median", unit="x"),
            picked(
                r,
                "start -> first training step, lanpool vs by hand",
                "median.lanpool.to_first_step_s",
                "median.hand.to_first_step_s",
                unit="s",
            ),
            picked(r, "first step, lanpool's extra", "first_step_extra_s", target="<= 0.5 s", unit="s"),
            picked(
                r,
                "start -> both nodes' processes run (agents' journals), lanpool vs by hand: lanpool's own part",
                "median.lanpool.to_processes_s",
                "median.hand.to_processes_s",
                unit="s",
            ),
        ],
    )
    # The table goes to stderr, --json or not.
    return run_bench(
        "bench-ddp", work, bench.stop, lambda res, _out: report(res), args.json, errors=(harness.AgentStartError,)
    )


if __name__ == "__main__":
    sys.exit(main())
