"""The Python API (docs/api.md) on a real agent: lanpool.run, Run.wait/status/logs/metrics/stop,
lanpool.compare and lanpool.runners, on the same store the CLI reads. Bad input beside each."""

import json

import pytest

import lanpool

WORKFLOWS = """
workflows:
  - name: train
    commands:
      - echo "lr is ${{ lr }}"
      - >-
        awk -v lr=${{ lr }} 'BEGIN { for (k = 1; k <= 2; k++) printf "{\\"step\\": %d, \\"name\\": \\"val_loss\\", \\"value\\": %g}\\n", k, lr / k }'
        >> "$LANPOOL_METRICS_FILE"
  - name: forever
    commands: ["echo started", "sleep 300"]
"""
VARIABLES = "variables:\n  train:\n    lr: 0.5\n"


@pytest.fixture
def project(make_project):
    return make_project(WORKFLOWS, files={".lanpool/variables.yaml": VARIABLES})


def test_run_wait_logs_metrics_and_compare(agent, cli, project, controller_home):
    run = lanpool.run("train", variables={"lr": 0.25}, project=project, runner=agent.address, home=controller_home)
    assert isinstance(run, lanpool.Run) and run.name
    [job] = run.wait(timeout=120)
    assert job["status"] == "DONE" and job["exit_code"] == 0 and job["workflow"] == "train"
    assert run.logs() == "lr is 0.25\n"
    points = run.metrics()
    assert [(p["step"], p["value"]) for p in points if p["name"] == "val_loss"] == [(1, 0.25), (2, 0.125)]
    assert {p["job_id"] for p in points} == {job["job_id"]}
    # The CLI sees the run the API made, and the API opens a run by name.
    listed = json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout)
    assert [r["run"] for r in listed] == [run.name]
    assert lanpool.Run(run.name, home=controller_home).status()[0]["status"] == "DONE"

    sweep = lanpool.run(
        "train",
        sweep={"lr": [0.5, 0.125]},
        detach=False,
        max_parallel=1,
        project=project,
        runner=agent.address,
        home=controller_home,
    )
    table = lanpool.compare(sweep, run, sort="val_loss", home=controller_home)
    first, second = sorted((r for r in table["jobs"] if r["run"] == sweep.name), key=lambda r: r["started_at"])
    assert first["finished_at"] <= second["started_at"]  # max_parallel=1: the second point sent once the first ended
    assert [r["variables"]["lr"] for r in table["jobs"]] == ["0.125", "0.25", "0.5"]  # best val_loss first
    assert table["varying"] == ["lr"] and table["jobs"][0]["metrics"]["val_loss"]["best"] == 0.0625
    assert any(r["name"] == agent.name for r in lanpool.runners(wait=0, home=controller_home))


def test_stop_and_bad_input(agent, project, controller_home):
    run = lanpool.run("forever", project=project, runner=agent.address, home=controller_home)
    with pytest.raises(TimeoutError):
        run.wait(timeout=1)  # the job is left running
    [job] = run.stop(grace=1)
    assert job["status"] == "STOPPED", job

    with pytest.raises(lanpool.Error, match="train has no variable 'nosuch'; its variables: lr"):
        lanpool.run("train", variables={"nosuch": 1}, project=project, home=controller_home)
    with pytest.raises(lanpool.Error, match="no workflow named 'nosuch'"):
        lanpool.run("nosuch", project=project, home=controller_home)
    with pytest.raises(lanpool.Error, match="--lr expects a number \\(default 0.5\\), got 'fast'"):
        lanpool.run("train", variables={"lr": "fast"}, project=project, home=controller_home)
    with pytest.raises(lanpool.Error, match="--lr expects a number \\(default 0.5\\), got 'fast'"):
        lanpool.run("train", sweep={"lr": [0.1, "fast"]}, project=project, home=controller_home)
    with pytest.raises(lanpool.Error, match="sweep 'lr': give a list of values without commas"):
        lanpool.run("train", sweep={"lr": ["1,2"]}, project=project, home=controller_home)
    with pytest.raises(lanpool.Error, match="max_parallel: a whole number >= 1, kept while the sweep is followed"):
        lanpool.run("train", sweep={"lr": [1, 2]}, max_parallel=2, project=project, home=controller_home)  # detached
    with pytest.raises(lanpool.Error, match="max_parallel limits a sweep's points: train has no sweep"):
        lanpool.run("train", detach=False, max_parallel=2, project=project, home=controller_home)
    with pytest.raises(lanpool.Error, match="no run or job named 'nosuch-run'"):
        lanpool.Run("nosuch-run", home=controller_home).status()
    with pytest.raises(lanpool.Error, match="mode 'best': 'min' or 'max'"):
        lanpool.compare(run, mode="best", home=controller_home)
    with pytest.raises(AttributeError):
        lanpool.nosuch  # noqa: B018
    assert json.dumps(lanpool.Run(run.name, home=controller_home).status())  # plain data for scripts
