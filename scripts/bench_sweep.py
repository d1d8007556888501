"""Sweeps on 127.0.0.1: the time from `run -d --sweep` of N points to all of them sent, against N
one-job `run -d` processes (what a user loops over in the shell: the baseline, measured in the
same run); and `compare` of a sweep of N jobs with M metric points each, against `status` of the
same run (a read of the same store by the same CLI: the floor of any verb).
    scripts/bench-sweep [--record] [--points 100] [--baseline-runs 20] [--metric-points 10000]"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lanpool.app.store import Store  # noqa: E402
from tests.harness import APP_MODULE, lanpool_env, start_agent, stored_jobs, write_project  # noqa: E402

WORKFLOWS = """
workflows:
  - name: point
    resources: {gpu: 1}
    commands: ["sleep 600"]
"""


def _app(env: dict[str, str], cwd: Path, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run([*APP_MODULE, "headless", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - start


def submit(points: int, baseline_runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="lanpool-bench-sweep-") as tmp:
        base = Path(tmp)
        home = base / "home"
        # One GPU (faked: this figure is the controller's and the queue's), so one point runs and
        # the others wait in the runner's queue, as on a busy pool.
        agent = start_agent(
            base / "agent",
            home,
            extra_env={"LANPOOL_FAKE_GPUS": "0"},
            extra_args=("--max-queued-per-controller", str(points + baseline_runs + 10)),
        )
        env = lanpool_env(home)
        project = write_project(
            base / "project", WORKFLOWS, {".lanpool/variables.yaml": "variables:\n  point:\n    x: 0\n"}
        )
        try:
            _app(env, project, "runners", "add", agent.address)
            values = ",".join(str(k) for k in range(points))
            sweep_s = _app(env, project, "run", "-d", "--name", "sweep", "point", "--sweep", f"x={values}")
            sent = [j for j in stored_jobs(home) if j["run_name"] == "sweep"]
            if (
                len(sent) != points
                or {j["runner"] for j in sent} != {agent.name}
                or any(j["status"] in ("FAILED", "ABORTED", "LOST") for j in sent)
            ):
                raise SystemExit(f"bench-sweep: {len(sent)} of {points} points reached the runner")
            single = [_app(env, project, "run", "-d", "point", "--x", str(points + k)) for k in range(baseline_runs)]
            subprocess.run(
                [*APP_MODULE, "headless", "stop", "--all", "--yes", "--grace", "0"], env=env, capture_output=True
            )
        finally:
            agent.stop()
    return {
        "sweep_s": round(sweep_s, 2),
        "per_point_ms": round(sweep_s / points * 1000, 1),
        "run_d_ms": round(statistics.median(single) * 1000, 1),
    }


def compare(jobs: int, metric_points: int, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="lanpool-bench-compare-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        store = Store(home / "lanpool.db")
        store.create_run("sweep", "train", "/proj", variables={"lr": [str(k) for k in range(jobs)]})
        runner = {"name": "r", "host": "127.0.0.1", "port": 1}
        for k in range(jobs):
            job_id = f"{k:012x}"
            store.create_job(job_id, "sweep", "train", runner, {}, cache_inputs={"variables": {"lr": str(k), "b": 1}})
            chunks, chunk = [], 1000
            for start in range(0, metric_points, chunk):
                lines = "".join(
                    json.dumps({"step": s, "name": "val_loss" if s % 2 else "train_loss", "value": 1 / (s + k + 1)})
                    + "\n"
                    for s in range(start, min(start + chunk, metric_points))
                )
                chunks.append((job_id, 0, start, min(chunk, metric_points - start), "met", lines.encode()))
            store.add_log_chunks(chunks)
            store.conn.execute("UPDATE jobs SET status = 'DONE', synced = 1, exit_code = 0 WHERE id = ?", (job_id,))
        store.close()
        env = lanpool_env(home)
        cwd = Path(tmp)
        took, floor = [], []
        for _ in range(repeat):  # alternated: the machine's load weighs on both alike
            took.append(_app(env, cwd, "compare", "sweep", "--sort", "val_loss", "--json"))
            floor.append(_app(env, cwd, "status", "sweep", "--no-refresh"))
    return {"compare_s": round(statistics.median(took), 3), "status_s": round(statistics.median(floor), 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100)
    parser.add_argument("--baseline-runs", type=int, default=20)
    parser.add_argument("--metric-points", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sent = submit(args.points, args.baseline_runs)
    print(
        f"run -d --sweep of {args.points} points: all sent in {sent['sweep_s']} s "
        f"({sent['per_point_ms']} ms a point); one-job run -d: {sent['run_d_ms']} ms "
        f"(ratio {sent['per_point_ms'] / sent['run_d_ms']:.2f}x a point)"
    )
    read = compare(args.points, args.metric_points, args.repeat)
    print(
        f"compare of {args.points} jobs x {args.metric_points} metric points: {read['compare_s']} s "
        f"(median of {args.repeat}); status of the same run: {read['status_s']} s"
    )
    from bench_results import record, row

    record(
        "bench-sweep",
        [
            row(f"run -d --sweep, {args.points} points: all sent", sent["sweep_s"], target="<= 5 s", unit="s"),
            row("per point vs a one-job run -d", sent["per_point_ms"], sent["run_d_ms"], unit="ms"),
            row(
                f"compare, {args.points} jobs x {args.metric_points} points, vs status",
                read["compare_s"],
                read["status_s"],
                target="< 0.5 s",
                unit="s",
            ),
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
