"""End to end through the real CLI: a real agent process on loopback, real SSH, real SQLite."""

import json
import re
import signal
import sqlite3
import subprocess
import time

import pytest

WORKFLOWS = """
workflows:
  - name: make
    commands:
      - echo "building in $LANPOOL_RUN_NAME"
      - mkdir -p out/sub
      - echo hello > out/a.txt
      - head -c 5000 /dev/zero > out/sub/b.bin
      - echo "to stderr" >&2
      - echo done
    artifacts: [out]
  - name: fail
    commands:
      - echo before
      - exit 3
      - echo never
  - name: graceful
    commands:
      - mkdir -p out && echo kept > out/k.txt
      - trap 'echo got TERM; exit 0' TERM
      - echo ready
      - while true; do sleep 0.1; done
    artifacts: [out]
  - name: stubborn
    commands:
      - trap '' TERM
      - echo ready
      - while true; do sleep 0.1; done
  - name: numbered
    commands:
      # one process writing a line at a time (a bash loop forked `sleep` 3,000 times)
      - python -c "import time; [print(f'line-{i}', flush=True) or time.sleep(0.001) for i in range(1, 3001)]"
"""


def _wait_for_log(cli, ref: str, text: str, timeout: float = 30) -> None:
    cli.follow_until(ref, text, timeout)


def _run_name(stderr: str) -> str:
    first = next(line for line in stderr.splitlines() if line.startswith("run "))
    return first.split()[1].rstrip(":")


def _status(cli) -> list[dict]:
    return json.loads(cli("headless", "status", "--json", check=True).stdout)


def test_run_logs_status_artifacts(agent, cli, make_project, tmp_path):
    project = make_project(WORKFLOWS)
    res = cli("headless", "run", "make", "--runner", agent.address, cwd=project)
    assert res.returncode == 0, res.stderr
    run = _run_name(res.stderr)
    assert f"building in {run}" in res.stdout and "done" in res.stdout
    assert "to stderr" in res.stderr

    logs = cli("headless", "logs", run, check=True)
    assert logs.stdout.splitlines() == [f"building in {run}", "done"]

    [entry] = [r for r in _status(cli) if r["run"] == run]
    [job] = entry["jobs"]
    assert job["status"] == "DONE" and job["exit_code"] == 0
    assert {a["path"]: a["size"] for a in job["artifacts"]} == {"out/a.txt": 6, "out/sub/b.bin": 5000}

    listing = cli("headless", "artifacts", "list", "-l", run, check=True).stdout
    assert "out/a.txt" in listing and "out/sub/b.bin" in listing
    dest = tmp_path / "dl"
    cli("headless", "artifacts", "download", run, "--output", str(dest), check=True)
    assert (dest / "out" / "a.txt").read_text() == "hello\n"
    assert (dest / "out" / "sub" / "b.bin").stat().st_size == 5000

    table = cli("headless", "status", check=True).stdout
    assert run in table and "DONE (0)" in table and "test-runner" in table


def test_download_without_output_goes_to_the_downloads_dir_not_the_project(agent, cli, make_project, tmp_path):
    project = make_project(WORKFLOWS)
    run = _run_name(cli("headless", "run", "make", "--runner", agent.address, cwd=project, check=True).stderr)
    before = sorted(p.name for p in project.iterdir())
    dl = cli("headless", "artifacts", "download", run, cwd=project, check=True)
    dest = tmp_path / "downloads" / run  # $LANPOOL_DOWNLOADS/RUN (tests/conftest.py)
    assert f"-> {dest}" in dl.stderr
    assert (dest / "out" / "a.txt").read_text() == "hello\n"
    assert sorted(p.name for p in project.iterdir()) == before  # nothing landed in the project (the cwd)


