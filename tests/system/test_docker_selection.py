"""Which executor runs a job, GPU allocation, job resources: no Docker engine needed.

Agents here are real processes; where a machine "without Docker" is needed,
DOCKER_HOST points at a socket that does not exist.
"""

import asyncio
import subprocess
import sys

import pytest

from lanpool.agent.errors import JobError
from lanpool.agent.executors import ExecutorChoice, ExecutorError, ProcessExecutor
from lanpool.agent.host.gpus import GpuAllocator, GpuError, detect_gpus, gpu_env
from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.jobs.recovery import spooled_bytes
from lanpool.agent.jobs.request import parse_resources
from lanpool.agent.workspace.spool import LogSpool
from lanpool.app.errors import RunnerError
from lanpool.protocol import JobState
from lanpool.protocol.resources import Resources
from tests.harness import lanpool_env, start_docker_agent
from tests.system.test_docker_executor import _hello, _lines, _stop, follow, submit, wait_for_line

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/lanpool-test-docker.sock"}


class _Docker:
    name = "docker"


def test_executor_choice_table():
    process, docker = ProcessExecutor(), _Docker()
    auto = ExecutorChoice("auto", process, docker)
    assert auto.kind == "docker"
    assert auto.choose("img:1") == (docker, "")
    assert auto.choose("") == (process, "")
    assert auto.choose("img:1", "process") == (
        process,
        "lanpool: image 'img:1' ignored: the job asks for the process executor",
    )
    with pytest.raises(ExecutorError, match="asks for the docker executor but names no image"):
        auto.choose("", "docker")

    auto_without = ExecutorChoice("auto", process, None)
    assert auto_without.kind == "process"
    executor, note = auto_without.choose("img:1")
    assert executor is process and note == (
        "lanpool: no Docker engine on this runner: image 'img:1' ignored, the commands run as plain processes"
    )
    with pytest.raises(ExecutorError, match="no Docker engine answered when its agent started"):
        auto_without.choose("img:1", "docker")

    only_docker = ExecutorChoice("docker", process, docker)
    assert only_docker.choose("img:1") == (docker, "")
    with pytest.raises(ExecutorError, match="names no image; this runner runs jobs in containers only"):
        only_docker.choose("")
    with pytest.raises(ExecutorError, match="asks for the process executor"):
        only_docker.choose("img:1", "process")

    only_process = ExecutorChoice("process", process, docker)  # an engine is ignored in process mode
    assert only_process.kind == "process"
    assert only_process.choose("") == (process, "")
    with pytest.raises(ExecutorError, match="image 'img:1' and this runner cannot run containers: it runs jobs as"):
        only_process.choose("img:1")
    with pytest.raises(ExecutorError, match="unknown executor 'k8s'"):
        auto.choose("img:1", "k8s")


def test_gpu_allocator_hands_out_each_index_once():
    gpus = GpuAllocator([3, 1, 2])
    assert gpus.allocate("a", 2) == [1, 2]
    with pytest.raises(GpuError, match="the job needs 2 GPUs; 1 of this runner's 3 is free now"):
        gpus.allocate("b", 2)
    assert gpus.allocate("b", 1) == [3]
    assert gpus.allocate("c", 0) == []
    gpus.release("a")
    assert gpus.free == [1, 2]
    gpus.claim("d", [2])
    assert gpus.free == [1]
    with pytest.raises(GpuError, match="the job needs 1 GPU and this runner has none"):
        GpuAllocator([]).allocate("x", 1)


def test_fake_gpus_and_gpu_env(monkeypatch):
    monkeypatch.setenv("LANPOOL_FAKE_GPUS", "0, 2")
    assert [g.index for g in detect_gpus()] == [0, 2]
    assert gpu_env([2], in_container=False) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "2"}
    assert gpu_env([2, 3], in_container=True) == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NVIDIA_VISIBLE_DEVICES": "2,3",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    assert (
        gpu_env([], in_container=True)["NVIDIA_VISIBLE_DEVICES"] == "void"
    )  # no GPU, even on an nvidia default runtime


def test_job_resources_are_checked():
    assert parse_resources({}) == Resources()
    assert parse_resources({"gpu": 2, "memory_mb": "512", "cpu": "1.5", "shm_size": "8g"}) == Resources(
        gpu=2, memory_mb=512, cpu=1.5, shm_size="8g"
    )
    for bad in ({"gpu": -1}, {"gpu": "two"}, {"memory_mb": 0}, {"cpu": "x"}, {"shm_size": "8 gigs"}):
        with pytest.raises(JobError):
            parse_resources(bad)


