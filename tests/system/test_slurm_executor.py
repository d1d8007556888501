"""Jobs through Slurm: a real agent (`--executor slurm`) on a real private Slurm cluster
(scripts/slurm: two nodes, each in its own network namespace, two fake GPUs each).

Needs root (the cluster's daemons, namespaces); skipped with the reason otherwise.
Jobs are sent over the real SSH protocol as the controller sends them.
"""

import asyncio
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lanpool.protocol import JobState, JobStatus, LogChunk, SubmitJob
from tests.harness import REPO, AgentProc, start_agent
from tests.runner_jobs import open_session

SLURM_ROOT = Path(os.environ.get("LANPOOL_SLURM_ROOT", "/tmp/lanpool-slurm"))
SLURM_CONF = str(SLURM_ROOT / "etc" / "slurm.conf")


def _cluster_problem() -> str:
    if os.geteuid() != 0:
        return "the private Slurm cluster (scripts/slurm) needs root"
    if shutil.which("ip") is None:
        return "iproute2 is missing"
    up = subprocess.run([str(REPO / "scripts" / "slurm"), "up", "netns", "2"], capture_output=True, text=True)
    if up.returncode != 0:
        return f"scripts/slurm up failed: {up.stderr.strip()[-300:]}"
    return ""


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    problem = _cluster_problem()
    if problem:
        pytest.skip(problem)
    return SLURM_CONF


@pytest.fixture
def slurm_agent(tmp_path: Path, controller_home: Path, slurm_cluster: str):
    agent = _start(tmp_path, controller_home, slurm_cluster)
    yield agent
    agent.stop()
    _squeue_cancel_ours(tmp_path)


def _start(tmp_path: Path, controller_home: Path, conf: str) -> AgentProc:
    return start_agent(
        tmp_path / "agent",
        controller_home,
        grace=2.0,
        name="slurm-runner",
        extra_args=("--executor", "slurm", "--slurm-dir", str(tmp_path / "shared")),
        extra_env={"SLURM_CONF": conf},
    )


def _squeue_cancel_ours(tmp_path: Path) -> None:
    """Whatever a failed test left in Slurm (jobs whose output is under tmp_path)."""
    env = {**os.environ, "SLURM_CONF": SLURM_CONF}
    out = subprocess.run(["squeue", "-h", "-o", "%i|%o"], capture_output=True, text=True, env=env).stdout
    ids = [line.split("|")[0] for line in out.splitlines() if str(tmp_path) in line]
    if ids:
        subprocess.run(["scancel", *ids], env=env, check=False)


# -- talking to the agent as a controller does ----------------------------------------------


async def _call(agent, what: str, *args):
    session = await open_session(agent)
    async with session:
        return await getattr(session, what)(*args)


def submit(agent, job_id: str, commands: list[str], **fields) -> JobStatus:
    fields.setdefault("run_name", f"run-{job_id}")
    return asyncio.run(_call(agent, "submit", SubmitJob(job_id=job_id, workflow="w", commands=commands, **fields)))


def status(agent, job_id: str) -> JobStatus:
    return asyncio.run(_call(agent, "status", job_id))


def stop(agent, job_id: str, grace_s: float | None = None) -> JobStatus:
    return asyncio.run(_call(agent, "stop", job_id, False, grace_s))


async def _attach(agent, job_id: str, follow: bool) -> tuple[list[LogChunk], JobStatus | None]:
    chunks: list[LogChunk] = []
    session = await open_session(agent)
    async with session:
        async for batch in session.attach(job_id, 0, follow):
            for msg in batch:
                if isinstance(msg, LogChunk):
                    chunks.append(msg)
                elif isinstance(msg, JobStatus):
                    return chunks, msg
    return chunks, None


def follow(agent, job_id: str, timeout: float = 120) -> tuple[list[LogChunk], JobStatus]:
    chunks, final = asyncio.run(asyncio.wait_for(_attach(agent, job_id, True), timeout))
    assert final is not None
    return chunks, final


def lines(chunks: list[LogChunk], stream: str) -> list[str]:
    return b"".join(c.data for c in chunks if c.stream == stream).decode().splitlines()


def wait_until(check, timeout: float = 30, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout:g}s")


def out_lines_now(agent, job_id: str) -> list[str]:
    chunks, _ = asyncio.run(_attach(agent, job_id, False))
    return lines(chunks, "out")