def test_run_json_prints_the_run_and_its_jobs_last(agent, cli, make_project):
    """For scripts: `run --json` ends stdout with one object (after any log lines); with -d the
    job as just submitted, else as it ended, with its exit code and warnings."""
    project = make_project(WORKFLOWS)
    attached = cli("headless", "run", "fail", "--runner", agent.address, "--json", cwd=project)
    out = json.loads(attached.stdout.strip().splitlines()[-1])
    (job,) = out["jobs"]
    assert attached.returncode == 3 and job["status"] == "FAILED" and job["exit_code"] == 3
    assert job["workflow"] == "fail" and job["warnings"] == [] and out["run"]
    detached = cli("headless", "run", "graceful", "--runner", agent.address, "-d", "--json", cwd=project, check=True)
    out = json.loads(detached.stdout.strip().splitlines()[-1])
    assert out["jobs"][0]["status"] in ("SUBMITTED", "RUNNING") and out["jobs"][0]["exit_code"] is None
    cli("headless", "stop", out["run"], "--abort", check=True)


def test_exit_code_of_the_job_is_the_exit_code_of_run(agent, cli, make_project):
    project = make_project(WORKFLOWS)
    res = cli("headless", "run", "fail", "--runner", agent.address, cwd=project)
    assert res.returncode == 3
    assert "before" in res.stdout and "never" not in res.stdout
    [job] = [r for r in _status(cli) if r["run"] == _run_name(res.stderr)][0]["jobs"]
    assert job["status"] == "FAILED" and job["exit_code"] == 3


def test_a_retried_job_ends_with_its_whole_duration_and_its_attempts(agent, cli, make_project):
    project = make_project(
        "workflows:\n  - name: flaky\n    retry: {on: [failure], limit: 2}\n    commands:\n"
        "      - sleep 1.5\n      - if [ ! -e tried ]; then touch tried; exit 3; fi\n      - sleep 1.5\n"
    )
    res = cli("headless", "run", "flaky", "--runner", agent.address, cwd=project)
    assert res.returncode == 0, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"run \S+: DONE \(0\) in (\d+\.\d)s \(2 attempts\)", last), last
    assert float(re.search(r"in (\S+)s", last).group(1)) >= 4  # both attempts' sleeps, not the last one's
    job = json.loads(cli("headless", "status", "--json", check=True).stdout)[0]["jobs"][0]
    assert job["attempts"] == 2 and job["finished_at"] - job["started_at"] >= 4


def test_stop_is_graceful_and_keeps_artifacts(agent, cli, make_project):
    project = make_project(WORKFLOWS)
    res = cli("headless", "run", "graceful", "--runner", agent.address, "--detach", cwd=project, check=True)
    run = _run_name(res.stderr)
    _wait_for_log(cli, run, "ready")
    t0 = time.time()
    stop = cli("headless", "stop", run, "--grace", "20", check=True)
    assert time.time() - t0 < 10, "a job that exits on SIGTERM must not wait for the grace period"
    assert "STOPPED (0)" in stop.stderr
    assert "got TERM" in cli("headless", "logs", run).stdout
    [job] = [r for r in _status(cli) if r["run"] == run][0]["jobs"]
    assert job["status"] == "STOPPED"
    assert [a["path"] for a in job["artifacts"]] == ["out/k.txt"]


def test_stop_kills_after_grace_period(agent, cli, make_project):
    project = make_project(WORKFLOWS)
    run = _run_name(cli("headless", "run", "stubborn", "--runner", agent.address, "-d", cwd=project, check=True).stderr)
    _wait_for_log(cli, run, "ready")
    t0 = time.time()
    stop = cli("headless", "stop", run, "--grace", "1.5", check=True)
    took = time.time() - t0
    assert 1.5 <= took < 15, took
    assert "STOPPED (137)" in stop.stderr  # 128 + SIGKILL
    logs = cli("headless", "logs", run)
    assert "SIGKILL" in logs.stderr


