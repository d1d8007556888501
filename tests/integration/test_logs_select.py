"""`logs --tail N`, `--since`, `-t`: through the real CLI and a real agent; the agent's
arrival times survive its restart."""

import time
from datetime import datetime

from tests.harness import start_agent

WORKFLOWS = """
workflows:
  - name: phases
    commands:
      - echo early-1; echo early-2; echo early-3
      - sleep 3
      - echo late-1; echo late-2; echo late-3
  - name: long
    commands:
      - echo before-restart
      - sleep 6
      - echo after
"""


def _run_name(stderr: str) -> str:
    first = next(line for line in stderr.splitlines() if line.startswith("run "))
    return first.split()[1].rstrip(":")


def _stamped(stdout: str) -> list[tuple[float, str]]:
    """(time, text) of each `-t` line: `YYYY-MM-DD HH:MM:SS.mmm text`."""
    out = []
    for line in stdout.splitlines():
        out.append((datetime.fromisoformat(line[:23]).timestamp(), line[24:]))
    return out


def test_tail_since_and_timestamps(agent, cli, make_project):
    project = make_project(WORKFLOWS)
    started = time.time()
    run = _run_name(cli("headless", "run", "phases", "--runner", agent.address, "-d", cwd=project, check=True).stderr)
    followed = cli("headless", "logs", "-f", "-t", run, check=True, timeout=60)
    lines = _stamped(followed.stdout)
    assert [t for _, t in lines] == ["early-1", "early-2", "early-3", "late-1", "late-2", "late-3"]
    times = [at for at, _ in lines]
    assert started - 1 <= times[0] <= times[-1] <= time.time()
    assert times[3] - times[2] >= 2.5  # the agent's arrival times, not when the controller read them

    assert cli("headless", "logs", "--tail", "2", run, check=True).stdout.splitlines() == ["late-2", "late-3"]
    assert cli("headless", "logs", "--tail", "0", run, check=True).stdout == ""
    between = datetime.fromtimestamp(times[3] - 1).isoformat(sep=" ", timespec="seconds")
    since = cli("headless", "logs", "--since", between, run, check=True).stdout.splitlines()
    assert since == ["late-1", "late-2", "late-3"]
    assert len(cli("headless", "logs", "--since", "10m", run, check=True).stdout.splitlines()) == 6
    assert cli("headless", "logs", "--since", "0s", run, check=True).stdout == ""
    tail_t = _stamped(cli("headless", "logs", "-t", "--tail", "1", "--since", "1h", run, check=True).stdout)
    assert tail_t == [lines[-1]]


def test_bad_tail_or_since_is_one_clear_line(agent, cli, make_project):
    project = make_project(WORKFLOWS)
    run = _run_name(cli("headless", "run", "phases", "--runner", agent.address, "-d", cwd=project, check=True).stderr)
    for args in (["--since", "yesterday-ish"], ["--since", "10x"], ["--tail", "-1"]):
        bad = cli("headless", "logs", *args, run)
        assert bad.returncode == 2, bad
        assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "--node takes 0 to 0" in cli("headless", "logs", "-t", "--node", "3", run).stderr


def test_timestamps_survive_an_agent_restart(tmp_path, controller_home, cli, make_project):
    data_dir = tmp_path / "agent"
    agent = start_agent(data_dir, controller_home)
    try:
        project = make_project(WORKFLOWS)
        run = _run_name(cli("headless", "run", "long", "--runner", agent.address, "-d", cwd=project, check=True).stderr)
        time.sleep(2)  # the line is in the agent's spool; the controller has not read it
        agent.stop()
        restarted_at = time.time()
        agent = start_agent(data_dir, controller_home, authorize=False, port=agent.port)
        lines = _stamped(cli("headless", "logs", "-t", run, check=True, timeout=60).stdout)
        assert lines and lines[0][1] == "before-restart"
        assert lines[0][0] < restarted_at - 0.5  # stamped when it arrived, before the restart
    finally:
        agent.stop()
