"""Sweeps (`run W --sweep VAR=V1,V2 ...`): one run, a job per point, spread over the runners, each
point reused when it ran before with the same inputs, compared side by side. Through the real CLI
on real agents; each runner has one GPU, faked at the edge (LANPOOL_FAKE_GPUS), so a runner takes
one point at a time and the others wait in the runners' queues."""

import json

import pytest

from tests.harness import start_agent

WORKFLOWS = """
workflows:
  - name: train
    resources: {gpu: 1}
    commands:
      # val_loss = lr * 10 / k at step 100 k, k = 1..3 (with `batch` in the line, so it is an input).
      - >-
        awk -v lr=${{ lr }} 'BEGIN { for (k = 1; k <= 3; k++) printf "{\\"step\\": %d, \\"name\\": \\"val_loss\\", \\"value\\": %g}\\n", 100 * k, lr * 10 / k }'
        >> "$LANPOOL_METRICS_FILE"
      - echo "trained lr=${{ lr }} batch=${{ batch }} on $LANPOOL_RUNNER_NAME"
      - sleep 1
"""
VARIABLES = "variables:\n  train:\n    lr: 0.3\n    batch: 16\n"


@pytest.fixture
def gpu_runners(tmp_path, controller_home, cli):
    agents = [
        start_agent(tmp_path / f"g{i}", controller_home, name=f"gpu-{i}", extra_env={"LANPOOL_FAKE_GPUS": "0"})
        for i in range(2)
    ]
    for a in agents:
        cli("headless", "runners", "add", a.address, check=True)
    yield agents
    for a in agents:
        a.stop()


def _sweep(cli, project, *args: str, check: bool = True):
    return cli("headless", "run", "train", *args, "--json", cwd=project, check=check, timeout=240)


def test_a_grid_runs_each_point_once_on_both_runners_and_compares_them(gpu_runners, cli, make_project):
    project = make_project(WORKFLOWS, files={".lanpool/variables.yaml": VARIABLES})
    res = _sweep(cli, project, "--sweep", "lr=0.06,0.3", "--sweep", "batch=32,64")
    out = json.loads(res.stdout.splitlines()[-1])
    run, jobs = out["run"], out["jobs"]
    assert [j["point"] for j in jobs] == [
        {"lr": "0.06", "batch": "32"},
        {"lr": "0.06", "batch": "64"},
        {"lr": "0.3", "batch": "32"},
        {"lr": "0.3", "batch": "64"},
    ]
    assert {j["status"] for j in jobs} == {"DONE"}
    assert {j["runner"] for j in jobs} == {"gpu-0", "gpu-1"}, jobs  # both runners took points
    assert "4 of 4 point(s) DONE" in res.stderr

    table = json.loads(cli("headless", "compare", run, "--sort", "val_loss", "--json", check=True).stdout)
    assert table["varying"] == ["lr", "batch"]
    rows = table["jobs"]
    assert len(rows) == 4 and all(r["run"] == run for r in rows)
    assert [r["variables"]["lr"] for r in rows] == ["0.06", "0.06", "0.3", "0.3"]  # best val_loss first
    for r in rows:
        lr = float(r["variables"]["lr"])
        assert (
            abs(r["metrics"]["val_loss"]["best"] - lr * 10 / 3) < 1e-4 and r["metrics"]["val_loss"]["best_step"] == 300
        )
    logs = cli("headless", "logs", rows[0]["job_id"], check=True).stdout
    assert f"trained lr=0.06 batch={rows[0]['variables']['batch']} on " in logs

    # The same grid again, one point more: the four reused (plan says so first), one runs.
    plan = json.loads(
        cli(
            "headless",
            "plan",
            "train",
            "--sweep",
            "lr=0.06,0.3,0.9",
            "--sweep",
            "batch=32",
            "--json",
            cwd=project,
            check=True,
        ).stdout
    )
    assert [p["action"] for p in plan] == ["reuse", "reuse", "run"]
    again = _sweep(cli, project, "--sweep", "lr=0.06,0.3,0.9", "--sweep", "batch=32")
    second = json.loads(again.stdout.splitlines()[-1])
    assert [j["run"] == run for j in second["jobs"]] == [False, True, True]  # the new point first, then the reused
    assert "3 of 3 point(s) DONE (2 reused)" in again.stderr