def test_spooled_bytes_take_off_the_newlines_the_agent_added(tmp_path):
    record = JobRecord("j", "r", "w", ["true"], {}, [], executor="docker")
    spool = LogSpool(tmp_path / "log.spool")

    def note_cut(stream: str) -> None:  # what the job manager's sink does before writing a cut line
        record.settle_last_cut(spool.size)
        record.last_cut = [stream, spool.size]

    spool.append("out", b"a\nbb\n")
    note_cut("out")
    spool.append("out", b"x" * 10 + b"\n")  # the job printed 10 bytes, no newline
    spool.append("sys", b"lanpool: something\n")
    note_cut("err")  # ... and the agent died before writing that line
    record.settle_last_cut(spool.size)  # the next start
    assert record.log_cuts == {"out": 1} and record.last_cut == []
    spool.append("err", b"e\n")
    assert spooled_bytes(spool, record.log_cuts) == {"out": 5 + 10, "err": 2}


# -- real agents without an engine --------------------------------------------------------------------


def test_auto_without_engine_runs_image_jobs_as_processes(tmp_path, controller_home):
    agent = start_docker_agent(tmp_path / "agent", controller_home, env=NO_ENGINE)  # --executor auto
    try:
        assert asyncio.run(_hello(agent)).resources["executor"] == "process"
        submit(agent, "p1", ["echo plain $LANPOOL_JOB_ID"], "lanpool-test/busybox:1")
        chunks, final = follow(agent, "p1")
        assert _lines(chunks, "out") == ["plain p1"] and final.state == JobState.DONE
        assert _lines(chunks, "sys") == [
            "lanpool: no Docker engine on this runner: image 'lanpool-test/busybox:1' "
            "ignored, the commands run as plain processes"
        ]
    finally:
        agent.stop()


def test_process_runner_refuses_image_jobs_and_docker_runner_needs_an_engine(tmp_path, controller_home):
    agent = start_docker_agent(tmp_path / "agent", controller_home, "--executor", "process")
    try:
        with pytest.raises(RunnerError, match="the job needs image 'x:1' and this runner cannot run containers"):
            submit(agent, "i1", ["echo hi"], "x:1")
    finally:
        agent.stop()
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "lanpool.app.cli.main",
            "agent",
            "serve",
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            "--data-dir",
            str(tmp_path / "agent2"),
            "--executor",
            "docker",
        ],
        env={**lanpool_env(controller_home), **NO_ENGINE},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 1 and "Traceback" not in res.stderr
    [line] = res.stderr.strip().splitlines()
    assert line.startswith(
        "app agent: error: --executor docker: no Docker engine answers at unix:///nonexistent/lanpool-test-docker.sock"
    )


def test_gpus_are_shared_out_between_running_process_jobs(tmp_path, controller_home):
    agent = start_docker_agent(
        tmp_path / "agent", controller_home, "--executor", "process", env={"LANPOOL_FAKE_GPUS": "0,1"}
    )
    try:
        assert asyncio.run(_hello(agent)).resources["gpus"] == 2
        hold = ['echo "gpus=$CUDA_VISIBLE_DEVICES"', "sleep 30"]
        for job_id in ("a", "b"):
            submit(agent, job_id, hold, "", resources={"gpu": 1})
            wait_for_line(agent, job_id, "gpus=")
        # No GPU free now: the job waits in the runner's queue, then gets the first one freed.
        queued = submit(agent, "c", ['echo "gpus=$CUDA_VISIBLE_DEVICES"'], "", resources={"gpu": 1})
        assert queued.state == "QUEUED", queued
        assert queued.reason.startswith("waiting for 1 GPU: 0 of 2 free; held by lanpool-controller (w, 1 GPU, "), (
            queued
        )
        submit(agent, "none", ['echo "gpus=[$CUDA_VISIBLE_DEVICES]"'], "", resources={"gpu": 0})
        asyncio.run(_stop(agent, "a", grace_s=0))
        follow(agent, "a")  # ended: its GPU is free again, and "c" takes it
        seen = {
            job_id: _lines(follow(agent, job_id)[0] if job_id != "b" else [], "out") for job_id in ("a", "c", "none")
        }
        assert seen == {"a": ["gpus=0"], "c": ["gpus=0"], "none": ["gpus=[]"]}
        asyncio.run(_stop(agent, "b", grace_s=0))
        assert _lines(follow(agent, "b")[0], "out") == ["gpus=1"]
    finally:
        agent.stop()
