"""A job's secrets on the runner (agent/jobs/masking.py, agent/jobs/kept_secrets.py): written ***
in its log however they are printed (split by terminal control sequences, straddling the cut of
a long line), kept 0600 outside every job's reach across an agent restart, so a queued job
still runs with its real values and a re-adopted container is still masked. Real agents over
real SSH, a real Docker engine for the container tests (skipped where none answers).
The part with Docker, Slurm or namespaces (system); the rest: tests/unit/test_runner_secrets.py, tests/integration/test_runner_secrets.py."""

import asyncio
import signal
import stat
from pathlib import Path

from lanpool.protocol import JobState
from tests.docker_harness import remove_agent_containers
from tests.harness import start_docker_agent
from tests.integration.test_runner_secrets import _files_holding
from tests.runner_jobs import ALL_CPUS
from tests.system.test_docker_executor import _attach, _lines, containers_of, follow, submit
from tests.unit.test_runner_secrets import TOKEN


def test_a_re_adopted_container_is_still_masked_on_the_runner(tmp_path, controller_home, docker_client, busybox_image):
    """The agent killed while a container prints its secret; the next agent re-adopts it and
    masks its later lines itself (its secrets were kept), resuming at the exact byte."""
    data = tmp_path / "agent"
    agent = start_docker_agent(data, controller_home, "--executor", "docker")
    script = ["i=0", 'while [ $i -lt 60 ]; do i=$((i+1)); echo "line $i $TOKEN"; sleep 0.1; done']
    try:
        submit(agent, "adopt1", script, busybox_image, env={"TOKEN": TOKEN}, masked=[TOKEN])
        before, status = asyncio.run(asyncio.wait_for(_attach(agent, "adopt1", until_out_lines=5), 60))
        assert status is None, "the job ended before the agent could be killed"
        kept = data / "secrets" / "adopt1.json"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        [container] = containers_of(docker_client, "adopt1")
        sources = [Path(m["Source"]) for m in container.attrs["Mounts"]]
        assert sources and not any(kept.is_relative_to(src) for src in sources), sources  # not in its mounts
        agent.proc.send_signal(signal.SIGKILL)
        agent.proc.wait()
        agent = start_docker_agent(data, controller_home, "--executor", "docker")
        everything, final = follow(agent, "adopt1")
    finally:
        agent.stop()
        remove_agent_containers(docker_client, data)
    out = _lines(everything, "out")
    assert [line.split()[1] for line in out] == [str(i) for i in range(1, 61)], "lines lost or repeated"
    assert all(line.endswith(" ***") for line in out), [line for line in out if not line.endswith("***")]
    assert any("re-attached to container" in line for line in _lines(everything, "sys"))
    assert final.state == JobState.DONE
    # Only the container's own output files (stdio/, written by the job itself) hold what it printed.
    assert not kept.exists() and _files_holding(data, TOKEN) == [data / "jobs" / "adopt1" / "stdio" / "out"]


def test_a_container_job_cannot_reach_kept_secrets(tmp_path, controller_home, docker_client, busybox_image):
    """A container beside a queued job with a secret searches all it sees (its mounts and its
    root) for the kept file or the value: nothing holds them."""
    data = tmp_path / "agent"
    agent = start_docker_agent(data, controller_home, "--executor", "docker", env=ALL_CPUS)
    snoop = [
        "while [ ! -e /workspace/go ]; do sleep 0.1; done",
        "ls -la / /workspace/.. /.lanpool-stdio 2>&1",
        'for d in /*; do case $d in /proc|/sys|/dev) ;; *) grep -rs -l -e tk- -e \'"masked"\' "$d" || true ;; esac; done',
        "echo snooped",
    ]
    busy = {"resources": {"cpu": 2}}
    try:
        submit(agent, "snoop", snoop, busybox_image, **busy)
        victim = submit(
            agent, "victim", ['echo "token=$TOKEN"'], busybox_image, env={"TOKEN": TOKEN}, masked=[TOKEN], **busy
        )
        assert victim.state == JobState.QUEUED
        assert (data / "secrets" / "victim.json").exists()
        (data / "jobs" / "snoop" / "workspace" / "go").touch()
        chunks, final = follow(agent, "snoop")
        victim_chunks, victim_end = follow(agent, "victim")
    finally:
        agent.stop()
        remove_agent_containers(docker_client, data)
    text = b"".join(c.data for c in chunks).decode()
    assert "snooped" in text and final.state == JobState.DONE, text
    assert TOKEN not in text and "victim" not in text and "secrets" not in text, text
    assert victim_end.state == JobState.DONE and _lines(victim_chunks, "out") == ["token=***"]
