"""Issue #35, daily use: the habits dstack, SkyPilot and Slurm users bring, through the real CLI
on a real agent. Each feature's bad input is tested beside it."""

import json
import os
import pty
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from tests.harness import APP_MODULE, lanpool_env

WORKFLOWS = """
workflows:
  - name: sleeper
    commands:
      - trap 'echo got TERM; exit 0' TERM
      - echo ready
      - while true; do sleep 0.1; done
  - name: quick
    commands:
      - echo "quick $LANPOOL_RUN_NAME"
"""


def _run_name(stderr: str) -> str:
    first = next(line for line in stderr.splitlines() if line.startswith("run "))
    return first.split()[1].rstrip(":")


def _status(cli, *extra: str) -> list[dict]:
    return json.loads(cli("headless", "status", "--json", "--no-refresh", *extra, check=True).stdout)


def _job_status(cli, run: str) -> str:
    [entry] = [r for r in _status(cli) if r["run"] == run]
    return entry["jobs"][-1]["status"]


def _detached(cli, agent, project, workflow: str = "sleeper", *extra: str) -> str:
    res = cli("headless", "run", *extra, "--runner", agent.address, "-d", workflow, cwd=project, check=True)
    return _run_name(res.stderr)


# -- 1. stop RUN..., stop --all ----------------------------------------------------------------


def test_stop_several_runs_at_once(agent, cli, make_project):
    project = make_project(WORKFLOWS)
    runs = [_detached(cli, agent, project) for _ in range(2)]
    for run in runs:
        cli.follow_until(run, "ready")
    res = cli("headless", "stop", *runs, "--grace", "20", check=True)
    for run in runs:
        assert f"({run}): STOPPED" in res.stderr, res.stderr
        assert _job_status(cli, run) == "STOPPED"


def test_stop_with_a_bad_name_stops_nothing(agent, cli, make_project):
    project = make_project(WORKFLOWS)
    run = _detached(cli, agent, project)
    cli.follow_until(run, "ready")
    res = cli("headless", "stop", run, "no-such-run")
    assert res.returncode == 4 and "no run or job named 'no-such-run'" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert _job_status(cli, run) in ("RUNNING", "QUEUED", "SUBMITTED")
    assert cli("headless", "stop", "--all", "--yes", check=True).returncode == 0
    assert _job_status(cli, run) == "STOPPED"


def test_stop_all_asks_for_yes_without_a_terminal(agent, cli, make_project):
    project = make_project(WORKFLOWS)
    runs = [_detached(cli, agent, project) for _ in range(2)]
    cli("headless", "run", "--runner", agent.address, "quick", cwd=project, check=True)  # ended: not stopped
    refused = cli("headless", "stop", "--all")
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "2 run(s)" in refused.stderr and "--yes" in refused.stderr
    assert cli("headless", "stop", "--all", runs[0]).returncode == 2  # names and --all: which one?
    assert cli("headless", "stop").returncode == 2  # nothing named
    res = cli("headless", "stop", "--all", "--yes", check=True)
    assert all(run in res.stderr for run in runs), res.stderr
    assert all(_job_status(cli, run) in ("STOPPED", "ABORTED") for run in runs)
    again = cli("headless", "stop", "--all", "--yes", check=True)
    assert "nothing to stop" in again.stderr


# -- 2. status filters and the project column ----------------------------------------------------


def test_status_filters_by_state_workflow_runner_tag_and_project(agent, cli, make_project):
    alpha, beta = make_project(WORKFLOWS, name="alpha"), make_project(WORKFLOWS, name="beta")
    done = _run_name(
        cli("headless", "run", "--runner", agent.address, "--tag", "t1", "quick", cwd=alpha, check=True).stderr
    )
    running = _detached(cli, agent, beta)
    cli.follow_until(running, "ready")
    cli("headless", "status", check=True)  # asks the runner: RUNNING in the store
    try:
        names = lambda *f: [r["run"] for r in _status(cli, *f)]  # noqa: E731
        assert names("--state", "running") == [running]
        assert names("--state", "active") == [running]
        assert names("--state", "done,failed") == [done]
        assert names("--workflow", "quick") == [done]
        assert names("--runner", "test-runner") == [running, done]
        assert names("--runner", "nobody") == []
        assert names("--tag", "t1") == [done]
        assert names("--project", "alpha") == [done]
        assert names("--project", str(beta)) == [running]
        assert _status(cli, "--project", "alpha")[0]["project_dir"] == str(alpha)
        table = cli("headless", "status", "--no-refresh", "--project", "beta", check=True).stdout
        assert table.splitlines()[0].split()[:3] == ["RUN", "PROJECT", "JOB"]
        assert running in table and " beta " in table and done not in table
        none = cli("headless", "status", "--no-refresh", "--workflow", "nothing", check=True).stdout
        assert "no runs match" in none
    finally:
        cli("headless", "stop", running)