# -- the tests ---------------------------------------------------------------------------------


def test_log_streams_and_exit_code(slurm_agent):
    submit(
        slurm_agent,
        "s1",
        [
            'echo "hello $LANPOOL_JOB_ID on $(hostname), rank $NODE_RANK"',
            "echo to-stderr >&2",
            'echo "ntasks=${SLURM_NTASKS:-unset} gpus=${CUDA_VISIBLE_DEVICES:-none}"',
            "printf 'no newline'",
            "echo; exit 3",
        ],
        env={"MY": "x"},
    )
    chunks, final = follow(slurm_agent, "s1")
    assert final.state == JobState.FAILED and final.exit_code == 3, final
    out = lines(chunks, "out")
    assert out[0].startswith("hello s1 on n") and out[0].endswith("rank 0"), out
    assert out[1:] == ["ntasks=unset gpus=none", "no newline"], out
    assert lines(chunks, "err") == ["to-stderr"]
    assert any("Slurm job" in line and "submitted" in line for line in lines(chunks, "sys"))


def test_fake_gpus_are_placed_and_set_the_gpu_env(slurm_agent):
    submit(slurm_agent, "g1", ['echo "gpus=$CUDA_VISIBLE_DEVICES"'], resources={"gpu": 2})
    chunks, final = follow(slurm_agent, "g1")
    assert final.state == JobState.DONE, (final, lines(chunks, "sys"))
    assert lines(chunks, "out") == ["gpus=0,1"]


def test_stop_sends_term_then_kills_after_the_grace(slurm_agent):
    submit(
        slurm_agent,
        "t1",
        # the TERM reaches every process of the job (sleep too): `|| :` keeps set -e from ending it
        ["trap 'echo got TERM' TERM", "echo started", "while :; do sleep 0.2 || :; done"],
    )
    wait_until(lambda: "started" in out_lines_now(slurm_agent, "t1"), what="the job's first line")
    t0 = time.time()
    stop(slurm_agent, "t1", 1.0)
    chunks, final = follow(slurm_agent, "t1")
    took = time.time() - t0
    assert final.state == JobState.STOPPED, final
    assert "got TERM" in lines(chunks, "out")
    assert final.exit_code in (137, -9), final  # the TERM was ignored: killed
    assert took < 20, took


def test_max_duration_stops_the_job_as_timed_out(slurm_agent):
    submit(slurm_agent, "m1", ["echo started", "sleep 60"], max_duration_s=2.0)
    chunks, final = follow(slurm_agent, "m1")
    assert final.state == JobState.STOPPED and final.error == "stopped: max_duration 2s reached", final
    assert lines(chunks, "out") == ["started"]
    assert any("max_duration 2s reached; SIGTERM" in line for line in lines(chunks, "sys"))


