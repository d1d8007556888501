"""Dev environments (`app headless dev`, `dev: true`; app/runs/dev.py): the job runs its commands,
says it is ready with its directory, stays up, and its runner ends it after its idle limit with
no session into it (agent/jobs/supervision.py). Real CLI, real agent. The SSH path into it
(`ssh-config`, its ProxyCommand): tests/integration/test_dev_ssh.py."""

import json
import shutil
import socket
import subprocess
import time

import pytest

from tests.harness import start_agent
from tests.integration.test_daily_use import _read_until

WORKFLOWS = """
workflows:
  - name: box
    dev: true
    idle: 4s
    commands: ["echo setting up in $PWD", "mkdir -p made-by-setup"]
  - name: train
    commands: ["echo trained"]
"""


@pytest.fixture
def runner(tmp_path, controller_home, cli):
    agent = start_agent(tmp_path / "agent", controller_home)
    cli("headless", "runners", "add", agent.address, check=True)
    yield agent
    agent.stop()


def _status(cli, run: str) -> dict:
    return json.loads(cli("headless", "status", run, "--json", check=True).stdout)["jobs"][0]


def _wait_status(cli, run: str, wanted: str, timeout: float = 60) -> dict:
    deadline = time.time() + timeout
    while (job := _status(cli, run))["status"] != wanted:
        assert time.time() < deadline, job
        time.sleep(0.5)
    return job


def test_a_dev_environment_stays_up_and_ends_after_its_idle_limit_with_no_session(runner, cli, make_project):
    project = make_project(WORKFLOWS)
    res = cli("headless", "dev", "--json", cwd=project, timeout=120)  # the one `dev: true` workflow
    assert res.returncode == 0, res.stderr
    ready = json.loads(res.stdout)
    run, workdir = ready["run"], ready["workdir"]
    assert ready["host"] == f"lanpool-{run}" and ready["idle_s"] == 4
    assert f"setting up in {workdir}" in cli("headless", "logs", run, check=True).stdout
    # Its commands ran and it stays up: a session into it finds what they made, and holds it
    # past its idle limit (4 s) for as long as it lasts.
    held = cli("headless", "exec", run, "--", "sh", "-c", "test -d made-by-setup && sleep 7 && echo still-here")
    assert held.returncode == 0 and "still-here" in held.stdout, held.stderr
    assert _status(cli, run)["status"] == "RUNNING"
    ended = _wait_status(cli, run, "STOPPED", timeout=60)  # 4 s after the session ended
    assert ended["error"] == "stopped: idle 4s with no session", ended
    logs = cli("headless", "logs", run, check=True)
    assert "lanpool: idle 4s with no session" in logs.stdout + logs.stderr


