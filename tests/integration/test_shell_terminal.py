"""`app headless ssh`'s client (app/shell/into_job.py run_shell) against a real agent: the job's output
is written straight from the channel's callback to our stdout, so it must arrive whole and in
order even when stdout is a slow reader's non-blocking pipe, and the job's exit code is ours."""

import fcntl
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

from tests.system.test_docker_executor import _stop, submit, wait_for_line

REPO = Path(__file__).resolve().parents[2]

# run_shell with a PTY as stdin (it insists on a terminal) and, as stdout, a pipe set non-blocking.
CLIENT = """
import asyncio, fcntl, os, sys
from lanpool.app.home import ControllerHome
from lanpool.app.shell.into_job import run_shell
from lanpool.app.keys import load_or_create_client_key
from lanpool.app.runners.client import RunnerSession
fcntl.fcntl(1, fcntl.F_SETFL, fcntl.fcntl(1, fcntl.F_GETFL) | os.O_NONBLOCK)
async def main():
    key = load_or_create_client_key(ControllerHome.default().key)
    async with await RunnerSession.open(sys.argv[1], int(sys.argv[2]), key, None) as session:
        return await run_shell(session, sys.argv[3], ["sh", "-c", sys.argv[4]])
sys.exit(asyncio.run(main()))
"""

SIZE = 2_000_000


def _shell(agent, job_id: str, command: str) -> tuple[int, bytes]:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", CLIENT, agent.host, str(agent.port), job_id, command],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    os.close(slave)
    try:
        time.sleep(2.0)  # nobody reads: the client's stdout pipe fills and its writes would block
        assert proc.stdout is not None
        flags = fcntl.fcntl(proc.stdout.fileno(), fcntl.F_GETFL)
        fcntl.fcntl(proc.stdout.fileno(), fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(master)
    assert b"Traceback" not in err, err.decode(errors="replace")
    return proc.returncode, out


def test_a_large_output_to_a_slow_non_blocking_stdout_arrives_whole_with_the_exit_code(agent):
    submit(agent, "termjob", ["echo ready", "sleep 60"], "")
    wait_for_line(agent, "termjob", "ready")
    code, out = _shell(agent, "termjob", f"head -c {SIZE} /dev/zero | tr '\\0' x; echo; echo end-mark; exit 7")
    assert code == 7
    assert out.count(b"x") == SIZE and b"end-mark" in out
    assert out.index(b"end-mark") > out.rindex(b"x")  # in order


def test_a_shell_into_a_job_that_ended_is_one_line_and_no_terminal_left_raw(agent):
    import asyncio

    submit(agent, "gonejob", ["echo ready"], "")
    wait_for_line(agent, "gonejob", "ready")
    asyncio.run(_stop(agent, "gonejob", abort=True, grace_s=0))
    time.sleep(0.5)
    code, out = _shell(agent, "gonejob", "echo never")
    assert code != 0 and b"never" not in out
