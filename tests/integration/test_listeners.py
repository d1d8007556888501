"""Whose socket listens on a port (agent/shell/listeners.py), read from this machine's /proc:
a forward reaches only a port that a process of the job listens on, whatever the job declared."""

import os
import socket
import subprocess
import sys
import time

import pytest

from lanpool.agent.shell.listeners import job_listens

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux's /proc")

SERVE = "import socket, sys, time; s = socket.create_server(('127.0.0.1', 0)); print(s.getsockname()[1], flush=True); time.sleep(60)"


def _server(job_id: str, *, setsid: bool) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ, LANPOOL_JOB_ID=job_id)
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE], env=env, stdout=subprocess.PIPE, text=True, start_new_session=setsid
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def test_a_jobs_own_server_is_its_even_out_of_its_process_group():
    proc, port = _server("job-a", setsid=True)  # left the job's process group: still the job's
    try:
        assert job_listens("job-a", port) is True
        assert job_listens("job-b", port) is False  # another job declaring that port gets nothing
    finally:
        proc.kill()
        proc.wait()


def test_a_server_of_no_job_is_no_jobs_and_a_closed_port_says_nothing():
    with socket.create_server(("127.0.0.1", 0)) as bystander:  # this test's own: no LANPOOL_JOB_ID=job-a
        assert job_listens("job-a", bystander.getsockname()[1]) is False
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    deadline = time.monotonic() + 10
    while job_listens("job-a", port) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job_listens("job-a", port) is None