def test_abort_brings_no_artifacts(agent, cli, make_project):
    project = make_project(WORKFLOWS)
    run = _run_name(cli("headless", "run", "graceful", "--runner", agent.address, "-d", cwd=project, check=True).stderr)
    _wait_for_log(cli, run, "ready")
    stop = cli("headless", "stop", run, "--abort", check=True)
    assert "ABORTED" in stop.stderr
    assert cli("headless", "artifacts", "list", run, check=True).stdout == ""
    dl = cli("headless", "artifacts", "download", run)
    assert dl.returncode == 4 and "no artifacts" in dl.stderr
    assert not list((agent.data_dir / "transfer" / "artifacts").glob("*.tar"))


def test_killed_controller_reattaches_and_loses_nothing(agent, cli, make_project, controller_home):
    project = make_project(WORKFLOWS)
    proc = cli.popen(
        "headless",
        "run",
        "numbered",
        "--runner",
        agent.address,
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    seen = 0
    for _line in proc.stdout:
        seen += 1
        if seen >= 200:
            break
    proc.send_signal(signal.SIGKILL)  # no chance to clean up
    proc.wait()
    [latest] = _status_no_refresh(cli)
    run = latest["run"]
    assert latest["jobs"][0]["status"] in ("RUNNING", "SUBMITTED")

    follow = cli("headless", "logs", "-f", run, timeout=120, check=True)
    lines = follow.stdout.splitlines()
    assert lines == [f"line-{i}" for i in range(1, 3001)]

    db = sqlite3.connect(controller_home / "lanpool.db")
    data = b"".join(row[0] for row in db.execute("SELECT data FROM log_chunks ORDER BY seq"))
    assert data.decode().splitlines() == [f"line-{i}" for i in range(1, 3001)]
    assert db.execute("SELECT SUM(n_lines) FROM log_chunks").fetchone()[0] == 3000
    assert _status(cli)[0]["jobs"][0]["status"] == "DONE"


def _status_no_refresh(cli) -> list[dict]:
    return json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout)


def test_job_keeps_running_without_a_controller(agent, cli, make_project):
    project = make_project(WORKFLOWS)
    run = _run_name(cli("headless", "run", "numbered", "--runner", agent.address, "-d", cwd=project, check=True).stderr)
    deadline = time.time() + 60
    while _status(cli)[0]["jobs"][0]["status"] != "DONE":
        assert time.time() < deadline
        time.sleep(0.5)
    out = cli("headless", "logs", run, check=True).stdout.splitlines()
    assert len(out) == 3000 and out[-1] == "line-3000"


@pytest.mark.parametrize("verb", [["logs", "nope"], ["stop", "nope"], ["artifacts", "list", "nope"]])
def test_unknown_run_is_one_clear_line(cli, verb):
    res = cli("headless", *verb)
    assert res.returncode == 4
    assert res.stderr.strip().count("\n") == 0 and "no run or job named 'nope'" in res.stderr


def test_snapshot_carries_uncommitted_files(agent, cli, make_project):
    project = make_project(
        """
        workflows:
          - name: cat
            commands: [cat data/input.txt]
        """,
        files={"data/input.txt": "from the snapshot\n"},
    )
    res = cli("headless", "run", "cat", "--runner", agent.address, cwd=project)
    assert res.returncode == 0 and res.stdout == "from the snapshot\n"


def test_run_without_workflow_lists_them(cli, make_project):
    project = make_project(WORKFLOWS)
    res = cli("headless", "run", cwd=project, check=True)
    assert [line.strip() for line in res.stdout.splitlines()[1:]] == [
        "make",
        "fail",
        "graceful",
        "stubborn",
        "numbered",
    ]


def test_run_reaches_runner_by_name_after_first_contact(agent, cli, make_project):
    project = make_project(WORKFLOWS)
    cli("headless", "run", "fail", "--runner", agent.address, cwd=project)
    runners = json.loads(cli("headless", "runners", "--json", "--wait", "0", check=True).stdout)
    assert [(r["name"], r["port"]) for r in runners] == [("test-runner", agent.port)]
    # Pinned: a named runner and the default (the only known runner) both work.
    assert cli("headless", "run", "fail", "--runner", "test-runner", cwd=project).returncode == 3
    assert cli("headless", "run", "fail", cwd=project).returncode == 3
