"""The controller against a hostile runner (tests/hostile_runner.py: real asyncssh, the
real protocol encoder, real SQLite): a runner writes only its own job's log and state,
a status it cannot read ends the follow with one line, job log text reaches no
terminal as escapes. Artifacts from a hostile runner: tests/integration/test_artifact_stream.py.
The part with real agents and the CLI (integration); the rest: tests/unit/test_hostile_runner.py."""

import asyncio
import logging
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from lanpool.app.controller import Controller
from lanpool.app.errors import RunnerProtocolError
from lanpool.protocol import JobState, LogChunk
from tests.harness import REPO, lanpool_env
from tests.hostile_runner import Script, hostile, seed_job, trusted_runner
from tests.unit.test_hostile_runner import ESCAPES

_ = hostile  # a fixture from hostile_runner: the tests name it


def _follow(ctl: Controller, job_id: str, timeout: float = 20.0, sink=None):
    return asyncio.run(asyncio.wait_for(ctl.follow(job_id, sink, follow=True), timeout))


def _log(ctl: Controller, job_id: str, node: int | None = None) -> bytes:
    return b"".join(d for n, _s, _st, d in ctl.store.log_chunks(job_id) if node is None or n == node)


def test_a_run_through_the_harness_streams_its_log_and_brings_back_artifacts(hostile, ctl, make_project):
    project = make_project("workflows:\n  - name: wf\n    commands: [echo hi]\n    artifacts: [out]\n")
    hostile.default_script = Script(log=b"line 1\nline 2\n", files={"out/a.txt": b"hello"}, declared=[("out/a.txt", 5)])
    seen: list[bytes] = []
    outcome = asyncio.run(
        asyncio.wait_for(
            ctl.run(ctl.load_project(project), "wf", hostile.address, sink=lambda _j, _s, d: seen.append(d)), 60
        )
    )
    job = outcome.last
    assert job.state is JobState.DONE and job.artifacts_pulled == 1
    assert b"".join(seen) == b"line 1\nline 2\n" == _log(ctl, job.id)
    assert (ctl.home.job_artifacts(job.id) / "out" / "a.txt").read_bytes() == b"hello"


def test_lines_for_another_job_or_node_are_dropped_with_one_warning(hostile, ctl, caplog):
    other_row = ctl.store.runner(hostile.name)
    seed_job(ctl.store, other_row, "victim")
    ctl.store.add_log_chunks([("victim", 0, 0, 1, "out", b"the victim's own line\n")])
    seed_job(ctl.store, other_row, "mine")
    hostile.add(
        Script(
            job_id="mine",
            log=b"my line\n",
            extra_chunks=[
                LogChunk("victim", 0, "out", b"INJECTED over line 0\n"),
                LogChunk("victim", 1, "out", b"INJECTED after\n"),
                LogChunk("mine", 5, "out", b"INJECTED as node 3\n", node=3),
            ],
        )
    )
    with caplog.at_level(logging.WARNING, logger="lanpool.app.jobs.own_output"):
        job = _follow(ctl, "mine")
    assert job.state is JobState.DONE
    assert _log(ctl, "victim") == b"the victim's own line\n"
    assert _log(ctl, "mine") == b"my line\n"
    assert ctl.store.log_nodes("mine") == [0]
    warnings = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


def test_a_gang_node_cannot_write_another_nodes_log(tmp_path, ctl):
    r0, r1 = trusted_runner(tmp_path, ctl, "node-zero"), trusted_runner(tmp_path, ctl, "node-one")
    try:
        rows = [ctl.store.runner(r0.name), ctl.store.runner(r1.name)]
        seed_job(ctl.store, rows[0], "victim")
        ctl.store.add_log_chunks([("victim", 0, 0, 1, "out", b"victim\n")])
        seed_job(ctl.store, rows[0], "gang", nodes=rows)
        r0.add(Script(job_id="gang", log=b"node zero says\n"))
        r1.add(
            Script(
                job_id="gang",
                log=b"node one says\n",
                extra_chunks=[
                    LogChunk("gang", 1, "out", b"INJECTED as node 7\n", node=7),
                    LogChunk("victim", 1, "out", b"INJECTED into victim\n"),
                ],
            )
        )
        job = _follow(ctl, "gang")
        assert job.state is JobState.DONE, job
        assert _log(ctl, "gang", 0) == b"node zero says\n"
        assert _log(ctl, "gang", 1) == b"node one says\n"
        assert _log(ctl, "victim") == b"victim\n"
    finally:
        r0.stop()
        r1.stop()


