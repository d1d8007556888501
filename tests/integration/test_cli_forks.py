"""The tests' `app` processes forked from one with the CLI imported (tests/cli_forkserver.py) are
the same program as a new interpreter: the same output, stderr, exit code, working directory and
environment; a timeout ends the process as subprocess.run's does."""

import os
import signal
import subprocess

import pytest

from tests.harness import APP_MODULE, fork_server, lanpool_env


@pytest.mark.parametrize(
    "args", [("--version",), ("headless", "no-such-verb"), ("headless", "status", "--json"), ("headless", "plan")]
)
def test_a_forked_app_says_and_exits_as_a_new_interpreter(args, controller_home, make_project):
    forks = fork_server()
    assert forks is not None, "the integration tier forks its `app` processes (LANPOOL_TESTS_PLAIN_CLI unset)"
    project = make_project("workflows:\n  - name: a\n    commands: [echo a]\n")
    env = lanpool_env(controller_home, LANPOOL_SOME_SETTING="x")
    plain = subprocess.run([*APP_MODULE, *args], cwd=project, env=env, capture_output=True, text=True, timeout=60)
    forked = forks.run(list(args), str(project), env, 60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (plain.returncode, plain.stdout, plain.stderr)


def test_a_forked_app_past_its_timeout_is_killed(agent, cli, controller_home, make_project):
    forks = fork_server()
    assert forks is not None
    project = make_project("workflows:\n  - name: w\n    commands: [echo started, sleep 60]\n")
    cli("headless", "runners", "add", agent.address, check=True)
    env = lanpool_env(controller_home)
    with open(os.devnull, "rb") as stdin, open(os.devnull, "wb") as sink:
        argv = ["headless", "run", "w", "--runner", agent.address]
        proc = forks.spawn(argv, str(project), env, (stdin.fileno(), sink.fileno(), sink.fileno()))
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(1)  # it follows the job: still running
    assert proc.poll() is None
    proc.kill()
    assert proc.wait(30) == -signal.SIGKILL
    assert cli("headless", "stop", "--all", "--yes", "--abort").returncode == 0