def test_status_refuses_an_unknown_state_in_one_line(cli):
    res = cli("headless", "status", "--state", "runing")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "'runing' is not a state" in res.stderr and "running" in res.stderr


# -- 3. status RUN: one run in full --------------------------------------------------------------

DETAILED = """
workflows:
  - name: detailed
    env:
      - PLAIN=visible
      - HF_TOKEN=${{ secrets.hf }}
    resources:
      cpu: 1
    commands:
      - echo "lr=${{ lr }}"
      - mkdir -p out && echo x > out/model.txt
    artifacts: [out]
"""


def test_status_run_shows_the_run_in_full_with_secrets_masked(agent, cli, make_project):
    project = make_project(DETAILED, files={".lanpool/variables.yaml": "variables:\n  detailed:\n    lr: 0.1\n"})
    secret = cli.popen("headless", "secrets", "set", "hf", stdin=subprocess.PIPE, text=True)
    secret.communicate("hf-secret-value\n", timeout=60)
    assert secret.returncode == 0
    res = cli(
        "headless",
        "run",
        "--runner",
        agent.address,
        "--env",
        "WANDB_API_KEY=wandb-value",
        "--env",
        "OTHER=hf-secret-value",
        "detailed",
        "--lr",
        "0.5",
        cwd=project,
    )
    assert res.returncode == 0, res.stderr
    run = _run_name(res.stderr)
    detail = json.loads(cli("headless", "status", run, "--json", check=True).stdout)
    [job] = detail["jobs"]
    assert detail["run"] == run and detail["project"] == "project" and str(detail["variables"]["lr"]) == "0.5"
    assert job["status"] == "DONE" and job["exit_code"] == 0 and job["attempts"] == 1
    assert job["runner"] == "test-runner" and job["resources"].get("cpu") == 1
    assert job["env"]["PLAIN"] == "visible" and job["env"]["HF_TOKEN"] == "${{ secrets.hf }}"
    assert job["env"]["WANDB_API_KEY"] == "***" and job["env"]["OTHER"] == "***"
    assert job["artifacts"] == [{"path": "out/model.txt", "size": 2}]
    assert job["started_at"] and job["finished_at"] and [e["status"] for e in job["events"]][0] == "SUBMITTED"
    text = cli("headless", "status", run, check=True).stdout
    for expected in (
        f"Run:        {run}",
        "State:      DONE   Exit: 0",
        "Runner:     test-runner",
        "cpu=1",
        "out/model.txt",
    ):
        assert expected in text, text
    assert "wandb-value" not in text and "hf-secret-value" not in text
    job_only = json.loads(cli("headless", "status", job["job"][:6], "--json", "--no-refresh", check=True).stdout)
    assert [j["job"] for j in job_only["jobs"]] == [job["job"]]


def test_status_of_an_unknown_run_or_with_filters_is_one_line(cli):
    missing = cli("headless", "status", "no-such-run")
    assert (
        missing.returncode == 4 and len(missing.stderr.strip().splitlines()) == 1 and "no run or job" in missing.stderr
    )
    both = cli("headless", "status", "some-run", "--state", "running")
    assert both.returncode == 2 and "filters" in both.stderr and len(both.stderr.strip().splitlines()) == 1


# -- 4. --gpu/--cpu/--memory at run time, and --name ------------------------------------------------

CLASHING = """
workflows:
  - name: clash
    resources:
      cpu: 1
    commands:
      - echo "gpu=${{ gpu }} name=${{ name }} run=$LANPOOL_RUN_NAME"
"""


def test_resource_overrides_are_planned_and_sent_and_name_names_the_run(agent, cli, make_project):
    project = make_project(WORKFLOWS)
    plan = cli("headless", "plan", "--cpu", "2", "--memory", "1G", "quick", cwd=project, check=True).stdout
    assert "resources of quick (the command line's over the workflow's): cpu=2, memory=1024MB" in plan
    planned = json.loads(cli("headless", "plan", "--json", "quick", "--cpu", "3", cwd=project, check=True).stdout)
    assert planned["jobs"][-1]["resources"] == {"cpu": 3}  # an option after the name: no variable `cpu` here
    res = cli("headless", "run", "--runner", agent.address, "--cpu", "1", "--name", "my.run-1", "quick", cwd=project)
    assert res.returncode == 0, res.stderr
    assert "quick my.run-1" in res.stdout
    detail = json.loads(cli("headless", "status", "my.run-1", "--json", "--no-refresh", check=True).stdout)
    assert detail["jobs"][0]["resources"] == {"cpu": 1}
    taken = cli("headless", "run", "--runner", agent.address, "--name", "my.run-1", "quick", cwd=project)
    assert taken.returncode == 2 and len(taken.stderr.strip().splitlines()) == 1
    assert "--name my.run-1: a run of that name exists" in taken.stderr
    assert len(_status(cli, "--workflow", "quick")) == 1  # nothing was started for the taken name