def test_a_status_for_another_job_ends_the_follow_and_changes_nothing_else(hostile, ctl):
    row = ctl.store.runner(hostile.name)
    seed_job(ctl.store, row, "victim")
    seed_job(ctl.store, row, "mine")
    hostile.add(Script(job_id="mine", state="FAILED", status_job_id="victim"))
    with pytest.raises(RunnerProtocolError, match="status of job 'victim'"):
        _follow(ctl, "mine")
    assert ctl.store.job("victim").state is JobState.RUNNING
    assert ctl.store.job("mine").state is JobState.RUNNING
    assert hostile.counters.attaches == 1  # not retried


def test_an_unknown_state_ends_the_follow_with_one_line_not_a_reconnect_loop(hostile, ctl, cli):
    seed_job(ctl.store, ctl.store.runner(hostile.name), "odd")
    hostile.add(Script(job_id="odd", log=b"before the odd status\n", raw_status={"state": "EXPLODED"}))
    started = time.monotonic()
    with pytest.raises(RunnerProtocolError) as caught:
        _follow(ctl, "odd")
    assert time.monotonic() - started < 10
    assert "unknown state 'EXPLODED'" in caught.value.message and "stopped following" in caught.value.message
    assert hostile.counters.attaches == 1
    assert _log(ctl, "odd") == b"before the odd status\n"  # what came before it is kept

    # The CLI: one line and an exit code, every time, never a traceback or a loop.
    follow = cli("headless", "logs", "-f", "odd", timeout=30)
    assert follow.returncode == 3, follow
    assert "Traceback" not in follow.stderr
    assert [line for line in follow.stderr.splitlines() if line.startswith("app: error:")] == [
        follow.stderr.strip().splitlines()[-1]
    ]
    assert "unknown state 'EXPLODED'" in follow.stderr
    for args in (("status",), ("logs", "odd")):
        result = cli("headless", *args, timeout=30)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result


def test_a_gang_node_with_an_unknown_state_fails_the_job_with_its_reason(tmp_path, ctl):
    r0, r1 = trusted_runner(tmp_path, ctl, "node-zero"), trusted_runner(tmp_path, ctl, "node-one")
    try:
        rows = [ctl.store.runner(r0.name), ctl.store.runner(r1.name)]
        seed_job(ctl.store, rows[0], "gang", nodes=rows)
        r0.add(Script(job_id="gang"))
        r1.add(Script(job_id="gang", raw_status={"state": "EXPLODED"}))
        job = _follow(ctl, "gang")
        assert job.state is JobState.FAILED
        assert "unknown state 'EXPLODED'" in job.error and "lost" not in job.error
    finally:
        r0.stop()
        r1.stop()


def _pty_output(args: list[str], env: dict) -> bytes:
    """What `app` writes to a terminal: stdout and stderr on a pty."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lanpool.app.cli.main", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=secondary,
        stderr=secondary,
        cwd=REPO,
    )
    os.close(secondary)
    data = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([primary], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            data += chunk
        elif proc.poll() is not None:
            break
    proc.wait(30)
    os.close(primary)
    assert proc.returncode == 0, data
    return data


def test_logs_on_a_terminal_are_neutralised_and_raw_keeps_the_bytes(hostile, ctl, controller_home):
    seed_job(ctl.store, ctl.store.runner(hostile.name), "loud")
    hostile.add(Script(job_id="loud", log=ESCAPES))
    _follow(ctl, "loud")
    assert _log(ctl, "loud") == ESCAPES  # the store keeps the bytes as written
    env = lanpool_env(controller_home)

    shown = _pty_output(["headless", "logs", "loud"], env)
    assert b"\x1b" not in shown and b"\x07" not in shown and b"\xc2\x9b" not in shown
    assert b"^[]52;c;cm0gLXJmIH4K^G" in shown and b"^[]0;pwned^G" in shown and b"^[[2J" in shown
    assert b"secret" in shown

    raw = _pty_output(["headless", "logs", "--raw", "loud"], env)
    assert b"\x1b]52;c;cm0gLXJmIH4K\x07" in raw and b"\x1b[8msecret" in raw

    piped = subprocess.run(
        [sys.executable, "-m", "lanpool.app.cli.main", "headless", "logs", "loud"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert piped.returncode == 0 and piped.stdout == ESCAPES  # a pipe or file gets the bytes as stored
