"""Slurm jobs across agent restarts, retries and limits: a real agent (`--executor slurm`) on
the private cluster (scripts/slurm), as in tests/system/test_slurm_executor.py.

- a retried job re-adopted mid-attempt resumes its log exactly (earlier attempts' bytes counted);
- a Slurm job whose id file is missing (the agent died between sbatch and writing it) is
  found by its name and this agent's batch script, and a decoy with the same name is not;
- a Slurm job of a lanpool job the agent no longer has is cancelled at start;
- Slurm's own --time ending a job is named in its status;
- an unusable SLURM_CONF stops the agent within seconds with one line.
"""

import asyncio
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lanpool.protocol import JobState
from tests.harness import APP_MODULE, lanpool_env
from tests.system import test_slurm_executor as ex
from tests.system.test_slurm_executor import (
    SLURM_CONF,
    _attach,
    _squeue_cancel_ours,
    _start,
    follow,
    lines,
    out_lines_now,
    status,
    submit,
    wait_until,
)

# the executor tests' fixtures (the cluster, an agent on it)
slurm_cluster = ex.slurm_cluster
slurm_agent = ex.slurm_agent

_ENV = {**os.environ, "SLURM_CONF": SLURM_CONF}


def _slurm_id(agent, job_id: str) -> str:
    def found() -> str:
        chunks, _ = asyncio.run(_attach(agent, job_id, False))
        ids = [line.split()[3] for line in lines(chunks, "sys") if "submitted" in line]
        return ids[-1] if ids else ""

    return wait_until(found, what="the Slurm job id")


def _squeue_state(slurm_id: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", slurm_id, "-o", "%T"], capture_output=True, text=True, env=_ENV
    )
    return out.stdout.strip()


def _kill(agent) -> None:
    agent.proc.send_signal(signal.SIGKILL)  # no goodbye: the journal is all the next agent has
    agent.proc.wait()


def _job_dir(tmp_path: Path, job_id: str) -> Path:
    return tmp_path / "shared" / "jobs" / job_id


def test_a_retried_job_readopted_mid_attempt_resumes_its_log_exactly(tmp_path, controller_home, slurm_cluster):
    agent = _start(tmp_path, controller_home, slurm_cluster)
    try:
        submit(
            agent,
            "rr1",
            [
                # attempt 1 prints two lines and fails; attempt 2 (same workspace) prints 40
                "if [ ! -e first-done ]; then echo a-1; echo a-2 >&2; touch first-done; exit 1; fi",
                "for i in $(seq 1 40); do echo b-$i; echo e-$i >&2; sleep 0.05; done",
            ],
            retry_on=["failure"],
            retry_limit=1,
            retry_delay_s=0.0,
        )
        wait_until(lambda: "b-5" in out_lines_now(agent, "rr1"), timeout=60, what="attempt 2's fifth line")
        _kill(agent)
        time.sleep(0.5)  # lines printed while no agent watched
        agent = _start(tmp_path, controller_home, slurm_cluster)
        chunks, final = follow(agent, "rr1")
    finally:
        agent.stop()
        _squeue_cancel_ours(tmp_path)
    assert final.state == JobState.DONE, (final, lines(chunks, "sys"))
    assert lines(chunks, "out") == ["a-1"] + [f"b-{i}" for i in range(1, 41)]
    assert lines(chunks, "err") == ["a-2"] + [f"e-{i}" for i in range(1, 41)]


def test_a_job_whose_id_file_is_missing_is_found_by_name(tmp_path, controller_home, slurm_cluster):
    agent = _start(tmp_path, controller_home, slurm_cluster)
    try:
        submit(agent, "o1", ["for i in $(seq 1 40); do echo line-$i; sleep 0.05; done"])
        wait_until(lambda: len(out_lines_now(agent, "o1")) >= 3, what="three lines")
        _kill(agent)
        # as if the agent died right after sbatch, before writing the id
        (_job_dir(tmp_path, "o1") / "slurm" / "slurm_job_id").unlink()
        agent = _start(tmp_path, controller_home, slurm_cluster)
        chunks, final = follow(agent, "o1")
    finally:
        agent.stop()
        _squeue_cancel_ours(tmp_path)
    assert final.state == JobState.DONE, (final, lines(chunks, "sys"))
    assert lines(chunks, "out") == [f"line-{i}" for i in range(1, 41)]
    assert any("found by its name" in line for line in lines(chunks, "sys"))


