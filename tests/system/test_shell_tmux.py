"""`app headless ssh` and the TUI's `e` in a real terminal: tmux runs them in a pane, keys go
in with `send-keys`, the screen comes back with `capture-pane`. Real agents on loopback (a
process job, a container job), a run started with the real CLI."""

import json
import shlex
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.harness import lanpool_env
from tests.system.test_tui_tmux import APP, Pane

WORKFLOWS = """
workflows:
  - name: idle
    IMAGE
    env:
      GREETING: hello-from-the-job
    commands:
      - echo ready
      - sleep 120
"""


@pytest.fixture
def agent(shell_agent):
    return shell_agent  # a HOME of its own (tests/conftest.py)


@pytest.fixture
def term(controller_home):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (scripts/test installs it when run as root: apt-get install tmux)")
    if not APP.exists():
        pytest.skip(f"the app console script is not installed at {APP} (scripts/setup installs it)")
    env = lanpool_env(controller_home)
    env["TERM"] = "xterm-256color"
    env.pop("TMUX", None)  # never talk to a tmux server this test did not start
    sock_dir = Path(tempfile.mkdtemp(prefix="lanpool-tmux-"))  # short: a socket path has ~100 bytes
    pane = Pane(sock_dir / "sock", env)
    yield pane
    pane.tmux("kill-server", check=False)
    shutil.rmtree(sock_dir, ignore_errors=True)


def _start_idle_run(cli, make_project, runner: str, image: str = "") -> str:
    project = make_project(WORKFLOWS.replace("IMAGE", f"image: {image}" if image else ""))
    res = cli("headless", "run", "idle", "--runner", runner, "-d", "--json", cwd=project, check=True)
    run = json.loads(res.stdout.strip().splitlines()[-1])["run"]
    cli.follow_until(run, "ready")
    return str(run)


def _open(term: Pane, command: str, width: int = 100, height: int = 30) -> None:
    term.tmux("new-session", "-d", "-x", str(width), "-y", str(height), "-s", "tui", command)
    term.tmux("set-option", "-t", "tui", "remain-on-exit", "on")  # keep the last screen once it exits


def _until_the_shell_answers(term: Pane, timeout: float = 30) -> None:
    """Keys typed before the job's shell reads its terminal may be dropped as a shell starts: ask until it answers."""
    deadline = time.monotonic() + timeout
    while True:
        term.keys("echo up-$((2+3))", "Enter")
        try:
            term.wait_for("up-5", timeout=2)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def _ssh_session(term: Pane, run: str) -> None:
    """The shell: a command typed and its output read, Ctrl-C, and the exit code back."""
    _open(term, f"{shlex.quote(str(APP))} headless ssh {shlex.quote(run)}; echo ssh-exit=$?")
    _until_the_shell_answers(term)
    # What the shell prints, never what was typed: the arithmetic is done by the job's shell.
    term.keys('echo "$GREETING-$((6*7))"', "Enter")
    term.wait_for("hello-from-the-job-42")
    term.keys("sleep 60", "Enter")
    time.sleep(0.5)
    term.keys("C-c")  # reaches the job's shell's foreground command, not our client
    term.keys("echo after-$((1+1))", "Enter")
    screen = term.wait_for("after-2", timeout=20)
    assert "ssh-exit" not in screen
    term.keys("exit 3", "Enter")
    screen = term.wait_for("ssh-exit=3")
    assert "Traceback" not in screen


def test_ssh_into_a_process_job_in_a_real_terminal(term, agent, cli, make_project):
    run = _start_idle_run(cli, make_project, agent.address)
    _open(term, f"{shlex.quote(str(APP))} headless ssh {shlex.quote(run)}; echo ssh-exit=$?")
    _until_the_shell_answers(term)
    term.keys("stty size", "Enter")
    term.wait_for("30 100")  # the pane's size, given with the PTY
    term.tmux("resize-window", "-t", "tui", "-x", "120", "-y", "40")
    time.sleep(0.5)
    term.keys("stty size", "Enter")
    term.wait_for("40 120")  # and a resize follows
    term.keys("exit", "Enter")
    term.wait_for("ssh-exit=0")
    term.tmux("kill-session", "-t", "tui")
    _ssh_session(term, run)
    cli("headless", "stop", run, "--abort", check=True)


def test_ssh_into_a_container_job_in_a_real_terminal(term, docker_agent, busybox_image, cli, make_project):
    run = _start_idle_run(cli, make_project, docker_agent.address, busybox_image)
    _ssh_session(term, run)
    cli("headless", "stop", run, "--abort", check=True)


def test_ssh_into_a_job_that_is_not_running_is_one_line_in_a_terminal(term, agent, cli, make_project):
    run = _start_idle_run(cli, make_project, agent.address)
    cli("headless", "stop", run, "--abort", check=True)
    # The pane stays alive after: tmux 3.3 can drop a dying pane's last output (remain-on-exit).
    _open(term, f"{shlex.quote(str(APP))} headless ssh {shlex.quote(run)}; echo ssh-exit=$?; sleep 60")
    screen = term.wait_for("ssh-exit=")
    assert "ended" in screen and "ssh-exit=0" not in screen and "Traceback" not in screen


def test_the_tuis_e_suspends_it_for_a_shell_and_comes_back(term, agent, cli, make_project):
    run = _start_idle_run(cli, make_project, agent.address)
    cli("headless", "runners", "add", agent.address, check=True)
    exit_file = term.socket.parent / "app-exit-status"
    _open(term, f"{shlex.quote(str(APP))}; echo $? > {shlex.quote(str(exit_file))}", 160, 45)
    term.keys("1")
    screen = term.wait_for("RUNNING")
    assert run in screen
    term.keys("e")
    deadline = time.monotonic() + 20
    while "WORKFLOW" in term.screen():  # keys typed before the TUI is suspended would be the TUI's
        assert time.monotonic() < deadline, term.screen()
        time.sleep(0.2)
    _until_the_shell_answers(term)
    term.keys('echo "tui-$GREETING-$((40+2))"', "Enter")
    term.wait_for("tui-hello-from-the-job-42")
    term.keys("exit", "Enter")
    screen = term.wait_for("WORKFLOW")  # the Runs table again, redrawn over the shell
    assert "tui-hello-from-the-job-42" not in screen and run in screen
    term.keys("q")
    deadline = time.monotonic() + 15
    while not exit_file.exists() or not exit_file.read_text().strip():
        assert time.monotonic() < deadline, f"the app did not quit:\n{term.screen()}"
        time.sleep(0.1)
    assert exit_file.read_text().strip() == "0", term.screen()
    cli("headless", "stop", run, "--abort", check=True)