def test_a_pending_job_shows_slurms_reason_and_is_cancelled(slurm_agent, tmp_path):
    env = {**os.environ, "SLURM_CONF": SLURM_CONF}
    blocker = subprocess.run(
        ["sbatch", "--parsable", "-N", "2", "--exclusive", f"--output={tmp_path}/blocker.out", "--wrap", "sleep 120"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()
    try:
        submit(slurm_agent, "p1", ["echo should-not-run"])
        pending = wait_until(
            lambda: (s := status(slurm_agent, "p1")).state == JobState.QUEUED and s.reason and s,
            what="QUEUED with a reason",
        )
        assert pending.reason.startswith("Slurm: ") and pending.reason != "Slurm: None", pending
        stop(slurm_agent, "p1")
        chunks, final = follow(slurm_agent, "p1")
        assert final.state == JobState.STOPPED, final
        assert lines(chunks, "out") == []
        slurm_id = next(line.split()[3] for line in lines(chunks, "sys") if "submitted" in line)
        left = subprocess.run(["squeue", "-h", "-j", slurm_id, "-o", "%T"], capture_output=True, text=True, env=env)
        assert left.stdout.strip() in ("", "CANCELLED"), left.stdout
    finally:
        subprocess.run(["scancel", blocker], env=env, check=False)


def test_agent_restart_mid_job_readopts_with_no_lost_or_repeated_line(tmp_path, controller_home, slurm_cluster):
    agent = _start(tmp_path, controller_home, slurm_cluster)
    try:
        submit(agent, "r1", ["for i in $(seq 1 60); do echo line-$i; sleep 0.05; done"])
        wait_until(lambda: len(out_lines_now(agent, "r1")) >= 5, what="five lines")
        agent.proc.send_signal(signal.SIGKILL)  # no goodbye: the journal is all the next agent has
        agent.proc.wait()
        time.sleep(0.5)  # lines printed while no agent watched
        agent = _start(tmp_path, controller_home, slurm_cluster)
        chunks, final = follow(agent, "r1")
    finally:
        agent.stop()
        _squeue_cancel_ours(tmp_path)
    assert final.state == JobState.DONE, (final, lines(chunks, "sys"))
    assert lines(chunks, "out") == [f"line-{i}" for i in range(1, 61)]
    assert any("re-attached to container slurm-" in line for line in lines(chunks, "sys"))


# -- attacks: what a workflow or request sends never becomes a shell word or an sbatch option ---------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("slurm_partition", "x --wrap=rm"),
        ("slurm_account", "-A root"),
        ("slurm_qos", "normal;touch /tmp/pwned"),
        ("slurm_constraint", "a b"),
        ("nodes", "2 --wrap=id"),
    ],
)
def test_slurm_names_with_metacharacters_or_options_are_refused(slurm_agent, tmp_path, field, value):
    marker = tmp_path / "ran"
    submit(slurm_agent, "a1", [f"touch {marker}"], resources={field: value})
    chunks, final = follow(slurm_agent, "a1")
    assert final.state == JobState.FAILED, final
    assert len(final.error.splitlines()) == 1 and ("slurm" in final.error or "nodes" in final.error), final.error
    assert "submitted" not in "\n".join(lines(chunks, "sys"))
    assert not marker.exists()


def test_env_that_sbatch_reads_as_options_is_refused(slurm_agent, tmp_path):
    marker = tmp_path / "wrapped"
    submit(slurm_agent, "a2", ["echo hi"], env={"SBATCH_WRAP": f"touch {marker}"})
    _, final = follow(slurm_agent, "a2")
    assert final.state == JobState.FAILED and "SBATCH_WRAP" in final.error, final
    time.sleep(1)
    assert not marker.exists()


def test_an_image_job_is_refused_with_one_line(slurm_agent):
    from lanpool.app.errors import RunnerError

    with pytest.raises(RunnerError) as err:
        submit(slurm_agent, "i1", ["echo hi"], image="busybox")
    assert "Slurm" in str(err.value) and "\n" not in str(err.value)


# -- multi-node ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_node_lightning_ddp_trains_through_slurm(slurm_agent):
    py = sys.executable
    submit(
        slurm_agent,
        "d1",
        [
            'echo "rank $NODE_RANK of $LANPOOL_NUM_NODES master $MASTER_ADDR:$MASTER_PORT ntasks=${SLURM_NTASKS:-unset}"',
            f"{py} -m training.autoencoder --max-epochs 1 --devices 1 --out ck",
        ],
        resources={"nodes": 2},
        env={"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"},
        artifacts=["ck"],
    )
    chunks, final = follow(slurm_agent, "d1", timeout=300)
    out = lines(chunks, "out")
    assert final.state == JobState.DONE, (final, out[-20:], lines(chunks, "err")[-20:])
    assert any(line.startswith("[node 0] rank 0 of 2 master n1:") and line.endswith("ntasks=unset") for line in out)
    assert any(line.startswith("[node 1] rank 1 of 2 master n1:") for line in out), out
    assert all(line.startswith(("[node 0] ", "[node 1] ")) for line in out), out
    assert [a.path for a in final.artifacts] == ["ck/autoencoder.ckpt"], final.artifacts
    assert dataclasses.asdict(final.artifacts[0])["size"] > 0


def test_the_agent_reports_the_clusters_partitions_nodes_and_gpus(slurm_agent):
    async def hello():
        session = await open_session(slurm_agent)
        async with session:
            return session.hello.resources

    res = asyncio.run(hello())
    assert res["executor"] == "slurm" and res["slurm_nodes"] == 2 and res["gpus"] == 4, res
    assert res["cpus"] == 4 and res["slurm_partitions"].startswith("debug:"), res
    assert res["slurm_default_partition"] == "debug", res  # sinfo's "debug*"
