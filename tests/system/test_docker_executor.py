"""Jobs in containers: a real agent process, a real Docker engine, images made here.

Jobs are sent over the real SSH protocol with the controller's RunnerSession
(the controller does not send images yet). No registry is reachable, so images
are imported from a busybox rootfs (conftest.busybox_image), and the Lightning
test bind-mounts the host's Python and venv read-only into the container.
"""

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from lanpool.app.errors import RunnerError
from lanpool.app.transfer.snapshot import build_manifest
from lanpool.app.transfer.uploads import WorkspaceFiles, upload
from lanpool.protocol import FileEntry, JobState, JobStatus, LogChunk, SubmitJob
from tests.docker_harness import remove_agent_containers
from tests.harness import REPO, start_docker_agent
from tests.runner_jobs import open_session

# -- talking to the agent as a controller does ----------------------------------------------


async def _submit(agent, req: SubmitJob, snapshot_of: Path | None = None) -> JobStatus:
    session = await open_session(agent)
    async with session:
        if snapshot_of is not None:
            files = WorkspaceFiles()
            for e in build_manifest(snapshot_of).entries:
                files.add(FileEntry(e.path, e.sha256, e.size, e.mode, e.link), None if e.link else snapshot_of / e.path)
            await upload(session, files, lambda _line: None)
            req = dataclasses.replace(req, files=files.entries)
        return await session.submit(req)


async def _attach(
    agent, job_id: str, from_seq: int = 0, follow: bool = True, until_out_lines: int | None = None
) -> tuple[list[LogChunk], JobStatus | None]:
    """Log chunks from `from_seq` and the final status (None when stopped early at `until_out_lines`)."""
    chunks: list[LogChunk] = []
    session = await open_session(agent)
    async with session:
        async for batch in session.attach(job_id, from_seq, follow):
            for msg in batch:
                if isinstance(msg, LogChunk):
                    chunks.append(msg)
                elif isinstance(msg, JobStatus):
                    return chunks, msg
            if until_out_lines is not None and len(_lines(chunks, "out")) >= until_out_lines:
                return chunks, None
    return chunks, None


async def _status(agent, job_id: str) -> JobStatus:
    session = await open_session(agent)
    async with session:
        return await session.status(job_id)


async def _stop(agent, job_id: str, abort: bool = False, grace_s: float | None = None) -> JobStatus:
    session = await open_session(agent)
    async with session:
        return await session.stop(job_id, abort, grace_s)


def submit(agent, job_id: str, commands: list[str], image: str, **fields) -> JobStatus:
    fields.setdefault("run_name", f"run-{job_id}")
    req = SubmitJob(job_id=job_id, workflow="w", commands=commands, image=image, **fields)
    return asyncio.run(_submit(agent, req))


def follow(agent, job_id: str, from_seq: int = 0) -> tuple[list[LogChunk], JobStatus]:
    chunks, status = asyncio.run(asyncio.wait_for(_attach(agent, job_id, from_seq), 120))
    return chunks, status


def run(agent, job_id: str, commands: list[str], image: str, **fields) -> tuple[list[LogChunk], JobStatus]:
    submit(agent, job_id, commands, image, **fields)
    return follow(agent, job_id)


def _lines(chunks: list[LogChunk], stream: str) -> list[str]:
    return b"".join(c.data for c in chunks if c.stream == stream).decode().splitlines()


