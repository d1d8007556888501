"""Each job of a DAG placed where it fits, on two real runners (one with a fake GPU at its
edge, LANPOOL_FAKE_GPUS), its dependencies' artifacts moving through the controller; the
job that can never fit named before anything runs; a declared artifact a job did not
produce warned about in its log and `status`, and never reused from the cache.
The part with real agents and the CLI (integration); the rest: tests/unit/test_placement.py."""

import json

import pytest

from tests.harness import start_agent

DAG = """
workflows:
  - name: prepare
    commands:
      - mkdir -p data
      - echo "rows from prepare" > data/set.txt
      - echo "prepare sees GPUs [$CUDA_VISIBLE_DEVICES]"
    artifacts: [data]
  - name: train
    depends-on: [prepare]
    resources: {gpu: 1}
    commands:
      - 'echo "train read $(cat data/set.txt)"'
      - echo "train sees GPUs [$CUDA_VISIBLE_DEVICES]"
"""


MISSING = """
workflows:
  - name: make
    commands:
      - echo kept > out.txt
    artifacts: [out.txt, checkpoint]
  - name: whole
    commands:
      - echo kept > out.txt
    artifacts: [out.txt]
  - name: consume
    depends-on: [make, whole]
    commands:
      - cat out.txt
"""


@pytest.fixture
def two_runners(tmp_path, controller_home, cli):
    """A CPU-only runner ("cpu-box": no GPU even where nvidia-smi exists) and one with 1 GPU."""
    cpu = start_agent(tmp_path / "cpu", controller_home, name="cpu-box", extra_env={"LANPOOL_FAKE_GPUS": ""})
    gpu = start_agent(tmp_path / "gpu", controller_home, name="gpu-box", extra_env={"LANPOOL_FAKE_GPUS": "0"})
    try:
        cli("headless", "runners", "add", cpu.address, check=True)
        cli("headless", "runners", "add", gpu.address, check=True)
        yield cpu, gpu
    finally:
        cpu.stop()
        gpu.stop()


def _jobs(cli) -> dict[str, dict]:
    """The newest job of each workflow, as `status --json` shows it."""
    runs = json.loads(cli("headless", "status", "--json", "--no-refresh", check=True).stdout)
    found: dict[str, dict] = {}
    for run in runs:  # newest run first
        for job in run["jobs"]:
            found.setdefault(job["workflow"], job)
    return found


def test_each_step_runs_on_a_runner_where_it_fits(two_runners, cli, make_project):
    project = make_project(DAG)
    out = cli("headless", "run", "train", cwd=project)
    assert out.returncode == 0, out.stderr
    jobs = _jobs(cli)
    assert jobs["prepare"]["runner"] == "cpu-box" and jobs["train"]["runner"] == "gpu-box"
    assert jobs["prepare"]["status"] == jobs["train"]["status"] == "DONE"
    # prepare's artifact came back to the controller and went up to the other runner.
    assert "train read rows from prepare" in out.stdout
    assert "prepare sees GPUs []" in out.stdout and "train sees GPUs [0]" in out.stdout


def test_the_step_that_cannot_fit_is_named_before_anything_runs(tmp_path, controller_home, cli, make_project):
    cpu = start_agent(tmp_path / "cpu", controller_home, name="cpu-only", extra_env={"LANPOOL_FAKE_GPUS": ""})
    try:
        cli("headless", "runners", "add", cpu.address, check=True)
        project = make_project(DAG)
        out = cli("headless", "run", "train", cwd=project)
        assert out.returncode == 2, out.stderr
        assert "cannot run train: needs 1 GPU" in out.stderr and "has 0 GPU" in out.stderr
        assert "prepare" not in out.stderr and "Traceback" not in out.stderr
        assert "prepare" not in _jobs(cli)  # refused before prepare was sent anywhere
    finally:
        cpu.stop()


@pytest.mark.parametrize("pin", ["name", "address"])
def test_runner_pins_every_step_and_names_the_one_that_does_not_fit(two_runners, cli, make_project, pin):
    cpu, _gpu = two_runners
    project = make_project(DAG)
    spec = "cpu-box" if pin == "name" else cpu.address
    out = cli("headless", "run", "train", "--runner", spec, cwd=project)
    assert out.returncode == 2, out.stderr
    assert "cannot run train: needs 1 GPU; runner cpu-box (--runner) has 0 GPU" in out.stderr
    assert "prepare" not in _jobs(cli)
    # What fits the pinned runner runs there, even with a better one beside it.
    out = cli("headless", "run", "prepare", "--runner", spec, cwd=project)
    assert out.returncode == 0, out.stderr
    assert _jobs(cli)["prepare"]["runner"] == "cpu-box"


def test_a_missing_artifact_is_warned_about_and_never_reused(agent, cli, make_project):
    project = make_project(MISSING)
    first = cli("headless", "run", "consume", "--runner", agent.address, cwd=project)
    assert first.returncode == 0, first.stderr
    assert "make: warning: artifact 'checkpoint' was not produced" in first.stderr
    jobs = _jobs(cli)
    assert jobs["make"]["warnings"] == ["artifact 'checkpoint' was not produced"]
    assert jobs["whole"]["warnings"] == [] and jobs["consume"]["warnings"] == []
    table = cli("headless", "status", "--no-refresh", check=True).stdout
    assert f"warning: job {jobs['make']['job']} (make): artifact 'checkpoint' was not produced" in table
    log = cli("headless", "logs", jobs["make"]["job"], check=True)
    assert "artifact 'checkpoint' was not produced by the job" in log.stdout + log.stderr

    second = cli("headless", "run", "consume", cwd=project)
    assert second.returncode == 0, second.stderr
    assert "whole: reusing job" in second.stderr  # the same inputs are reused when nothing was missing...
    assert "make: reusing" not in second.stderr  # ...but never a job that did not produce its outputs
    assert _jobs(cli)["make"]["job"] != jobs["make"]["job"]
    plan = json.loads(cli("headless", "plan", "consume", "--json", cwd=project, check=True).stdout)
    assert {j["workflow"]: j["action"] for j in plan["jobs"]}["make"] == "run"
