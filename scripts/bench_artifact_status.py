"""A job's status when it left many artifact files: how long it stalls the agent's event loop.

In-process, on one loop with a heartbeat (a 1 ms sleep, its longest overshoot is the stall), the
status of a job of N files (a real job's list, from a real agent) made three ways:
  before  the whole list built and encoded on the loop (the code before issue #31, kept here);
  paged   what a controller that reads pages gets: STATUS_ARTIFACTS files, made in a thread;
  whole   what an older controller gets: the whole list, made in a thread.
Then against that agent: the longest ping round trip on a second connection while the first asks
for statuses (paged, then whole), and the time a controller takes to read the whole list in pages.
Loopback only. Figures go to docs/bench/bench-artifact-status.json (scripts/bench-report).
    scripts/bench-artifact-status [--files N] [--rounds R]"""

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncssh  # noqa: E402

from lanpool.agent.jobs.journal import JobRecord  # noqa: E402
from lanpool.agent.ssh.session import _status_frame  # noqa: E402  (what the agent runs in its thread)
from lanpool.app.home import ControllerHome  # noqa: E402
from lanpool.app.keys import load_or_create_client_key  # noqa: E402
from lanpool.app.runners.client import RunnerSession  # noqa: E402
from lanpool.app.transfer.pull import whole_list  # noqa: E402
from lanpool.protocol import (  # noqa: E402
    PROTOCOL_VERSION,
    ArtifactFile,
    ClientHello,
    GetStatus,
    Hello,
    JobStatus,
    Ping,
    SubmitJob,
    encode_message,
)
from lanpool.protocol.messages import STATUS_ARTIFACTS  # noqa: E402
from tests.harness import start_agent  # noqa: E402
from tests.raw_channel import RawChannel  # noqa: E402


def make_files(workspace: Path, n: int) -> None:
    """`n` empty files under the job's out/, 1,000 to a directory (made here: a job in the
    runner's sandbox takes several times as long to make them)."""
    for i in range(n):
        where = workspace / f"out/d{i // 1000:04d}"
        if i % 1000 == 0:
            where.mkdir(parents=True)
        os.close(os.open(where / f"f{i % 1000:04d}", os.O_CREAT | os.O_WRONLY, 0o644))


def before_frame(record: JobRecord) -> bytes:
    """The status as the agent made it before: every file an ArtifactFile, encoded, on the loop."""
    status = JobStatus(
        job_id=record.job_id,
        state=str(record.state),
        exit_code=record.exit_code,
        finished_at=record.finished_at,
        log_lines=1,
        artifacts=[ArtifactFile(**f) for f in record.artifact_files],
    )
    return encode_message(status)


async def stall(work: Callable[[], Awaitable[object]], rounds: int) -> tuple[float, float]:
    """(longest loop stall, median time of one `work`), in seconds, over `rounds` runs."""
    gaps: list[float] = []
    stop = asyncio.Event()

    async def heartbeat() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            gaps.append(time.perf_counter() - t - 0.001)

    beat = asyncio.ensure_future(heartbeat())
    await asyncio.sleep(0.05)
    took = []
    for _ in range(rounds):
        t = time.perf_counter()
        await work()
        took.append(time.perf_counter() - t)
        await asyncio.sleep(0.05)
    stop.set()
    await beat
    return max(gaps), statistics.median(took)


async def in_process(record: JobRecord, rounds: int) -> dict:
    files = record.artifact_files
    head = record.to_status(1, 0, 0)

    async def before() -> object:
        return before_frame(record)

    async def paged() -> object:
        return await asyncio.to_thread(_status_frame, record.to_status(1, 0, 0), files, 0, STATUS_ARTIFACTS)

    async def whole() -> object:
        return await asyncio.to_thread(_status_frame, head, files, 0, None)

    out = {}
    for name, work in (("before", before), ("paged", paged), ("whole", whole)):
        out[name] = await stall(work, rounds)
        print(f"{name:>6}: longest loop stall {out[name][0] * 1000:7.1f} ms, one status {out[name][1] * 1000:7.1f} ms")
    out["bytes"] = {
        "whole": len(before_frame(record)),
        "paged": len(_status_frame(head, files, 0, STATUS_ARTIFACTS)),
    }
    return out


async def raw(host: str, port: int, key: asyncssh.SSHKey) -> tuple[asyncssh.SSHClientConnection, RawChannel]:
    """A channel of an older controller: its ClientHello names no ARTIFACT_PAGES."""
    conn = await asyncssh.connect(
        host, port, username="lanpool", client_keys=[key], known_hosts=None, agent_path=None, config=[]
    )
    chan = RawChannel(await conn.create_process(subsystem="lanpool", encoding=None))
    assert isinstance(await chan.recv(), Hello)
    chan.send(ClientHello(PROTOCOL_VERSION, "bench", []))
    return conn, chan


