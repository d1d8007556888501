"""Container logs: a job printing N lines in a container vs the same program as a process
job, on one agent (auto mode: an image picks docker), alternating, ratios per pair.
Time is submit -> the last line and the final status at an attached controller. Loopback only.
    scripts/bench-container-logs [--lines N] [--pairs K] [--json]"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lanpool.app.home import ControllerHome  # noqa: E402
from lanpool.app.keys import load_or_create_client_key  # noqa: E402
from lanpool.app.runners.client import RunnerSession  # noqa: E402
from lanpool.protocol import JobStatus, LogChunk, SubmitJob  # noqa: E402
from tests.docker_harness import BUSYBOX_IMAGE, busybox_rootfs_tar, remove_agent_containers  # noqa: E402
from tests.harness import start_docker_agent  # noqa: E402


def program(n: int) -> str:
    """The same binary for both: the static busybox the test image is made of (tests/docker_harness.py)."""
    return f'busybox awk \'BEGIN {{ for (i = 1; i <= {n}; i++) print "line " i " of the container log bench" }}\''


async def one(agent, job_id: str, n: int, image: str) -> float:
    key = load_or_create_client_key(ControllerHome.default().key)
    t0 = time.perf_counter()
    async with await RunnerSession.open(agent.host, agent.port, key, None) as s:
        await s.submit(SubmitJob(job_id, "bench", "w", [program(n)], image=image))
        lines = 0
        final = None
        async for batch in s.attach(job_id, 0, True):
            for msg in batch:
                if isinstance(msg, LogChunk) and msg.stream == "out":
                    lines += msg.n_lines
                elif isinstance(msg, JobStatus):
                    final = msg
            if final is not None:
                break
    took = time.perf_counter() - t0
    if final is None or final.state != "DONE" or lines != n:
        raise SystemExit(f"{job_id}: {lines} of {n} lines, final {final}")
    return took


def ensure_image() -> None:
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=30)
    except docker.errors.DockerException as exc:
        raise SystemExit(
            f"bench-container-logs: no Docker engine answers ({exc.__class__.__name__}); as root, "
            '`eval "$(scripts/dockerd start)"` starts a private one'
        ) from None
    try:
        client.images.get(BUSYBOX_IMAGE)
    except docker.errors.ImageNotFound:
        repo, tag = BUSYBOX_IMAGE.rsplit(":", 1)
        client.api.import_image_from_data(busybox_rootfs_tar(), repository=repo, tag=tag)


def main() -> int:
    ap = argparse.ArgumentParser(prog="scripts/bench-container-logs", description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    ensure_image()
    pairs: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LANPOOL_HOME"] = str(Path(tmp) / "controller")
        agent = start_docker_agent(Path(tmp) / "agent", Path(tmp) / "controller", "--executor", "auto")
        try:
            for i in range(args.pairs):
                order = [("p", ""), ("c", BUSYBOX_IMAGE)]
                if i % 2:
                    order.reverse()  # alternate which goes first
                took = {kind: asyncio.run(one(agent, f"{kind}{i}", args.lines, image)) for kind, image in order}
                pairs.append((took["p"], took["c"]))
        finally:
            agent.stop()
            import docker

            remove_agent_containers(docker.from_env(timeout=30), Path(tmp) / "agent")
    ratios = [c / p for p, c in pairs]
    res = {
        "lines": args.lines,
        "process_s": [round(p, 2) for p, _ in pairs],
        "container_s": [round(c, 2) for _, c in pairs],
        "ratio_median": round(statistics.median(ratios), 2),
        "load": os.getloadavg()[0],
    }
    if args.json:
        print(json.dumps(res))
    else:
        for (p, c), r in zip(pairs, ratios, strict=True):
            print(f"{args.lines} lines: process job {p:.2f} s, container job {c:.2f} s, ratio {r:.2f}")
        print(f"median ratio container/process: {res['ratio_median']:.2f} (target <= 2); load {res['load']:.1f}")
    # docs/bench/bench-container-logs.json -> docs/benchmarks.md (scripts/bench-report)
    from bench_results import record, row

    record(
        "bench-container-logs",
        [
            row(
                f"container job printing {args.lines:,} lines vs the same program as a process job (median of pairs)",
                statistics.median(c for _, c in pairs),
                statistics.median(p for p, _ in pairs),
                target="<= 2",
                unit="s",
                ratio=res["ratio_median"],
            ),
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
