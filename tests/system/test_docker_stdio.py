"""A container job's output read from its stdio/ files (agent/executors/docker_stdio.py):
exact across an agent killed mid-output, and safe against what the job does to those files.
A real agent process and a real Docker engine, as in test_docker_executor.py."""

import asyncio
import signal
from pathlib import Path

from lanpool.protocol import JobState
from tests.docker_harness import remove_agent_containers
from tests.harness import start_docker_agent
from tests.system.test_docker_executor import _attach, _lines, containers_of, follow, submit, wait_for_line


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _kill_and_restart(agent, data_dir: Path, controller_home: Path):
    agent.proc.send_signal(signal.SIGKILL)  # no chance to clean up or write anything
    agent.proc.wait()
    return start_docker_agent(data_dir, controller_home, "--executor", "docker")


def test_agent_killed_while_a_container_prints_fast_loses_and_repeats_no_line(
    tmp_path, controller_home, docker_client, busybox_image
):
    data_dir = tmp_path / "agent"
    agent = start_docker_agent(data_dir, controller_home, "--executor", "docker")
    # 40 bursts of 5000 lines as fast as awk prints them, on both streams, the last line without newline.
    script = [
        "b=0",
        'while [ $b -lt 40 ]; do busybox awk -v b=$b \'BEGIN { for (j = 1; j <= 5000; j++) print "line " b * 5000 + j;'
        ' print "err " b > "/dev/stderr" }\'; b=$((b+1)); sleep 0.1; done',
        "printf 'last, without newline'",
    ]
    try:
        submit(agent, "fast1", script, busybox_image)
        before, status = asyncio.run(asyncio.wait_for(_attach(agent, "fast1", until_out_lines=20000), 60))
        assert status is None, "the job ended before the agent could be killed"
        agent.proc.send_signal(signal.SIGKILL)  # no chance to clean up or write anything
        agent.proc.wait()
        [container] = containers_of(docker_client, "fast1")
        assert container.logs() == b"", "the job's output bypasses the engine's log"
        agent = start_docker_agent(data_dir, controller_home, "--executor", "docker")
        resumed_from = before[-1].seq + before[-1].n_lines
        rest, final = follow(agent, "fast1", from_seq=resumed_from)
        everything, _ = follow(agent, "fast1")
    finally:
        agent.stop()
        remove_agent_containers(docker_client, data_dir)

    expected_out = [f"line {i}" for i in range(1, 200001)] + ["last, without newline"]
    assert _lines(before + rest, "out") == expected_out  # what a controller that resumed got
    assert _lines(everything, "out") == expected_out  # what the spool holds
    assert _lines(everything, "err") == [f"err {b}" for b in range(40)]
    assert any("re-attached to container" in line for line in _lines(everything, "sys"))
    seqs = [(c.seq, c.n_lines) for c in everything]
    assert all(a[0] + a[1] == b[0] for a, b in zip(seqs, seqs[1:], strict=False)), "sequence numbers have a gap"
    assert final.state == JobState.DONE and final.exit_code == 0


def test_a_link_or_fifo_in_place_of_the_output_files_is_never_read(
    tmp_path, controller_home, docker_client, busybox_image
):
    """The job swaps its stdout file for a link to a host file and its stderr file for a
    FIFO, then the agent restarts and opens them again: it reads neither, nor hangs."""
    secret = tmp_path / "host-secret"
    secret.write_text("host secret the job must not see\n")
    data_dir = tmp_path / "agent"
    agent = start_docker_agent(data_dir, controller_home, "--executor", "docker")
    script = [
        "echo before",
        f"rm /.lanpool-stdio/out && ln -s {secret} /.lanpool-stdio/out",
        "rm /.lanpool-stdio/err && mkfifo /.lanpool-stdio/err",
        "touch /workspace/swapped",
        "sleep 4",
    ]
    try:
        submit(agent, "swap1", script, busybox_image)
        wait_for_line(agent, "swap1", "before")  # read through the file the agent holds open
        swapped = data_dir / "jobs" / "swap1" / "workspace" / "swapped"
        asyncio.run(asyncio.wait_for(_until(swapped.exists), 30))
        agent = _kill_and_restart(agent, data_dir, controller_home)
        chunks, final = follow(agent, "swap1")
    finally:
        agent.stop()
        remove_agent_containers(docker_client, data_dir)
    text = b"".join(c.data for c in chunks)
    assert b"host secret" not in text
    assert _lines(chunks, "out") == ["before"]
    sys_lines = _lines(chunks, "sys")
    assert any("stdout file was replaced" in line for line in sys_lines), sys_lines
    assert any("stderr file was replaced" in line for line in sys_lines), sys_lines
    assert final.state == JobState.DONE