def test_dev_names_its_workflow_and_says_how_to_get_in(runner, cli, make_project):
    project = make_project(WORKFLOWS)
    res = cli("headless", "dev", "train", "--idle", "0", cwd=project, timeout=120)  # any workflow, no idle limit
    assert res.returncode == 0, res.stderr
    run = next(
        line.split()[4].rstrip(",") for line in res.stdout.splitlines() if line.startswith("dev environment ready")
    )
    assert f"code --remote ssh-remote+lanpool-{run} /" in res.stdout
    # Its Host entry is written already (no `ssh-config` run): the line it prints gets in.
    printed = next(line.split() for line in res.stdout.splitlines() if line.startswith("  ssh -F "))
    assert printed[3] == f"lanpool-{run}", res.stdout
    if shutil.which("ssh") and shutil.which("sshd", path="/usr/sbin:/usr/local/sbin:/sbin"):
        got = subprocess.run(
            [*printed[:4], "-o", "BatchMode=yes", 'echo "in $LANPOOL_RUN_NAME"'],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
        assert got.returncode == 0 and got.stdout.strip() == f"in {run}", got
    assert f"it stays up until `app headless stop {run}`, its max_duration, or no idle limit" in res.stdout
    time.sleep(2)
    assert _status(cli, run)["status"] == "RUNNING"  # its command ended long ago: it stays up
    cli("headless", "stop", run, check=True)
    assert _wait_status(cli, run, "STOPPED")["status"] == "STOPPED"
    # A dev environment is never reused: the next `dev` starts another.
    again = cli("headless", "dev", "train", "--idle", "0", "--json", cwd=project, timeout=120)
    assert json.loads(again.stdout)["run"] != run
    assert json.loads(again.stdout)["ssh_config"].endswith("/ssh/config")  # its entry is written
    cli("headless", "stop", json.loads(again.stdout)["run"], check=True)


@pytest.mark.parametrize(
    ("workflows", "args", "says"),
    [
        (
            WORKFLOWS.replace("    dev: true\n", ""),
            ["dev"],
            "name the workflow (app headless dev WORKFLOW): none is marked",
        ),
        (
            WORKFLOWS.replace("name: train\n", "name: train\n    dev: true\n"),
            ["dev"],
            "several are (box, train) marked `dev: true`",
        ),
        (WORKFLOWS, ["dev", "box", "--idle", "soon"], "argument --idle: duration 'soon' is not a duration like 2h"),
        (WORKFLOWS, ["run", "train", "--idle", "1h"], "--idle is a dev environment's: `app headless dev train`"),
        (WORKFLOWS, ["dev", "box", "--nodes", "2"], "a dev environment runs on one runner: drop --nodes"),
        (WORKFLOWS.replace("idle: 4s", "idle: soon"), ["dev", "box"], "'idle' 'soon' is not a duration like 2h"),
        (
            WORKFLOWS.replace("idle: 4s", "idle: soon"),
            ["dev"],
            "none is marked `dev: true` (refused, so not counted: box)",
        ),
        (WORKFLOWS.replace("dev: true", "dev: maybe"), ["run", "box"], "'dev' must be true or false"),
        (
            WORKFLOWS.replace("idle: 4s", "ports: 16"),
            ["dev", "box"],
            "box declares 16 ports and a dev environment keeps 1 more (an editor's server): a job has at most 16",
        ),
        (
            WORKFLOWS.replace("idle: 4s", "ports: 15"),
            ["dev", "box", "--ide", "jupyter"],
            "keeps 2 more (an editor's server and JupyterLab): a job has at most 16, so declare at most 14",
        ),
    ],
)
def test_bad_dev_input_is_one_line_and_nothing_runs(cli, make_project, controller_home, workflows, args, says):
    project = make_project(workflows)
    res = cli("headless", *args, cwd=project)
    assert res.returncode == 2, res.stderr
    assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout) == []


FORWARDED = """
workflows:
  - name: served
    dev: true
    idle: 20s
    ports: 1
    commands: ["python -m http.server $PORT_0 --bind 127.0.0.1 >/dev/null 2>&1 &"]
"""


def test_a_forwarded_connection_is_a_session_that_holds_a_dev_environment_past_its_idle_limit(
    runner, cli, make_project
):
    # JupyterLab in a browser reaches a dev environment through its ports alone: while such a
    # connection is open the job is in use, and its idle limit counts from its end. The limit
    # (20 s) is longer than what comes before the connection (`dev` with its ssh-config entry,
    # `ports`, the server's start): 3 s ran out on a loaded CI run, and 10 s once in a parallel run here.
    project = make_project(FORWARDED)
    run = json.loads(cli("headless", "dev", "served", "--json", cwd=project, timeout=120, check=True).stdout)["run"]
    forward = cli.popen("headless", "ports", run, "--json", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        rows = json.loads(_read_until(forward.stdout, "http://127.0.0.1:"))
        # Its own port (the other is the one kept for an editor's server: marked, and forwarded too).
        assert sorted(bool(row.get("editor")) for row in rows) == [False, True], rows
        url = next(row["url"] for row in rows if not row.get("editor"))
        own = next(row["port"] for row in rows if not row.get("editor"))
        # The server in the job may still be starting: asked in the job (an exec, a session that
        # ends with it), so that the one forwarded connection below is the test's.
        probe = f"import socket; socket.create_connection(('127.0.0.1', {own}), 1).close()"
        up = f'for i in $(seq 100); do python -c "{probe}" 2>/dev/null && exit 0; sleep 0.2; done; exit 1'
        assert cli("headless", "exec", run, "--", "sh", "-c", up).returncode == 0
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10):
            time.sleep(24)  # past its 20 s idle limit, with one connection open and quiet
            assert _status(cli, run)["status"] == "RUNNING"
        ended = _wait_status(cli, run, "STOPPED", timeout=60)  # 20 s after it closed
        assert ended["error"] == "stopped: idle 20s with no session", ended
    finally:
        forward.kill()
        forward.wait(30)


