"""A job's status with a long artifact list (agent/ssh/session.py _send_status, app/transfer/pull.py
whole_list). Against a real agent: a controller that reads pages gets STATUS_ARTIFACTS files and
the count, then the rest a page at a time, and `run` brings every file back; an older controller
gets the whole list, made in a thread, while the agent answers its other connections. Against a
hostile runner: pages that do not add up, or a count over the limit, are refused before any file
is asked for."""

import asyncio
import json
import os
import time
from pathlib import Path

import asyncssh
import pytest

from lanpool.app.home import ControllerHome
from lanpool.app.keys import load_or_create_client_key
from lanpool.app.runners.client import RunnerSession
from lanpool.app.store import ARTIFACTS_REFUSED
from lanpool.app.transfer.pull import whole_list
from lanpool.protocol import (
    PROTOCOL_VERSION,
    ClientHello,
    FrameReader,
    GetStatus,
    Hello,
    JobStatus,
    Ping,
    Pong,
    SubmitJob,
    decode_agent_message,
)
from lanpool.protocol.messages import STATUS_ARTIFACTS
from tests.hostile_runner import Script, hostile, seed_job
from tests.raw_channel import RawChannel

_ = hostile  # a fixture from hostile_runner: the tests name it

# A status of them all held the agent's loop for ~0.2 s before (150k: 1.3 s); the runner takes
# ~5 s to list 50k at a job's end here (in a thread), so the test stays at this.
N_FILES = 20_000


def _make_files(n: int) -> str:
    """A job command that leaves `n` empty files under out/ (1,000 to a directory), quickly."""
    return (
        f'python3 -c "import os\nfor i in range({n}):\n'
        "    d = 'out/d%04d' % (i // 1000)\n"
        "    i % 1000 or os.makedirs(d)\n"
        "    os.close(os.open('%s/f%04d' % (d, i % 1000), os.O_CREAT | os.O_WRONLY, 0o644))\""
    )


def _expected(n: int) -> set[str]:
    return {f"out/d{i // 1000:04d}/f{i % 1000:04d}" for i in range(n)}


def _files_in(workspace: Path, n: int) -> None:
    """What _make_files leaves, made here (a job in the runner's sandbox takes several times as long)."""
    for i in range(n):
        where = workspace / f"out/d{i // 1000:04d}"
        if i % 1000 == 0:
            where.mkdir(parents=True)
        os.close(os.open(where / f"f{i % 1000:04d}", os.O_CREAT | os.O_WRONLY, 0o644))


async def _job_of_many(session: RunnerSession, job_id: str, n: int) -> JobStatus:
    """A job that ends once its workspace holds `n` files under out/; its final status."""
    accepted, _ = await session.submit_accepted(
        SubmitJob(job_id, "r", "w", ["while [ ! -e go ]; do sleep 0.05; done"], artifacts=["out"])
    )
    workspace = Path(accepted.workspace)
    await asyncio.to_thread(_files_in, workspace, n)
    (workspace / "go").touch()
    return await _done(session, job_id)


async def _done(session: RunnerSession, job_id: str) -> JobStatus:
    for _ in range(1200):
        status = await session.status(job_id)
        if status.state not in ("SUBMITTED", "QUEUED", "RUNNING"):
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} did not end")


async def _raw(agent, key: asyncssh.SSHKey, features: list[str]) -> tuple[asyncssh.SSHClientConnection, RawChannel]:
    conn = await asyncssh.connect(
        agent.host, agent.port, username="lanpool", client_keys=[key], known_hosts=None, agent_path=None, config=[]
    )
    chan = RawChannel(await conn.create_process(subsystem="lanpool", encoding=None))
    assert isinstance(await chan.recv(), Hello)
    chan.send(ClientHello(PROTOCOL_VERSION, "test", features))
    return conn, chan


async def _body(chan: RawChannel) -> bytes:
    """The next frame, not decoded: decoding 50k files here would hold up the pings timed meanwhile."""
    reader = FrameReader()
    while True:
        data = await asyncio.wait_for(chan.proc.stdout.read(1 << 20), 60)
        assert data, "the agent closed the channel"
        if bodies := reader.feed(data):
            return bodies[0]