def wait_for_line(agent, job_id: str, text: str, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        chunks, _ = asyncio.run(_attach(agent, job_id, follow=False))
        if any(text in line for line in _lines(chunks, "out")):
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in job {job_id}'s log")


def containers_of(client, job_id: str) -> list:
    return client.containers.list(all=True, filters={"label": f"lanpool.job={job_id}"}, ignore_removed=True)


# -- running -----------------------------------------------------------------------------------------


def test_logs_env_workspace_and_artifacts_of_a_container_job(docker_agent, docker_client, busybox_image):
    status = submit(
        docker_agent,
        "ok1",
        [
            'echo "hello from $LANPOOL_JOB_ID of $LANPOOL_RUN_NAME, MY_VAR=$MY_VAR"',
            "pwd",
            'echo "uid $(id -u) gid $(id -g)"',
            "echo to-stderr >&2",
            "mkdir -p out && echo artifact > out/a.txt",
            "df -m /dev/shm | tail -n 1 | awk '{print \"shm\", $2}'",
            "printf 'last line without newline'",
        ],
        busybox_image,
        env={"MY_VAR": "x y"},
        artifacts=["out"],
    )
    assert status.state in (JobState.RUNNING, JobState.DONE), status
    chunks, final = follow(docker_agent, "ok1")

    out = _lines(chunks, "out")
    assert out == [
        "hello from ok1 of run-ok1, MY_VAR=x y",
        "/workspace",
        f"uid {os.getuid()} gid {os.getgid()}",
        "shm 1024",  # the default shm_size, not Docker's 64m
        "last line without newline",
    ], chunks
    assert _lines(chunks, "err") == ["to-stderr"]
    assert final.state == JobState.DONE and final.exit_code == 0 and final.error == ""
    assert [(a.path, a.size) for a in final.artifacts] == [("out/a.txt", 9)]
    produced = docker_agent.data_dir / "jobs" / "ok1" / "workspace" / "out" / "a.txt"
    assert (produced.stat().st_uid, produced.stat().st_gid) == (os.getuid(), os.getgid())
    # The log is spooled and the artifacts packed: the container is gone.
    deadline = time.time() + 10
    while containers_of(docker_client, "ok1"):
        assert time.time() < deadline, "the finished container was not removed"
        time.sleep(0.1)


def test_container_settings_host_network_labels_user(docker_agent, docker_client, busybox_image):
    submit(
        docker_agent,
        "cfg1",
        ["echo ready", "sleep 30"],
        busybox_image,
        run_name="cfg-run",
        resources={"memory_mb": 64, "shm_size": "256m", "cpu": 1},
    )
    wait_for_line(docker_agent, "cfg1", "ready")
    [container] = containers_of(docker_client, "cfg1")
    host = container.attrs["HostConfig"]
    assert host["NetworkMode"] == "host" and host["Init"] is True and host["CapDrop"] == ["MKNOD"]
    assert host["Memory"] == 64 * 2**20 and host["MemorySwap"] == 64 * 2**20
    assert host["ShmSize"] == 256 * 2**20 and host["NanoCpus"] == 10**9
    assert host["LogConfig"]["Type"] == "json-file"
    assert [(m["Source"], m["Target"]) for m in host["Mounts"]] == [
        (str(docker_agent.data_dir / "jobs" / "cfg1" / "workspace"), "/workspace"),
        (str(docker_agent.data_dir / "jobs" / "cfg1" / "stdio"), "/.lanpool-stdio"),  # its output: docker_stdio.py
    ]
    assert container.attrs["Config"]["User"] == f"{os.getuid()}:{os.getgid()}"
    assert container.labels == {
        "lanpool.job": "cfg1",
        "lanpool.run": "cfg-run",
        "lanpool.agent": str(docker_agent.data_dir),
    }
    assert container.attrs["Config"]["Cmd"][:2] == ["sh", "-c"]
    _stop_now = asyncio.run(_stop(docker_agent, "cfg1", grace_s=0))
    assert _stop_now.state in (JobState.RUNNING, JobState.STOPPED)


def test_a_container_job_makes_no_device_node_on_the_host(docker_agent, busybox_image):
    """The workspace is a bind mount: a node made there would be a device file on the host."""
    submit(docker_agent, "mknod1", ["mknod /workspace/disk b 8 0 && echo MADE || echo REFUSED"], busybox_image)
    chunks, final = follow(docker_agent, "mknod1")
    assert final.state == JobState.DONE and _lines(chunks, "out") == ["REFUSED"]
    assert not (docker_agent.data_dir / "jobs" / "mknod1" / "workspace" / "disk").exists()


def test_exit_codes_and_out_of_memory(docker_agent, busybox_image):
    submit(docker_agent, "fail1", ["echo before", "exit 3", "echo never"], busybox_image)
    # 300 MB through a pipe whose reader keeps it all, under a 32 MB limit.
    submit(
        docker_agent,
        "oom1",
        ["echo start", "head -c 300m /dev/zero | tail -c 300m > /dev/null", "echo survived"],
        busybox_image,
        resources={"memory_mb": 32},
    )
    chunks, final = follow(docker_agent, "fail1")
    assert _lines(chunks, "out") == ["before"]
    assert final.state == JobState.FAILED and final.exit_code == 3 and final.error == "exited with code 3"

    chunks, final = follow(docker_agent, "oom1")
    assert _lines(chunks, "out") == ["start"]
    assert final.state == JobState.FAILED and final.exit_code == 137
    assert final.error == "killed: out of memory (limit 32 MiB)"
    assert "lanpool: killed: out of memory (limit 32 MiB)" in _lines(chunks, "sys")


# -- stop and abort -------------------------------------------------------------------------------


def test_stop_within_grace_and_kill_after_it(docker_agent, busybox_image):
    submit(
        docker_agent,
        "graceful",
        [
            "mkdir -p out && echo kept > out/k.txt",
            "trap 'echo got TERM; exit 0' TERM",
            "echo ready",
            "while true; do sleep 0.1; done",
        ],
        busybox_image,
        artifacts=["out"],
    )
    submit(docker_agent, "stubborn", ["trap '' TERM", "echo ready", "while true; do sleep 0.1; done"], busybox_image)
    # Like python under the job's sh: SIGTERM reaches it, and the job's sh, which dies
    # at once, does not cut short its shutdown (see docker._WRAPPER).
    submit(
        docker_agent,
        "child",
        ["sh -c 'trap \"sleep 1; echo child shut down; exit 0\" TERM; echo ready; while true; do sleep 0.1; done'"],
        busybox_image,
    )
    for job in ("graceful", "stubborn", "child"):
        wait_for_line(docker_agent, job, "ready")

    t0 = time.time()
    asyncio.run(_stop(docker_agent, "graceful", grace_s=20))
    chunks, final = follow(docker_agent, "graceful")
    assert time.time() - t0 < 8, "a job that exits on SIGTERM must not wait for the grace period"
    assert final.state == JobState.STOPPED and final.exit_code == 0
    assert "got TERM" in _lines(chunks, "out")
    assert [a.path for a in final.artifacts] == ["out/k.txt"]

    asyncio.run(_stop(docker_agent, "child", grace_s=20))
    chunks, final = follow(docker_agent, "child")
    assert _lines(chunks, "out") == ["ready", "child shut down"] and final.state == JobState.STOPPED

    t0 = time.time()
    asyncio.run(_stop(docker_agent, "stubborn", grace_s=1.5))
    chunks, final = follow(docker_agent, "stubborn")
    took = time.time() - t0
    assert 1.5 <= took < 10, took
    assert final.state == JobState.STOPPED and final.exit_code == 137  # 128 + SIGKILL
    assert any("SIGKILL" in line for line in _lines(chunks, "sys"))


def test_abort_brings_no_artifacts(docker_agent, docker_client, busybox_image):
    submit(
        docker_agent,
        "abort1",
        ["mkdir -p out && echo x > out/x.txt", "echo ready", "sleep 60"],
        busybox_image,
        artifacts=["out"],
    )
    wait_for_line(docker_agent, "abort1", "ready")
    asyncio.run(_stop(docker_agent, "abort1", abort=True, grace_s=5))
    _chunks, final = follow(docker_agent, "abort1")
    assert final.state == JobState.ABORTED and final.artifacts == []
    assert not (docker_agent.data_dir / "transfer" / "artifacts" / "abort1.tar").exists()
    deadline = time.time() + 10
    while containers_of(docker_client, "abort1"):
        assert time.time() < deadline
        time.sleep(0.1)


# -- the agent restarts under a running container ---------------------------------------------------


def test_agent_killed_and_restarted_reattaches_with_no_gap_or_duplicate(
    tmp_path, controller_home, docker_client, busybox_image
):
    data_dir = tmp_path / "agent"
    agent = start_docker_agent(data_dir, controller_home, "--executor", "docker")
    try:
        # A line longer than the 64 KiB cut first, so the restart must account for the newline the agent added.
        script = [
            "head -c 100000 /dev/zero | tr '\\0' 'x'; echo",
            "i=1",
            "while [ $i -le 400 ]; do echo line-$i; if [ $((i % 50)) -eq 0 ]; then echo err-$i >&2; fi; "
            "i=$((i+1)); sleep 0.01; done",
            "printf 'the end, without newline'",
        ]
        submit(agent, "long1", script, busybox_image)
        before, status = asyncio.run(asyncio.wait_for(_attach(agent, "long1", until_out_lines=60), 60))
        assert status is None, "the job ended before the agent could be killed"
        agent.proc.send_signal(signal.SIGKILL)  # no chance to clean up or write anything
        agent.proc.wait()
        [container] = containers_of(docker_client, "long1")
        assert container.status == "running"

        agent = start_docker_agent(data_dir, controller_home, "--executor", "docker")
        resumed_from = before[-1].seq + before[-1].n_lines
        rest, final = follow(agent, "long1", from_seq=resumed_from)
        everything, final_again = follow(agent, "long1")
    finally:
        agent.stop()
        remove_agent_containers(docker_client, data_dir)

    expected_out = (
        ["x" * 65536, "x" * (100000 - 65536)] + [f"line-{i}" for i in range(1, 401)] + ["the end, without newline"]
    )
    expected_err = [f"err-{i}" for i in range(50, 401, 50)]
    assert _lines(before + rest, "out") == expected_out  # what a controller that resumed got
    assert _lines(everything, "out") == expected_out  # what the spool holds
    assert _lines(before + rest, "err") == _lines(everything, "err") == expected_err
    assert any("re-attached to container" in line for line in _lines(everything, "sys"))
    seqs = [(c.seq, c.n_lines) for c in everything]
    assert all(a[0] + a[1] == b[0] for a, b in zip(seqs, seqs[1:], strict=False)), "sequence numbers have a gap"
    assert final.state == final_again.state == JobState.DONE and final.exit_code == 0


def test_container_that_ended_while_the_agent_was_down_gets_its_result(
    tmp_path, controller_home, docker_client, busybox_image
):
    data_dir = tmp_path / "agent"
    agent = start_docker_agent(data_dir, controller_home, "--executor", "docker")
    try:
        submit(
            agent,
            "quick1",
            ["echo started", "sleep 1", "mkdir -p out && echo r > out/r.txt", "echo finished", "exit 4"],
            busybox_image,
            artifacts=["out"],
        )
        wait_for_line(agent, "quick1", "started")
        agent.proc.send_signal(signal.SIGKILL)
        agent.proc.wait()
        [container] = containers_of(docker_client, "quick1")
        assert container.wait(timeout=30)["StatusCode"] == 4  # it ended with no agent watching
        agent = start_docker_agent(data_dir, controller_home, "--executor", "docker")
        chunks, final = follow(agent, "quick1")
        assert _lines(chunks, "out") == ["started", "finished"]
        assert final.state == JobState.FAILED and final.exit_code == 4
        assert [a.path for a in final.artifacts] == ["out/r.txt"]
        deadline = time.time() + 10
        while containers_of(docker_client, "quick1"):
            assert time.time() < deadline
            time.sleep(0.1)
    finally:
        agent.stop()
        remove_agent_containers(docker_client, data_dir)


# -- images -----------------------------------------------------------------------------------------


def test_missing_image_fails_the_job_with_one_clear_line(docker_agent):
    submit(docker_agent, "never1", ["echo hi"], "lanpool-test/no-such-image:1", pull="never")
    _chunks, final = follow(docker_agent, "never1")
    assert final.state == JobState.FAILED and final.exit_code is None
    assert final.error == "image 'lanpool-test/no-such-image:1' not found locally and the job's pull policy is 'never'"

    submit(docker_agent, "missing1", ["echo hi"], "lanpool-test/no-such-image:1")  # pull: missing
    chunks, final = follow(docker_agent, "missing1")
    assert final.state == JobState.FAILED
    assert final.error.startswith("image 'lanpool-test/no-such-image:1' not found locally and could not be pulled: ")
    assert "\n" not in final.error
    sys_lines = _lines(chunks, "sys")
    assert sys_lines[0] == "lanpool: pulling image lanpool-test/no-such-image:1"
    assert sys_lines[-1] == f"lanpool: {final.error}"


# -- Lightning in a container --------------------------------------------------------------------------


@pytest.mark.slow
def test_lightning_training_step_in_a_container(tmp_path, controller_home, docker_client, busybox_image):
    """The job's workspace holds the project snapshot; Python and the venv come from the host, read-only."""
    venv = Path(sys.prefix)
    mounts = {
        "/usr": "/usr",
        "/usr/lib": "/lib",
        Path(sys.base_prefix).as_posix(): Path(sys.base_prefix).as_posix(),
        venv.as_posix(): venv.as_posix(),
    }
    if Path("/usr/lib64").is_dir():
        mounts["/usr/lib64"] = "/lib64"
    args = [arg for host, target in mounts.items() for arg in ("--docker-volume", f"{host}:{target}:ro")]
    data_dir = tmp_path / "agent"
    agent = start_docker_agent(data_dir, controller_home, "--executor", "docker", *args)
    try:
        req = SubmitJob(
            job_id="train1",
            run_name="train-run",
            workflow="train",
            commands=["python -m training.autoencoder --max-epochs 1 --devices 1 --out ck"],
            env={"PATH": f"{venv}/bin:/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
            artifacts=["ck"],
            image=busybox_image,
        )
        asyncio.run(_submit(agent, req, snapshot_of=REPO))
        chunks, final = follow(agent, "train1")
    finally:
        agent.stop()
        remove_agent_containers(docker_client, data_dir)
    out = _lines(chunks, "out")
    assert final.state == JobState.DONE, b"".join(c.data for c in chunks).decode()[-3000:]
    assert any(line.startswith("epoch 1 train_loss") for line in out), out
    assert [a.path for a in final.artifacts] == ["ck/autoencoder.ckpt"]
    checkpoint = data_dir / "jobs" / "train1" / "workspace" / "ck" / "autoencoder.ckpt"
    assert checkpoint.stat().st_uid == os.getuid()


# -- GPUs -------------------------------------------------------------------------------------------


def test_two_gpu_jobs_get_different_device_ids(docker_client, busybox_image, tmp_path, monkeypatch):
    """Fake GPUs (this machine has none) at the detection edge; the allocator, the
    DeviceRequest and the container dockerd creates from it are real.

    The containers are created, not started: starting one with a GPU device
    request needs the NVIDIA container runtime, which a machine without a GPU
    lacks (dockerd: 'could not select device driver'). What matters here is the
    request dockerd stored in each container's HostConfig.
    """
    from lanpool.agent.executors import Launch
    from lanpool.agent.executors.docker import DockerExecutor
    from lanpool.agent.host.gpus import GpuAllocator, GpuError, detect_gpus, gpu_env

    monkeypatch.setenv("LANPOOL_FAKE_GPUS", "0,1")
    allocator = GpuAllocator([gpu.index for gpu in detect_gpus()])
    executor = DockerExecutor.connect(agent_label=str(tmp_path))
    created = []
    try:
        for job_id in ("gpu-a", "gpu-b"):
            gpus = allocator.allocate(job_id, 1)
            workspace = tmp_path / job_id
            workspace.mkdir()
            launch = Launch(
                job_id,
                ["nvidia-smi"],
                workspace,
                workspace,
                gpu_env(gpus, in_container=True),
                image=busybox_image,
                gpus=tuple(gpus),
            )
            created.append(executor.create(launch))
        with pytest.raises(GpuError, match="needs 1 GPU; 0 of this runner's 2 are free now"):
            allocator.allocate("gpu-c", 1)
        for container in created:
            container.reload()
        requests = [c.attrs["HostConfig"]["DeviceRequests"] for c in created]
        assert [[(r["DeviceIDs"], r["Capabilities"]) for r in req] for req in requests] == [
            [(["0"], [["gpu"]])],
            [(["1"], [["gpu"]])],
        ]
        envs = [dict(e.split("=", 1) for e in c.attrs["Config"]["Env"]) for c in created]
        # Inside a container the runtime renumbers the devices it exposes from 0.
        assert [(e["NVIDIA_VISIBLE_DEVICES"], e["CUDA_VISIBLE_DEVICES"]) for e in envs] == [("0", "0"), ("1", "0")]
        allocator.release("gpu-a")
        assert allocator.allocate("gpu-c", 1) == [0]
    finally:
        for container in created:
            container.remove(force=True)


def test_gpu_job_on_an_engine_without_nvidia_runtime_fails_clearly(
    tmp_path, controller_home, docker_client, busybox_image
):
    data_dir = tmp_path / "agent"
    agent = start_docker_agent(data_dir, controller_home, "--executor", "docker", env={"LANPOOL_FAKE_GPUS": "0,1"})
    try:
        hello = asyncio.run(_hello(agent))
        assert hello.resources["gpus"] == 2 and hello.resources["executor"] == "docker"
        for job_id in ("g1", "g2"):  # the first one's GPU is released when it fails, so both get as far
            submit(agent, job_id, ["echo never"], busybox_image, resources={"gpu": 2})
            chunks, final = follow(agent, job_id)
            assert final.state == JobState.FAILED and _lines(chunks, "out") == []
            assert final.error.startswith("could not start the container: could not select device driver"), final.error
        with pytest.raises(
            RunnerError, match="the job needs 3 GPU and this runner has 2 in all: it can never run here"
        ):
            submit(agent, "g3", ["echo never"], busybox_image, resources={"gpu": 3})
        assert containers_of(docker_client, "g1") == containers_of(docker_client, "g2") == []
    finally:
        agent.stop()
        remove_agent_containers(docker_client, data_dir)


async def _hello(agent):
    session = await open_session(agent)
    async with session:
        return session.hello


# -- clean-up ----------------------------------------------------------------------------------------


def test_gc_removes_this_agents_leftover_containers_only(tmp_path, docker_client, busybox_image, cli):
    from lanpool.agent.jobs.journal import JobRecord

    data_dir = (tmp_path / "agent").resolve()
    for job_id, state in (("running1", "RUNNING"), ("done1", "DONE")):
        (data_dir / "jobs" / job_id).mkdir(parents=True)
        JobRecord(job_id, "r", "w", ["true"], {}, [], state=state, executor="docker").save(data_dir / "jobs" / job_id)

    def make(job_id: str, agent: Path):
        return docker_client.containers.create(
            busybox_image, ["true"], labels={"lanpool.job": job_id, "lanpool.run": "r", "lanpool.agent": str(agent)}
        )

    kept = [make("running1", data_dir), make("done1", tmp_path / "another-agent")]
    gone = [make("done1", data_dir), make("unknown1", data_dir)]
    try:
        res = cli("agent", "gc", "--data-dir", str(data_dir), check=True)
        assert "2 leftover container(s) removed; 1 unfinished job(s)" in res.stdout
        left = {c.id for c in docker_client.containers.list(all=True, ignore_removed=True)}
        assert all(c.id in left for c in kept) and not any(c.id in left for c in gone)
    finally:
        for container in kept + gone:
            with contextlib.suppress(Exception):
                container.remove(force=True)


def test_job_without_image_is_refused_by_a_containers_only_runner(docker_agent):
    with pytest.raises(RunnerError, match="the job names no image; this runner runs jobs in containers only"):
        submit(docker_agent, "noimg", ["echo hi"], "")


def test_containers_run_as_the_agents_user(docker_client, busybox_image, tmp_path):
    """Tests run the agent as root; an agent of another user is played by the executor's
    `user` (by default the agent's own uid:gid, see the first test)."""
    from lanpool.agent.executors import ExecutorChoice, ProcessExecutor
    from lanpool.agent.executors.docker import DockerExecutor
    from lanpool.agent.home import AgentHome
    from lanpool.agent.jobs.manager import JobManager

    async def scenario():
        home = AgentHome(tmp_path / "agent")
        home.create()
        executor = DockerExecutor.connect(str(home.root), user="4242:4343")
        manager = JobManager(home, ExecutorChoice("docker", ProcessExecutor(), executor))
        await manager.load_journal()
        job = await manager.submit(
            SubmitJob(
                job_id="u1",
                run_name="r",
                workflow="w",
                image=busybox_image,
                commands=["id -u", "id -g", "echo $HOME", "touch $HOME/ok"],
            ),
            None,
        )
        await asyncio.wait_for(manager.wait_terminal(job), 30)
        return job

    try:
        job = asyncio.run(scenario())
    finally:
        remove_agent_containers(docker_client, tmp_path / "agent")
    out = [r.data.decode() for r in job.spool.read(0) if r.stream == "out"]
    assert "".join(out).splitlines() == ["4242", "4343", "/tmp"]
    assert job.record.state == JobState.DONE