def pinger(host: str, port: int, ready: Any, stop: Any, result: Any) -> None:
    """In a process of its own (the controller's decoding of a long list must not delay the
    pongs timed): pings on a connection of its own until `stop`; puts the longest round trip."""

    async def run() -> None:
        conn, chan = await raw(host, port, load_or_create_client_key(ControllerHome.default().key))
        async with conn:
            rtts: list[float] = []
            while not stop.is_set():
                t = time.perf_counter()
                chan.send(Ping(len(rtts)))
                await chan.recv(120)
                rtts.append(time.perf_counter() - t)
                if len(rtts) == 3:
                    ready.set()
                await asyncio.sleep(0.005)
        result.put(max(rtts[3:] or rtts))

    asyncio.run(run())


async def pinged(agent, work: Callable[[], Awaitable[object]]) -> float:
    """The longest ping round trip on another connection, from another process, while `work` runs."""
    ctx = multiprocessing.get_context("spawn")
    ready, stop, result = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=pinger, args=(agent.host, agent.port, ready, stop, result))
    proc.start()
    try:
        assert await asyncio.to_thread(ready.wait, 60), "the pinger did not start"
        await work()
        stop.set()
        return float(await asyncio.to_thread(result.get, True, 60))
    finally:
        proc.join(10)


async def against_agent(agent, n: int, rounds: int) -> tuple[dict, JobRecord]:
    key = load_or_create_client_key(ControllerHome.default().key)
    async with await RunnerSession.open(agent.host, agent.port, key, None) as s:
        t = time.perf_counter()
        accepted, _ = await s.submit_accepted(
            SubmitJob("many", "r", "w", ["while [ ! -e go ]; do sleep 0.05; done"], artifacts=["out"])
        )
        await asyncio.to_thread(make_files, Path(accepted.workspace), n)
        (Path(accepted.workspace) / "go").touch()
        while (status := await s.status("many")).state in ("SUBMITTED", "QUEUED", "RUNNING"):
            await asyncio.sleep(0.2)
        print(f"job of {n:,} files: {status.state} in {time.perf_counter() - t:.1f}s")
        assert status.artifacts_total == n, status.artifacts_total

        async def paged_statuses() -> None:
            for _ in range(rounds * 5):
                await s.status("many")

        t = time.perf_counter()
        listed = await whole_list(s, "many", status)
        pages_s = time.perf_counter() - t
        assert len(listed.artifacts) == n
        paged_rtt = await pinged(agent, paged_statuses)

    conn, old = await raw(agent.host, agent.port, key)
    async with conn:

        async def whole_statuses() -> None:
            for _ in range(rounds):
                old.send(GetStatus("many"))
                await old.recv(120)

        t = time.perf_counter()
        await whole_statuses()
        whole_s = (time.perf_counter() - t) / rounds
        whole_rtt = await pinged(agent, whole_statuses)
    print(
        f"agent: longest ping {paged_rtt * 1000:.1f} ms during paged statuses, {whole_rtt * 1000:.1f} ms during whole ones"
    )
    print(f"the whole list: {pages_s:.2f}s in pages (RunnerSession + whole_list), {whole_s:.2f}s in one status")
    job_json = agent.data_dir / "jobs" / "many" / "job.json"
    data = json.loads(job_json.read_text())
    record = JobRecord(**{k: v for k, v in data.items() if k in JobRecord.__dataclass_fields__})
    return {"paged_rtt": paged_rtt, "whole_rtt": whole_rtt, "pages_s": pages_s, "whole_s": whole_s}, record


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=150_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        os.environ["LANPOOL_HOME"] = str(tmp / "controller")
        agent = start_agent(tmp / "agent", tmp / "controller", verbose=False)
        try:
            live, record = asyncio.run(against_agent(agent, args.files, args.rounds))
        finally:
            agent.stop()
    local = asyncio.run(in_process(record, args.rounds))

    import bench_results  # docs/bench/NAME.json -> docs/benchmarks.md

    row = bench_results.row

    ms = lambda s: round(s * 1000, 1)  # noqa: E731
    n = f"{args.files:,}"
    bench_results.record(
        "bench-artifact-status",
        [
            row(
                f"loop stall, status of {n} artifact files, paged (before: on the loop)",
                ms(local["paged"][0]),
                ms(local["before"][0]),
                target="< 50 ms",
                unit="ms",
            ),
            row(
                f"loop stall, status of {n} files to an older controller (whole, in a thread)",
                ms(local["whole"][0]),
                ms(local["before"][0]),
                target="< 100 ms",
                unit="ms",
            ),
            row(
                "one status, paged vs the whole list on the loop",
                ms(local["paged"][1]),
                ms(local["before"][1]),
                unit="ms",
            ),
            row(
                "status frame, paged vs whole",
                round(local["bytes"]["paged"] / 2**20, 2),
                round(local["bytes"]["whole"] / 2**20, 2),
                unit="MiB",
            ),
            row("agent: longest ping during paged statuses", ms(live["paged_rtt"]), target="< 100 ms", unit="ms"),
            row("agent: longest ping during whole-list statuses", ms(live["whole_rtt"]), target="< 200 ms", unit="ms"),
            row(
                f"controller reads all {n} files in pages (vs one whole status)",
                round(live["pages_s"], 2),
                round(live["whole_s"], 2),
                unit="s",
            ),
        ],
    )


if __name__ == "__main__":
    main()
