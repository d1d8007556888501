"""Each 2022 dstack dialect (tests/fixtures/dialects) through the real CLI on a real
agent: `--help`, `plan` and `run`, with the job's own output showing the variables it
saw (arguments and environment). The runner fakes one GPU: the fixtures ask for one."""

import json
import shutil
from pathlib import Path

import pytest

from tests.harness import start_agent

FIXTURES = Path(__file__).parents[1] / "fixtures" / "dialects"


@pytest.fixture
def gpu_agent(tmp_path: Path, controller_home: Path):
    # Process jobs: a python-provider workflow names a python:X-slim image, which a runner with a
    # Docker engine (scripts/test starts one) would pull, and no registry is reachable here: no engine for it.
    a = start_agent(
        tmp_path / "gpu-agent",
        controller_home,
        extra_env={"LANPOOL_FAKE_GPUS": "0", "DOCKER_HOST": "unix:///nonexistent/lanpool-test-docker.sock"},
    )
    yield a
    a.stop()


def _copy(name: str, tmp_path: Path) -> Path:
    return shutil.copytree(FIXTURES / name, tmp_path / name)


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_early_2022_project(gpu_agent, cli, tmp_path):
    project = _copy("early-2022", tmp_path)
    runner = ("--runner", gpu_agent.address)
    help_text = cli("headless", "run", "train", "--help", cwd=project, check=True).stdout
    assert "defaults from .dstack/variables.yaml" in help_text
    assert "--batch-size" in help_text and "--learning.rate" in help_text and "--model" in help_text

    # `download:latest` is the latest finished run of download: there is none yet.
    missing = cli("headless", "plan", "train", cwd=project)
    assert missing.returncode == 2
    assert "run `app headless run download` first" in _one_line(missing.stderr)

    first = cli("headless", "run", "download", *runner, cwd=project)
    assert first.returncode == 0, first.stderr
    assert "download lines=3 MODEL=117M CORPUS_SIZE=3" in first.stdout

    plan = json.loads(cli("headless", "plan", "train", "--json", cwd=project, check=True).stdout)
    assert [j["workflow"] for j in plan["jobs"]] == ["train"]  # download is an input, not a step
    assert plan["jobs"][0]["tagged_inputs"]

    res = cli("headless", "run", "train", *runner, "--batch-size", "32", cwd=project)
    assert res.returncode == 0, res.stderr
    assert "train args: model=117M batch-size=32 test-batch-size=1000 lr=0.01" in res.stdout
    assert "train env: MODEL=117M BATCH_SIZE=32 TEST_BATCH_SIZE=1000 LEARNING_RATE=0.01" in res.stdout
    assert "train corpus lines=3" in res.stdout

    # A newer download is what `:latest` means from then on.
    cli("headless", "run", "download", *runner, "--corpus-size", "5", cwd=project, check=True)
    res = cli("headless", "run", "train", *runner, cwd=project, check=True)
    assert "train corpus lines=5" in res.stdout and "batch-size=64" in res.stdout


def test_mid_2022_project(gpu_agent, cli, tmp_path):
    project = _copy("mid-2022", tmp_path)
    runner = ("--runner", gpu_agent.address)
    plan = json.loads(cli("headless", "plan", "train", "--json", cwd=project, check=True).stdout)
    assert [j["workflow"] for j in plan["jobs"]] == ["prepare", "train"]
    assert plan["jobs"][1]["variables"] == {"model": "345M", "epochs": "2", "test-batch-size": "100"}

    res = cli("headless", "run", "train", *runner, "--test-batch-size", "50", cwd=project)
    assert res.returncode == 0, res.stderr
    assert "prepare split=train MODEL=345M" in res.stdout
    assert "train epochs=2 test-batch-size=50 split=train MODEL=345M" in res.stdout
    assert "train env EPOCHS=2 TEST_BATCH_SIZE=50" in res.stdout

    # The global reaches prepare too (its env): a new value is a new input for it.
    plan = json.loads(cli("headless", "plan", "train", "--json", "--model", "774M", cwd=project, check=True).stdout)
    assert plan["jobs"][0]["action"] == "run" and "variables model" in plan["jobs"][0]["reason"]
    plan = json.loads(cli("headless", "plan", "train", "--json", cwd=project, check=True).stdout)
    assert plan["jobs"][0]["action"] == "reuse"


def test_late_2022_project(agent, cli, tmp_path):
    project = _copy("late-2022", tmp_path)
    runner = ("--runner", agent.address)
    plan = cli("headless", "plan", "cat-txt", "--json", cwd=project, check=True)
    assert [j["workflow"] for j in json.loads(plan.stdout)["jobs"]] == ["hello-txt", "cat-txt"]
    assert "'mount: true' is ignored" in plan.stderr and "'cache'" in plan.stderr  # said, not silently dropped

    res = cli("headless", "run", "cat-txt", *runner, "--who", "lanpool", cwd=project)
    assert res.returncode == 0, res.stderr
    assert "hello-txt wrote hello, lanpool (8)" in res.stdout
    assert "cat-txt read hello, lanpool (8)" in res.stdout

    missing = cli("headless", "run", "cat-tagged", *runner, cwd=project)
    assert missing.returncode == 2 and "--tag txt-file" in missing.stderr
    cli("headless", "run", "hello-txt", *runner, "--tag", "txt-file", "--batch-size", "16", cwd=project, check=True)
    res = cli("headless", "run", "cat-tagged", *runner, cwd=project)
    assert res.returncode == 0, res.stderr
    assert "cat-tagged read hello, world (16)" in res.stdout


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("provider: code", "'provider: code' starts a VS Code dev environment"),
        ("provider: notebook", "'provider: notebook' starts a Jupyter notebook"),
        ("provider: bash\n    commands: [jupyter lab]\n    ports: 8888", "to forward port 8888, write ports: [8888]"),
    ],
)
def test_unsupported_keys_exit_2_with_one_line(cli, tmp_path, entry, expected):
    project = tmp_path / "dev"
    (project / ".dstack").mkdir(parents=True)
    (project / ".dstack" / "workflows.yaml").write_text(f"workflows:\n  - name: dev\n    {entry}\n")
    for verb in ("plan", "run"):
        res = cli("headless", verb, "dev", cwd=project)
        assert res.returncode == 2
        line = _one_line(res.stderr)
        assert expected in line and "Traceback" not in res.stderr
