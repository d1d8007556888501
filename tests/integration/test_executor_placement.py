"""Placement knows what each runner can run (app/runners/scheduler.py Capacity.cannot_run), and
provider python's implicit image never makes a process runner refuse a job: a `--executor
process` runner and an `auto` runner without a Docker engine, as real agents on loopback."""

import json

import pytest

from tests.harness import start_agent

WORKFLOWS = """
workflows:
  - name: hello
    provider: python
    script: hello.py
  - name: boxed
    image: busybox:latest
    commands: [echo boxed]
  - name: docker-only
    executor: docker
    image: busybox:latest
    commands: [echo never]
  - name: old-python
    provider: python
    version: "2.7"
    script: hello.py
"""


@pytest.fixture
def process_and_auto(tmp_path, controller_home, cli):
    agents = [
        start_agent(tmp_path / "a", controller_home, name="a-proc", extra_args=("--executor", "process")),
        # no engine at this address: `auto` runs an image job as processes (the image ignored)
        start_agent(
            tmp_path / "b", controller_home, name="b-auto", extra_env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
        ),
    ]
    for agent in agents:
        cli("headless", "runners", "add", agent.address, check=True)
    yield agents
    for agent in agents:
        agent.stop()


def _latest(cli) -> dict:
    return json.loads(cli("headless", "status", "--json", check=True).stdout)[0]["jobs"][0]


def test_provider_python_and_images_go_where_they_can_run(process_and_auto, cli, make_project):
    project = make_project(WORKFLOWS, files={"hello.py": "import sys\nprint('hello from', sys.version_info[0])\n"})
    res = cli("headless", "run", "hello", "--runner", "a-proc", cwd=project, timeout=120)
    assert res.returncode == 0 and "hello from 3" in res.stdout, (res.stdout, res.stderr)
    assert _latest(cli)["runner"] == "a-proc"
    for _ in range(2):  # never a-proc, though its name sorts first
        res = cli("headless", "run", "boxed", cwd=project, timeout=120)
        assert res.returncode == 0 and "boxed" in res.stdout, (res.stdout, res.stderr)
        assert _latest(cli)["runner"] == "b-auto"
    refused = cli("headless", "run", "docker-only", cwd=project, timeout=60)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert (
        "no runner can run it: a-proc runs no containers (--executor process); "
        "b-auto runs no containers (--executor auto)" in refused.stderr
    ), refused.stderr
    old = cli("headless", "run", "old-python", cwd=project, timeout=60)
    assert old.returncode == 2 and "a-proc has Python" in old.stderr and "not 2.7" in old.stderr, old.stderr
    assert "Traceback" not in refused.stderr + old.stderr