def test_a_detached_sweep_returns_at_once_and_its_points_run_without_the_controller(gpu_runners, cli, make_project):
    project = make_project(WORKFLOWS, files={".lanpool/variables.yaml": VARIABLES})
    res = _sweep(cli, project, "-d", "--sweep", "lr=0.1,0.2,0.4")
    out = json.loads(res.stdout)
    assert len(out["jobs"]) == 3 and "detached:" in res.stderr
    for job in out["jobs"]:  # the controller is gone; each point ends on its runner
        cli.follow_until(job["job_id"], "trained lr=", timeout=120)
    rows = json.loads(cli("headless", "compare", out["run"], "--json", check=True).stdout)["jobs"]
    assert sorted(r["variables"]["lr"] for r in rows) == ["0.1", "0.2", "0.4"]


PARALLEL = """
workflows:
  - name: train
    resources: {gpu: 1}
    commands: ["echo lr=${{ lr }}", "sleep 2"]
"""


def test_max_parallel_sends_a_point_only_when_one_ends(tmp_path, controller_home, cli, make_project):
    """A runner with room for all four points runs at most two at once: the controller holds the rest."""
    agent = start_agent(tmp_path / "g", controller_home, name="gpu-4", extra_env={"LANPOOL_FAKE_GPUS": "0,1,2,3"})
    try:
        cli("headless", "runners", "add", agent.address, check=True)
        project = make_project(PARALLEL, files={".lanpool/variables.yaml": "variables:\n  train:\n    lr: 1\n"})
        res = _sweep(cli, project, "--sweep", "lr=1,2,3,4", "--max-parallel", "2")
        assert "4 of 4 point(s) DONE" in res.stderr, res.stderr
        assert "point 3/4 (lr=3): waits for one of the points running to end (--max-parallel)" in res.stderr
        run = json.loads(res.stdout.splitlines()[-1])["run"]
        rows = json.loads(cli("headless", "compare", run, "--json", check=True).stdout)["jobs"]
        spans = [(r["started_at"], r["finished_at"]) for r in rows]
        # At each start, how many points ran: never more than two (the runner had four GPUs free).
        running = [sum(1 for s, f in spans if s <= start < f) for start, _ in spans]
        assert len(rows) == 4 and max(running) <= 2, spans
    finally:
        agent.stop()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-d", "--sweep", "lr=1,2", "--max-parallel", "1"], "--max-parallel is kept by the controller that follows"),
        (["--max-parallel", "2"], "--max-parallel limits a sweep's points: train has no sweep: add --sweep"),
        (["--sweep", "lr=1,2", "--max-parallel", "0"], "argument --max-parallel: expects a whole number of points"),
    ],
)
def test_max_parallel_is_for_a_followed_sweep(cli, make_project, controller_home, args, says):
    project = make_project(WORKFLOWS, files={".lanpool/variables.yaml": VARIABLES})
    res = cli("headless", "run", "train", *args, cwd=project)
    assert res.returncode == 2 and says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--sweep", "nosuch=1,2"], "--sweep nosuch: train has no variable 'nosuch'; its variables: batch, lr"),
        (["--sweep", "lr"], "--sweep 'lr': write VARIABLE=VALUE,VALUE,... (e.g. --sweep lr=1e-4,3e-4)"),
        (["--sweep", "lr=1,,2"], "--sweep 'lr=1,,2': an empty value; separate the values with single commas"),
        (
            ["--sweep", "lr=1", "--sweep", "lr=2"],
            "--sweep lr is given twice: put all its values in one --sweep lr=V1,V2",
        ),
        (
            ["--sweep", "lr=1,2", "--lr", "3"],
            "--lr and --sweep lr: give one (a swept variable takes each value in turn)",
        ),
        (
            ["--sweep", "lr=" + ",".join(map(str, range(40))), "--sweep", "batch=" + ",".join(map(str, range(30)))],
            "--sweep: 1200 points; one run takes at most 1000 (sweep fewer values)",
        ),
        (["--sweep", "lr=1,2", "--port", "8080"], "--port forwards one job's port to this machine"),
        (["--sweep", "lr=0.1,fast"], "--lr expects a number (default 0.3), got 'fast'"),  # before the run exists
    ],
)
def test_a_bad_sweep_is_one_line_and_nothing_runs(cli, make_project, controller_home, args, says):
    project = make_project(WORKFLOWS, files={".lanpool/variables.yaml": VARIABLES})
    res = cli("headless", "run", "train", *args, cwd=project)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"app: error: {says}") and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout) == []  # nothing stored


RANDOM_SWEEP = """
    sweep:
      method: random
      samples: 3
      seed: 5
      variables:
        lr: {log_uniform: [0.01, 1.0]}
        batch: [8, 16]
"""