def test_a_jupyterlab_that_exits_before_it_listens_fails_the_dev_environment_in_one_line(runner, cli, make_project):
    # The project's own `jupyterlab` package shadows the real one (python -m runs what the
    # working directory holds first): it exits at once, so nothing ever listens on the port.
    project = make_project(
        "workflows:\n  - name: nb\n    ide: jupyter\n    commands: [echo setting up]\n",
        files={"jupyterlab/__init__.py": "", "jupyterlab/__main__.py": "import sys\nsys.exit('broken lab')\n"},
    )
    res = cli("headless", "dev", "nb", cwd=project, timeout=180)
    assert res.returncode == 1, res.stdout + res.stderr
    lines = [line for line in res.stderr.splitlines() if line.startswith("app: error:")]
    assert len(lines) == 1 and "the dev environment ended before it was ready: FAILED (1)" in lines[0], res.stderr
    assert "jupyter:" not in res.stdout  # no URL for a server that is not there
    logs = cli("headless", "logs", json.loads(cli("headless", "status", "--json", check=True).stdout)[0]["run"])
    assert "lanpool: jupyter exited before it listened" in logs.stdout + logs.stderr
    assert "broken lab" in logs.stdout + logs.stderr  # the tail of its own log, in the job's


@pytest.mark.skipif(
    shutil.which("ssh") is None or shutil.which("sshd", path="/usr/sbin:/usr/local/sbin:/sbin") is None,
    reason="needs OpenSSH's sshd and ssh (scripts/test installs them)",
)
def test_an_editor_server_started_through_the_connection_is_reached_on_the_port_kept_for_it(runner, cli, make_project):
    # VS Code Remote-SSH's way: one connection; its server started through it, on a port from
    # `serverPickPortsFromRange`; then a forward to that port on the same connection. The dev sshd
    # decides what it forwards to when the connection starts: the port `dev` keeps (and prints)
    # is reached; a server on any other port, started the same way, is not.
    project = make_project(WORKFLOWS)
    ready = json.loads(cli("headless", "dev", "train", "--idle", "0", "--json", cwd=project, timeout=120).stdout)
    port, host = ready["editor_port"], ready["host"]
    assert isinstance(port, int) and ready["ssh_config"], ready
    ssh = ["ssh", "-F", ready["ssh_config"], "-o", "BatchMode=yes"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        other = probe.getsockname()[1]

    def run(*argv: str, data: bytes = b"") -> subprocess.CompletedProcess:
        return subprocess.run([*ssh, *argv], input=data, capture_output=True, timeout=60)

    try:
        assert run(host, "true").returncode == 0  # the entry's ControlMaster: the one connection from here on
        serve = " ".join(f"nohup python -m http.server {p} --bind 127.0.0.1 >/dev/null 2>&1 &" for p in (port, other))
        wait = "; ".join(
            f"for i in $(seq 100); do python -c \"import socket; socket.create_connection(('127.0.0.1', {p}), 1)\" "
            "2>/dev/null && break; sleep 0.2; done"
            for p in (port, other)
        )
        started = run(host, f"{serve} {wait}; echo up")
        assert started.returncode == 0 and started.stdout.strip() == b"up", started
        request = b"GET / HTTP/1.0\r\n\r\n"
        kept = run("-W", f"127.0.0.1:{port}", host, data=request)
        assert kept.stdout.startswith(b"HTTP/1.0 200"), kept
        elsewhere = run("-W", f"127.0.0.1:{other}", host, data=request)
        assert b"HTTP/" not in elsewhere.stdout and elsewhere.returncode != 0, elsewhere
    finally:
        run("-O", "exit", host)
        cli("headless", "stop", ready["run"])
