"""The installed `app` in a real terminal: tmux runs `.venv/bin/app PROJECT` in a
160x45 pane, keys go in with `send-keys`, the screen comes back with `capture-pane`.
A real agent on loopback, added for this controller home as `runners add` does."""

import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.harness import lanpool_env

APP = Path(sys.executable).parent / "app"  # the console script installed next to this Python

WORKFLOWS = """
workflows:
  - name: hello
    help: print a few lines
    commands:
      - for i in 1 2 3 4 5; do echo "hello-line-$i from $LANPOOL_RUN_NAME"; done
      - echo "all lines printed"
"""


class Pane:
    """One tmux server of our own (its own socket), one session, one pane."""

    def __init__(self, socket: Path, env: dict) -> None:
        self.socket = socket
        self.env = env

    def tmux(self, *args: str, check: bool = True) -> str:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=20,
        ).stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "tui", *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "tui")

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared on the screen; it shows:\n{self.screen()}")


@pytest.fixture
def pane(tmp_path, controller_home):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (scripts/test installs it when run as root: apt-get install tmux)")
    if not APP.exists():
        pytest.skip(f"the app console script is not installed at {APP} (scripts/setup installs it)")
    env = lanpool_env(controller_home)
    env["TERM"] = "xterm-256color"
    env.pop("TMUX", None)  # never talk to a tmux server this test did not start
    for name in ("COLUMNS", "LINES"):  # set in xdist workers (80x24); Textual would size to them, not the pane
        env.pop(name, None)
    sock_dir = Path(tempfile.mkdtemp(prefix="lanpool-tmux-"))  # short: a socket path has ~100 bytes
    p = Pane(sock_dir / "sock", env)
    yield p
    p.tmux("kill-server", check=False)
    shutil.rmtree(sock_dir, ignore_errors=True)


def test_app_in_a_real_terminal_runs_a_workflow(pane, agent, cli, make_project):
    project = make_project(WORKFLOWS)
    cli("headless", "runners", "add", agent.address, check=True)
    # Textual draws on stderr: nothing of the app's output is redirected; the shell
    # writes the app's exit status to a file once it is over.
    exit_file = project.parent / "app-exit-status"
    pane.tmux(
        "new-session",
        "-d",
        "-x",
        "160",
        "-y",
        "45",
        "-s",
        "tui",
        "-c",
        str(project),
        f"{shlex.quote(str(APP))} {shlex.quote(str(project))}; echo $? > {shlex.quote(str(exit_file))}",
    )
    pane.tmux("set-option", "-t", "tui", "remain-on-exit", "on")  # keep the last screen after q
    screen = pane.wait_for("Runners")
    assert "lanpool" in screen and str(project) in screen  # the header names the project

    pane.keys("2")
    screen = pane.wait_for("LIVE")
    assert agent.name in screen and agent.address in screen

    pane.keys("r")
    screen = pane.wait_for("Run a workflow of")
    assert "hello" in screen and "print a few lines" in screen
    pane.keys("C-r")

    # The run's log streams into the Logs tab, which opens by itself.
    screen = pane.wait_for("all lines printed")
    run_name = next(line.split("from ")[1].strip() for line in screen.splitlines() if "hello-line-1 from" in line)
    for i in range(1, 6):
        assert f"hello-line-{i} from {run_name}" in screen
    screen = pane.wait_for("DONE (0)")  # the log's header: the job ended
    assert f"run {run_name}" in screen

    pane.keys("1")
    screen = pane.wait_for("WORKFLOW")  # the runs table's header
    # The row of the runs table (notifications may name the run too).
    [row] = [line.split() for line in screen.splitlines() if line.startswith(f" {run_name} ")]
    # How long ago it ended depends on the machine's load: seconds, not a fixed figure.
    assert row[2:6] == ["hello", agent.name, "DONE", "(0)"] and row[7] == "ago", row
    assert row[6].endswith("s") and row[6][:-1].isdigit() and int(row[6][:-1]) < 60, row
    assert " error" not in screen, screen

    pane.keys("q")
    deadline = time.monotonic() + 15
    while not exit_file.exists() or not exit_file.read_text().strip():
        assert time.monotonic() < deadline, f"the app did not quit:\n{pane.screen()}"
        time.sleep(0.1)
    assert exit_file.read_text().strip() == "0", pane.screen()
    assert "Traceback" not in pane.screen()


def test_the_key_bar_follows_the_terminal_size(pane, make_project):
    """In a real terminal: started at 80x24 the key bar keeps `? Help` and `q Quit`; wider, the
    tab keys and the palette come back; narrow again, the short form (issue #35: it kept the
    form of the size it started at)."""
    project = make_project(WORKFLOWS)
    pane.tmux("new-session", "-d", "-x", "80", "-y", "24", "-s", "tui", "-c", str(project), str(APP))
    pane.tmux("set-option", "-t", "tui", "window-size", "manual")  # resize-window sets the size, not a client

    def key_bar(text: str) -> str:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            lines = pane.screen().rstrip("\n").splitlines()
            if lines and text in lines[-1]:
                return lines[-1]
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never showed in the key bar; the screen:\n{pane.screen()}")

    bar = key_bar("q Quit")
    assert "? Help" in bar and "e Shell" in bar and "1 Runs" not in bar
    pane.tmux("resize-window", "-t", "tui", "-x", "160", "-y", "40")
    bar = key_bar("1 Runs")
    assert "? Help" in bar and "q Quit" in bar and "palette" in bar
    pane.tmux("resize-window", "-t", "tui", "-x", "80", "-y", "24")
    bar = key_bar("q Quit")
    assert "1 Runs" not in bar
    pane.keys("q")