def test_a_decoy_with_the_jobs_name_is_neither_adopted_nor_cancelled(tmp_path, controller_home, slurm_cluster):
    agent = _start(tmp_path, controller_home, slurm_cluster)
    decoy = ""
    try:
        submit(agent, "o2", ["echo started", "sleep 4", "echo end"])
        real = _slurm_id(agent, "o2")
        wait_until(lambda: "started" in out_lines_now(agent, "o2"), what="the job's first line")
        _kill(agent)
        (_job_dir(tmp_path, "o2") / "slurm" / "slurm_job_id").unlink()
        # someone else's job with the same name (another agent, a user) running another script
        decoy = subprocess.run(
            ["sbatch", "--parsable", "--job-name=lanpool-o2", f"--output={tmp_path}/decoy.out", "--wrap", "sleep 60"],
            capture_output=True,
            text=True,
            env=_ENV,
            check=True,
        ).stdout.strip()
        agent = _start(tmp_path, controller_home, slurm_cluster)
        chunks, final = follow(agent, "o2")
        assert final.state == JobState.DONE and lines(chunks, "out") == ["started", "end"], final
        assert any(f"Slurm job {real} found by its name" in line for line in lines(chunks, "sys"))
        assert _squeue_state(decoy) in ("PENDING", "RUNNING"), "the decoy was touched"
    finally:
        agent.stop()
        if decoy:
            subprocess.run(["scancel", decoy], env=_ENV, check=False)
        _squeue_cancel_ours(tmp_path)


def test_a_slurm_job_the_agent_no_longer_has_is_cancelled_at_start(tmp_path, controller_home, slurm_cluster):
    agent = _start(tmp_path, controller_home, slurm_cluster)
    try:
        submit(agent, "x1", ["echo started", "sleep 120"])
        slurm_id = _slurm_id(agent, "x1")
        wait_until(lambda: "started" in out_lines_now(agent, "x1"), what="the job's first line")
        _kill(agent)
        (_job_dir(tmp_path, "x1") / "job.json").unlink()  # its record is gone: nothing would watch it
        agent = _start(tmp_path, controller_home, slurm_cluster)
        wait_until(lambda: _squeue_state(slurm_id) in ("", "CANCELLED", "COMPLETED"), what="the stray cancelled")
    finally:
        agent.stop()
        _squeue_cancel_ours(tmp_path)


@pytest.mark.slow
def test_slurms_time_limit_ending_a_job_is_named(slurm_agent):
    submit(slurm_agent, "tl1", ["echo started", "sleep 300"])
    slurm_id = _slurm_id(slurm_agent, "tl1")
    wait_until(lambda: "started" in out_lines_now(slurm_agent, "tl1"), what="the job's first line")
    # the backstop as if max_duration were past it (Slurm checks limits about every 30 s)
    subprocess.run(["scontrol", "update", f"JobId={slurm_id}", "TimeLimit=0:01"], env=_ENV, check=True)
    chunks, final = follow(slurm_agent, "tl1", timeout=150)
    assert final.state == JobState.FAILED, (final, lines(chunks, "sys"))
    assert final.error == "stopped: Slurm time limit (--time) reached", final
    assert status(slurm_agent, "tl1").error == final.error


def test_an_unusable_slurm_conf_stops_the_agent_with_one_line(tmp_path, controller_home, slurm_cluster):
    conf = tmp_path / "slurm.conf"
    # the controller's address moved to a port nothing listens on
    text = Path(SLURM_CONF).read_text()
    conf.write_text(re.sub(r"(?m)^SlurmctldPort=.*$", "SlurmctldPort=9", text))
    env = {**lanpool_env(controller_home), "SLURM_CONF": str(conf)}
    t0 = time.time()
    done = subprocess.run(
        [*APP_MODULE, "agent", "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", str(tmp_path / "a")]
        + ["--executor", "slurm", "--slurm-dir", str(tmp_path / "shared")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    took = time.time() - t0
    assert done.returncode != 0
    err = done.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "sinfo" in err and "SLURM_CONF" in err, err
    assert took < 20, took


def test_a_job_still_pending_in_slurm_when_readopted_shows_queued_then_runs(tmp_path, controller_home, slurm_cluster):
    blocker = subprocess.run(
        ["sbatch", "--parsable", "-N", "2", "--exclusive", f"--output={tmp_path}/blocker.out", "--wrap", "sleep 120"],
        capture_output=True,
        text=True,
        env=_ENV,
        check=True,
    ).stdout.strip()
    agent = _start(tmp_path, controller_home, slurm_cluster)
    try:
        submit(agent, "q1", ["echo ran-after-all"])
        wait_until(lambda: status(agent, "q1").state == JobState.QUEUED, what="QUEUED before the restart")
        _kill(agent)
        agent = _start(tmp_path, controller_home, slurm_cluster)
        queued = wait_until(
            lambda: (s := status(agent, "q1")).state == JobState.QUEUED and s.reason and s,
            what="QUEUED with Slurm's reason after the restart",
        )
        assert queued.reason.startswith("Slurm: "), queued
        time.sleep(1.5)  # polled again meanwhile: still pending, still QUEUED (not RUNNING)
        assert status(agent, "q1").state == JobState.QUEUED
        subprocess.run(["scancel", blocker], env=_ENV, check=True)
        wait_until(lambda: status(agent, "q1").state != JobState.QUEUED, what="no longer QUEUED once Slurm runs it")
        chunks, final = follow(agent, "q1")
    finally:
        subprocess.run(["scancel", blocker], env=_ENV, check=False)
        agent.stop()
        _squeue_cancel_ours(tmp_path)
    assert final.state == JobState.DONE and lines(chunks, "out") == ["ran-after-all"], (final, lines(chunks, "sys"))