def test_a_workflows_random_sweep_draws_the_same_points_again_and_reuses_them(gpu_runners, cli, make_project):
    project = make_project(WORKFLOWS + RANDOM_SWEEP, files={".lanpool/variables.yaml": VARIABLES})
    first = cli("headless", "run", "train", "--json", cwd=project, check=True, timeout=240)
    assert "a sweep of 3 point(s) over lr, batch, drawn with seed 5" in first.stderr
    points = [j["point"] for j in json.loads(first.stdout.splitlines()[-1])["jobs"]]
    assert len(points) == 3 and all(0.01 <= float(p["lr"]) <= 1.0 and p["batch"] in ("8", "16") for p in points)
    again = cli("headless", "run", "train", "--json", cwd=project, check=True, timeout=240)
    assert [j["point"] for j in json.loads(again.stdout.splitlines()[-1])["jobs"]] == points
    assert "3 of 3 point(s) DONE (3 reused)" in again.stderr


SLOW_WORKFLOWS = """
workflows:
  - name: train
    resources: {gpu: 1}
    commands:
      # 0.2 reaches each step 2 s after 0.1, sent with it: ranked second of two at step 3 however
      # the two starts fall on a loaded machine (seen in CI: it got there first, alone, and ran on).
      - if [ "${{ lr }}" = 0.2 ]; then sleep 2; fi
      # val_loss = lr * 10 / k at step k, one step each 0.5 s, 20 steps: a point stopped early ends long before.
      - >-
        for k in $(seq 1 20); do awk -v lr=${{ lr }} -v k=$k 'BEGIN { printf "{\\"step\\": %d, \\"name\\": \\"val_loss\\", \\"value\\": %g}\\n", k, lr * 10 / k }'
        >> "$LANPOOL_METRICS_FILE"; sleep 0.5; done
      - echo "finished lr=${{ lr }}"
    sweep:
      variables:
        lr: [0.1, 0.2, 0.4, 0.8]
      stop_worst: {metric: val_loss, at: [3], keep: 0.5}
"""


def test_stop_worst_stops_the_worse_points_at_the_step_and_says_why(gpu_runners, cli, make_project):
    project = make_project(SLOW_WORKFLOWS, files={".lanpool/variables.yaml": VARIABLES})
    res = cli("headless", "run", "train", "--json", cwd=project, timeout=240)
    assert res.returncode == 0, res.stderr  # a point the sweep stopped is not a failure
    jobs = {j["point"]["lr"]: j for j in json.loads(res.stdout.splitlines()[-1])["jobs"]}
    assert jobs["0.1"]["status"] == "DONE"  # the best point is never stopped
    # 0.4 and 0.8 reach step 3 after 0.1 and 0.2 did (two GPUs): worse than both, they are stopped.
    assert jobs["0.4"]["status"] == jobs["0.8"]["status"] == "STOPPED", jobs
    assert "stopped by stop_worst" in res.stderr
    rows = {
        r["variables"]["lr"]: r
        for r in json.loads(cli("headless", "compare", jobs["0.1"]["run"], "--json").stdout)["jobs"]
    }
    assert rows["0.4"]["error"].startswith("stopped by the sweep at step 3 (val_loss 1.333, rank 3 of "), rows["0.4"]
    assert not rows["0.1"]["error"]
    status = cli("headless", "status", "--no-refresh", check=True).stdout
    assert "stopped by the sweep at step 3" in status  # the reason in the runs table


def test_a_sweep_followed_from_python_keeps_max_parallel_and_stops_the_worse_points(
    gpu_runners, make_project, controller_home
):
    """lanpool.run(detach=False) follows a sweep as the CLI does (app/runs/sweep_follow.py): two
    points at a time, and at step 3 each is ranked among those that reached it (0.2 second of two:
    stopped; 0.4 and 0.8, sent as slots freed, third and fourth: stopped)."""
    import lanpool

    project = make_project(SLOW_WORKFLOWS, files={".lanpool/variables.yaml": VARIABLES})
    run = lanpool.run("train", detach=False, max_parallel=2, project=project, home=controller_home)
    rows = {r["variables"]["lr"]: r for r in lanpool.compare(run, home=controller_home)["jobs"]}
    assert rows["0.1"]["status"] == "DONE", rows
    assert rows["0.2"]["status"] == rows["0.4"]["status"] == rows["0.8"]["status"] == "STOPPED", rows
    assert rows["0.8"]["error"].startswith("stopped by the sweep at step 3 (val_loss 2.667, rank "), rows["0.8"]
    spans = [(r["started_at"], r["finished_at"]) for r in rows.values()]
    assert max(sum(1 for s, f in spans if s <= start < f) for start, _ in spans) <= 2, spans