async def _long_list(agent) -> tuple[JobStatus, JobStatus, list[str], JobStatus, float, list[float]]:
    key = load_or_create_client_key(ControllerHome.default().key)
    async with await RunnerSession.open(agent.host, agent.port, key, None) as session:
        first = await _job_of_many(session, "many", N_FILES)
        whole = await whole_list(session, "many", first)
        past_the_end = await session.status("many", N_FILES + 10)
    # An older controller (no ARTIFACT_PAGES): the whole list in one status, while another
    # connection pings the agent. Made on the loop, it kept every ping waiting as long.
    old_conn, old = await _raw(agent, key, [])
    ping_conn, pinger = await _raw(agent, key, [])
    async with old_conn, ping_conn:
        old.send(GetStatus("many"))
        started = time.perf_counter()
        reply = asyncio.ensure_future(_body(old))
        rtts: list[float] = []
        while not reply.done():
            sent = time.perf_counter()
            pinger.send(Ping(len(rtts)))
            assert await pinger.recv(60) == Pong(len(rtts))
            rtts.append(time.perf_counter() - sent)
            await asyncio.sleep(0.01)
        took = time.perf_counter() - started
        full = decode_agent_message(await reply)
        assert isinstance(full, JobStatus)
    return first, past_the_end, [f.path for f in whole.artifacts], full, took, rtts


def test_a_long_list_comes_in_pages_and_the_agent_answers_others_meanwhile(agent):
    first, past_the_end, paths, full, took, rtts = asyncio.run(_long_list(agent))
    assert first.state == "DONE", first
    assert len(first.artifacts) == STATUS_ARTIFACTS and first.artifacts_total == N_FILES
    assert len(paths) == N_FILES and set(paths) == _expected(N_FILES)
    assert past_the_end.artifacts == [] and past_the_end.artifacts_total == N_FILES  # asking past it: nothing
    assert full.artifacts_total == 0 and {f.path for f in full.artifacts} == _expected(N_FILES)
    # Pings were answered while the whole list was made. Made on the loop, a ping sent meanwhile
    # waited for all of it (~0.9 of the status's time, here); in a thread, none waits for much of it.
    assert rtts and max(rtts) < took * 0.6, (max(rtts), took, len(rtts))


def test_a_run_brings_back_more_files_than_one_status_lists(agent, cli, make_project, tmp_path):
    n = STATUS_ARTIFACTS + 7  # two pages
    project = make_project(
        f"workflows:\n  - name: wf\n    commands:\n      - {json.dumps(_make_files(n))}\n    artifacts: [out]\n"
    )
    cli("headless", "run", "wf", "--runner", agent.address, cwd=project, check=True, timeout=300)
    [entry] = json.loads(cli("headless", "status", "--json", check=True).stdout)
    [row] = entry["jobs"]
    dest = tmp_path / "dl"
    cli("headless", "artifacts", "download", row["job"], "--output", str(dest), check=True, timeout=300)
    assert {str(p.relative_to(dest)) for p in dest.rglob("f*")} == _expected(n)


# -- runners whose pages do not add up --------------------------------------------------------------


def _follow(ctl, job_id: str):
    return asyncio.run(asyncio.wait_for(ctl.follow(job_id, follow=True), 60))


def test_a_runner_that_lists_in_pages_is_read_to_the_end(hostile, ctl):
    files = {f"f{i}": b"x" * i for i in range(7)}
    seed_job(ctl.store, ctl.store.runner(hostile.name), "paged")
    hostile.add(Script(job_id="paged", files=files, declared=[(p, len(d)) for p, d in files.items()], page=3))
    job = _follow(ctl, "paged")
    assert job.artifacts_pulled == 1, job.error
    assert dict(ctl.store.artifacts("paged")) == {p: len(d) for p, d in files.items()}
    assert hostile.counters.status_pages == [3, 6]


@pytest.mark.parametrize(
    ("total", "fragment", "pages"),
    [
        (10**9, "1000000000 artifact files, more than the limit", []),  # refused before any page is asked
        (9, "listed 9 artifact files, then 9 with 0 from file 7", [3, 6, 7]),  # the pages run out
        (2, "listed 2 artifact files and sent 3", []),  # a first page longer than the count
    ],
)
def test_pages_that_do_not_add_up_are_refused_before_any_file_is_asked(hostile, ctl, total, fragment, pages):
    files = {f"f{i}": b"x" for i in range(7)}
    seed_job(ctl.store, ctl.store.runner(hostile.name), "liar")
    declared = [(p, len(d)) for p, d in files.items()]
    hostile.add(Script(job_id="liar", files=files, declared=declared, page=3, total_lie=total))
    job = _follow(ctl, "liar")
    assert job.artifacts_pulled == ARTIFACTS_REFUSED and fragment in job.error, job.error
    assert hostile.counters.status_pages == pages
    assert hostile.counters.artifact_requests == [] and ctl.store.artifacts("liar") == []