def test_a_huge_line_and_binary_output_are_cut_with_memory_bounded(docker_agent, busybox_image):
    """64 MB without a newline, then binary: delivered in 64 KiB pieces, each byte once,
    while the agent's peak memory stays far below what the job wrote."""
    size = 64 * 2**20
    peak_before = _peak_rss_mb(docker_agent.proc.pid)
    script = [f"head -c {size} /dev/zero | tr '\\0' 'x'", "head -c 300000 /dev/urandom", "printf '\\nend\\n'"]
    submit(docker_agent, "huge1", script, busybox_image)
    chunks, final = follow(docker_agent, "huge1")
    peak_after = _peak_rss_mb(docker_agent.proc.pid)
    assert final.state == JobState.DONE
    out = b"".join(c.data for c in chunks if c.stream == "out")
    lines = out.split(b"\n")
    assert lines[-2:] == [b"end", b""]
    assert all(len(line) <= 64 * 1024 for line in lines)
    assert b"".join(lines[: size // (64 * 1024)]) == b"x" * size  # the line, in whole pieces, in order
    assert peak_after - peak_before < 48, f"agent peak memory grew {peak_after - peak_before:.0f} MB"


async def _until(cond, poll: float = 0.1) -> None:
    while not cond():
        await asyncio.sleep(poll)


def test_a_container_an_older_agent_started_is_read_through_the_log_api(docker_client, busybox_image):
    """No stdio/ mount (started before output went to files): re-adopted, its output comes
    from the engine's log, from the bytes the spool already holds on."""
    from lanpool.agent.executors.docker import _stdio_of
    from lanpool.agent.executors.docker_container import DockerExecution

    container = docker_client.containers.run(
        busybox_image, ["sh", "-c", "echo one; echo two; echo oops >&2; printf three"], detach=True
    )
    got: list[tuple[str, bytes]] = []

    async def adopt() -> int:
        execution = DockerExecution(
            container, lambda s, d, cut=False: got.append((s, d)), {"out": 4}, _stdio_of(container)
        )
        return (await asyncio.wait_for(execution.wait(), 60)).exit_code

    try:
        assert _stdio_of(container) is None
        assert asyncio.run(adopt()) == 0
    finally:
        container.remove(force=True)
    assert b"".join(d for s, d in got if s == "out") == b"two\nthree\n"  # "one\n" was spooled before
    assert b"".join(d for s, d in got if s == "err") == b"oops\n"


def test_a_masked_secret_in_the_output_does_not_shift_where_a_restarted_agent_resumes(
    tmp_path, controller_home, docker_client, busybox_image
):
    """Lines holding a secret are spooled with *** (fewer bytes than printed): a restarted agent
    must still resume right after the last byte the job printed, not that many bytes early
    (repeated lines) or late (lost ones)."""
    secret = "s3cret-value-0123456789"
    data_dir = tmp_path / "agent"
    agent = start_docker_agent(data_dir, controller_home, "--executor", "docker")
    script = [
        "b=0",
        'while [ $b -lt 40 ]; do busybox awk -v b=$b -v s="$TOKEN" \'BEGIN { for (j = 1; j <= 500; j++)'
        ' print "line " b * 500 + j " " s }\'; b=$((b+1)); sleep 0.1; done',
    ]
    try:
        submit(agent, "mask1", script, busybox_image, env={"TOKEN": secret}, masked=[secret])
        before, status = asyncio.run(asyncio.wait_for(_attach(agent, "mask1", until_out_lines=2000), 60))
        assert status is None, "the job ended before the agent could be killed"
        assert all("***" in line and secret not in line for line in _lines(before, "out"))
        agent = _kill_and_restart(agent, data_dir, controller_home)
        everything, final = follow(agent, "mask1")
    finally:
        agent.stop()
        remove_agent_containers(docker_client, data_dir)
    numbers = [int(line.split()[1]) for line in _lines(everything, "out")]
    assert numbers == list(range(1, 20001)), "lines lost or repeated around the restart"
    # The restarted agent masks too: it read the job's secrets back (agent.jobs.kept_secrets).
    assert all(line.endswith(" ***") for line in _lines(everything, "out"))
    assert final.state == JobState.DONE
