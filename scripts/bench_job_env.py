"""A process job's Python environment made with the base's framework held (agent/python/job_envs.py:
the pins read from the base's dist-info names once, a constraints file and PIP_CONSTRAINT in each env) against the
same env made without holding (`hold_base: false`), alternating in the same run. Two figures: the
first env of a runner (venv run, the pins probe) and the next ones (written from the kept shape,
the pins from memory). Figures go to docs/bench/bench-job-env.json (scripts/bench-report).
    scripts/bench-job-env [--rounds R]"""

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lanpool.agent.executors  # noqa: E402,F401  (job_envs is imported through the executors)
from lanpool.agent.python.interpreters import Pythons  # noqa: E402
from lanpool.agent.python.job_envs import JobPythons  # noqa: E402


async def _envs(root: Path, pythons: Pythons, hold: bool, later: int) -> tuple[float, float]:
    """Seconds for a new runner's first env, and the median of its next `later` envs."""
    job_pythons = JobPythons(pythons, None)  # a runner just started: nothing kept yet
    workspace = root / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    times = []
    for k in range(1 + later):
        t0 = time.perf_counter()
        await job_pythons.prepare(root / f"env{k}", workspace, workspace, "", "", lambda *_: None, hold)
        times.append(time.perf_counter() - t0)
        shutil.rmtree(root / f"env{k}")
    rest = sorted(times[1:])
    return times[0], rest[len(rest) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(prog="scripts/bench-job-env", allow_abbrev=False)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each (default 5)")
    parser.add_argument("--later", type=int, default=9, help="envs after the first in a round (default 9)")
    args = parser.parse_args()
    pythons = Pythons.discover()
    firsts: dict[bool, list[float]] = {True: [], False: []}
    nexts: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="lanpool-bench-job-env-") as tmp:
        for r in range(args.rounds):
            for hold in (True, False) if r % 2 == 0 else (False, True):
                first, later = asyncio.run(_envs(Path(tmp) / f"{r}-{hold}", pythons, hold, args.later))
                firsts[hold].append(first)
                nexts[hold].append(later)

    def med(values: list[float]) -> float:
        return sorted(values)[len(values) // 2] * 1000

    pins = JobPythons(pythons, None).pins(pythons.base)
    print(
        f"a job's env on python {pythons.base.version}, holding {len(pins)} packages; median of {args.rounds} rounds:"
    )
    print(f"  first env of a runner: held {med(firsts[True]):.1f} ms, not held {med(firsts[False]):.1f} ms")
    print(f"  next envs:             held {med(nexts[True]):.2f} ms, not held {med(nexts[False]):.2f} ms")
    from bench_results import record, row

    record(
        "bench-job-env",
        [
            row(
                "first job env of a runner, held vs not",
                round(med(firsts[True]), 1),
                round(med(firsts[False]), 1),
                unit="ms",
            ),
            row("each later job env, held vs not", round(med(nexts[True]), 2), round(med(nexts[False]), 2), unit="ms"),
        ],
    )


if __name__ == "__main__":
    main()