def test_bad_resources_and_names_are_one_line_each(cli, make_project):
    project = make_project(WORKFLOWS)
    for words, says in [
        (("--gpu", "two"), "--gpu must be a whole number"),
        (("--gpu", ":2"), "give N or NAME:N"),
        (("--cpu", "-1"), "--cpu"),
        (("--cpu", "100000"), "--cpu must be at most 65536"),
        (("--memory", "12XB"), "--memory must be a size like 16GB"),
        (("--memory", "0"), "--memory must be a size from 1MB"),
        (("--name", "../etc"), "is not a run name"),
        (("--name", "a" * 65), "is not a run name"),
        (("--name", "-x"), ""),  # an option-looking name: argparse says it needs a value
    ]:
        res = cli("headless", "run", *words, "quick", cwd=project)
        assert res.returncode == 2, (words, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and says in res.stderr, (words, res.stderr)
        assert "Traceback" not in res.stderr
    after = cli("headless", "plan", "quick", "--memory", "lots", cwd=project)  # after the name: checked the same
    assert after.returncode == 2 and "--memory must be a size" in after.stderr


def test_variables_called_gpu_and_name_are_given_after_the_workflow_name(agent, cli, make_project):
    project = make_project(
        CLASHING, files={".lanpool/variables.yaml": "variables:\n  clash:\n    gpu: 0\n    name: x\n"}
    )
    res = cli(
        "headless",
        "run",
        "--runner",
        agent.address,
        "--gpu",
        "0",
        "--name",
        "clash-run",
        "clash",
        "--gpu",
        "7",
        "--name",
        "val",
        cwd=project,
    )
    assert res.returncode == 0, res.stderr
    assert "gpu=7 name=val run=clash-run" in res.stdout
    assert "note: --gpu is variable 'gpu'" in res.stderr and "note: --name is variable 'name'" in res.stderr
    assert json.loads(cli("headless", "status", "clash-run", "--json", "--no-refresh", check=True).stdout)["jobs"][0][
        "resources"
    ] == {"cpu": 1}


# -- 5. attach; 6. notifications ------------------------------------------------------------------

SERVED = """
workflows:
  - name: served
    ports: [PORT]
    commands:
      - python3 -m http.server PORT --bind 127.0.0.1 >/dev/null 2>&1 &
      - trap 'echo got TERM; exit 5' TERM
      - echo 'ready $(touch PWNED) `touch PWNED2`; touch PWNED3'
      - while true; do sleep 0.1; done
"""

NOTIFIER = """#!/bin/sh
printf '%s|%s|%s|%s|%s|%s\\n' "$LANPOOL_RUN_NAME" "$LANPOOL_JOB_ID" "$LANPOOL_WORKFLOW" "$LANPOOL_JOB_STATE" "$LANPOOL_EXIT_CODE" "$*" >> "$(dirname "$0")/notified"
"""


def _read_until(stream, text: str, timeout: float = 60) -> str:
    """Lines of `stream` until one holds `text` (a thread reads: a bound, never a hang)."""
    seen: list[str] = []
    found = threading.Event()

    def read() -> None:
        for line in stream:
            seen.append(line)
            if text in line:
                break
        found.set()

    threading.Thread(target=read, daemon=True).start()
    found.wait(timeout)
    out = "".join(seen)
    assert text in out, f"{text!r} not seen in {timeout:g} s:\n{out[-3000:]}"
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notifier(tmp_path: Path) -> Path:
    script = tmp_path / "bin" / "notifier"
    script.parent.mkdir(exist_ok=True)
    script.write_text(NOTIFIER)
    script.chmod(0o755)
    return script


def test_attach_follows_forwards_detaches_and_notifies(agent, cli, make_project, tmp_path):
    port = _free_port()
    project = make_project(SERVED.replace("PORT", str(port)))
    run = _detached(cli, agent, project, "served")
    first = cli.popen("headless", "attach", run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        forwarded = _read_until(first.stderr, f"port {port}: http://127.0.0.1:")
        url = forwarded.split(f"port {port}: ")[1].split()[0]
        assert "ready $(touch PWNED)" in _read_until(first.stdout, "ready")
        for _ in range(50):
            try:
                assert b"Directory listing" in urllib.request.urlopen(url, timeout=5).read()
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise AssertionError(f"{url} never answered")
        first.send_signal(signal.SIGINT)  # detach
        assert first.wait(60) == 0
        assert "detached; the job keeps running" in first.stderr.read()
    finally:
        first.kill()
    assert (
        _job_status(cli, run) == "RUNNING"
        or json.loads(cli("headless", "status", run, "--json").stdout)["jobs"][0]["status"] == "RUNNING"
    )
    notifier = _notifier(tmp_path)
    second = cli.popen(
        "headless",
        "attach",
        run,
        "--notify-cmd",
        f"{notifier} --from attach",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _read_until(second.stderr, f"attached to run {run}")
        cli("headless", "stop", run, check=True)
        assert second.wait(60) == 5  # the job's own exit code, as `run` exits
    finally:
        second.kill()
    [line] = (notifier.parent / "notified").read_text().splitlines()
    name, job_id, workflow, state, code, argv = line.split("|")
    assert (name, workflow, state, code, argv) == (run, "served", "STOPPED", "5", "--from attach") and job_id
    assert not list(agent.data_dir.rglob("PWNED*")) and not list(Path.cwd().glob("PWNED*"))
    ended = cli("headless", "attach", run)  # an ended run: one line, its exit code
    assert ended.returncode == 5 and "already ended: STOPPED (5)" in ended.stderr


def test_attach_and_notify_refuse_bad_input_in_one_line(agent, cli, make_project, tmp_path):
    project = make_project(WORKFLOWS)
    for args, code, says in [
        (("attach", "no-such-run"), 4, "no run or job named"),
        (("attach", "x", "--notify-cmd", "no-such-program-here --x"), 2, "no program 'no-such-program-here'"),
        (("attach", "x", "--notify-cmd", "'unclosed"), 2, "No closing quotation"),
        (("run", "-d", "--notify", "quick"), 2, "--notify needs a followed run"),
        (("run", "--notify-cmd", "", "quick"), 2, "--notify-cmd needs a command"),
    ]:
        res = cli("headless", *args, cwd=project)
        assert res.returncode == code and says in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert _status(cli) == []  # nothing ran


def test_run_notifies_on_the_desktop_and_through_a_command(agent, controller_home, make_project, tmp_path):
    """A desktop with a display: `notify-send` (a stand-in on PATH) gets the title and body as
    arguments; the command gets the run in its env; the job's hostile output reaches neither."""
    project = make_project(FAILING)
    notifier = _notifier(tmp_path)
    send = notifier.parent / "notify-send"
    send.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done >> "$(dirname "$0")/desktop"\n')
    send.chmod(0o755)
    env = {**lanpool_env(controller_home), "DISPLAY": ":99", "PATH": f"{notifier.parent}:{os.environ['PATH']}"}
    res = subprocess.run(
        [
            *APP_MODULE,
            "headless",
            "run",
            "--runner",
            agent.address,
            "--notify",
            "--notify-cmd",
            "notifier",
            "--name",
            "loud-run",
            "fails",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 3, res.stderr
    desktop = (notifier.parent / "desktop").read_text().splitlines()
    assert desktop[0] == "--app-name=lanpool" and desktop[1] == "lanpool: loud-run FAILED"
    assert desktop[2].startswith("fails (job ") and desktop[2].endswith(", exit 3")
    [line] = (notifier.parent / "notified").read_text().splitlines()
    assert line.split("|")[2:5] == ["fails", "FAILED", "3"]
    assert not list(project.glob("PWNED*")) and not list(tmp_path.glob("PWNED*"))


FAILING = """
workflows:
  - name: fails
    commands:
      - echo '$(touch ../PWNED) `touch ../PWNED2`'
      - exit 3
"""


def _on_a_terminal(controller_home: Path, answer: str, *args: str) -> str:
    """`app headless ARGS` with a pseudo-terminal for stdin and stderr, answering `answer`; what it wrote."""
    main, side = pty.openpty()
    proc = subprocess.Popen(
        [*APP_MODULE, "headless", *args],
        stdin=side,
        stdout=subprocess.PIPE,
        stderr=side,
        env=lanpool_env(controller_home),
    )
    os.close(side)
    seen = b""
    deadline = time.monotonic() + 60
    while b"[y/N]" not in seen and time.monotonic() < deadline:
        try:
            seen += os.read(main, 4096)
        except OSError:
            break
    os.write(main, answer.encode() + b"\n")
    proc.wait(90)
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(main)
    return seen.decode(errors="replace")


def test_stop_all_on_a_terminal_asks_showing_how_many(agent, cli, make_project, controller_home):
    project = make_project(WORKFLOWS)
    run = _detached(cli, agent, project)
    cli.follow_until(run, "ready")
    said_no = _on_a_terminal(controller_home, "n", "stop", "--all")
    assert f"stop 1 run(s) (1 job(s)): {run}? [y/N]" in said_no and "nothing stopped" in said_no
    assert _job_status(cli, run) not in ("STOPPED", "ABORTED")
    said_yes = _on_a_terminal(controller_home, "y", "stop", "--all")
    assert f"({run}): STOPPED" in said_yes, said_yes
