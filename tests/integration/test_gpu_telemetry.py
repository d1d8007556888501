"""Per-job GPU telemetry: a real agent whose GPUs are faked at the edge (LANPOOL_FAKE_GPUS for the
list, LANPOOL_FAKE_NVIDIA_SMI for the readings) writes the figures of the GPUs a job holds, and
only those, into its metrics; `metrics --gpu` and the runners' GPU UTIL column show them; a
broken or hostile nvidia-smi is skipped with a log line and never stops the agent or the job.
The part with real agents and the CLI (integration); the rest: tests/unit/test_gpu_telemetry.py."""

import json
import stat
import sys
import time

import pytest

from lanpool.agent.host import gpu_telemetry
from lanpool.agent.host.gpu_telemetry import GpuSample
from tests.harness import start_agent

SMI_OK = "0, 99, 100, 50.0\n1, 37, 2048, 120.5\n2, 88, 4096, [N/A]\n"


JOB = """
workflows:
  - name: train
    resources: {gpu: 1}
    commands:
      - echo "sees GPUs [$CUDA_VISIBLE_DEVICES]"
      - sleep 4
"""


def _fake_smi(tmp_path, body: str):
    """An executable printing `body` as nvidia-smi would, whatever its arguments."""
    path = tmp_path / "nvidia-smi"
    path.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write({body!r})\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def gpu_runner(tmp_path, controller_home, cli, request):
    """A runner with one fake GPU, index 1, and an nvidia-smi that reports GPUs 0, 1 and 2."""
    smi = _fake_smi(tmp_path, request.param)
    env = {"LANPOOL_FAKE_GPUS": "1", "LANPOOL_FAKE_NVIDIA_SMI": str(smi), "LANPOOL_GPU_SAMPLE_S": "0.5"}
    a = start_agent(tmp_path / "gpu", controller_home, name="gpu-box", extra_env=env)
    try:
        cli("headless", "runners", "add", a.address, check=True)
        yield a
    finally:
        a.stop()


def _run(cli, make_project) -> str:
    res = cli("headless", "run", "train", cwd=make_project(JOB), timeout=120)
    assert res.returncode == 0, res.stderr
    assert "sees GPUs [1]" in res.stdout
    return res.stderr.split()[1].rstrip(":")


@pytest.mark.parametrize("gpu_runner", [SMI_OK], indirect=True, ids=["ok"])
def test_a_job_gets_the_figures_of_its_gpu_only(gpu_runner, cli, make_project):
    run = _run(cli, make_project)
    points = json.loads(cli("headless", "metrics", run, "--json", check=True).stdout)
    names = {p["name"] for p in points}
    assert {"gpu1_util", "gpu1_mem_mb", "gpu1_power_w"} <= names, names
    assert not [n for n in names if n.startswith(("gpu0_", "gpu2_"))]  # GPUs it does not hold: not sampled
    util = [p for p in points if p["name"] == "gpu1_util"]
    assert len(util) >= 2 and all(p["value"] == 37.0 for p in util)
    assert [p["step"] for p in util] == sorted(p["step"] for p in util)

    shown = cli("headless", "metrics", run, "--gpu", check=True).stdout
    assert "gpu1_util" in shown and "gpu1_power_w" in shown and "120.5" in shown

    runners = cli("headless", "runners", check=True).stdout
    assert "GPU UTIL" in runners and "99% 37% 88%" in runners, runners
    listed = json.loads(cli("headless", "runners", "--json", check=True).stdout)
    assert [r["gpu_util"] for r in listed if r["name"] == "gpu-box"] == [[99, 37, 88]], listed


HOSTILE = "garbage\n" + "1," * 50_000 + "\n1, nan, 5, 5\n1, 1e400, 5, 5\n1, -4, 5, 5\n99999, 1, 1, 1\n\x00\xff\n"


@pytest.mark.parametrize("gpu_runner", [HOSTILE], indirect=True, ids=["hostile"])
def test_a_hostile_nvidia_smi_is_ignored(gpu_runner, cli, make_project):
    run = _run(cli, make_project)  # the job ran to its end (exit 0)
    points = json.loads(cli("headless", "metrics", run, "--json", check=True).stdout)
    assert not [p for p in points if p["name"].startswith("gpu")]
    assert "no GPU figures" in cli("headless", "metrics", run, "--gpu", check=True).stdout
    assert "not understood" in gpu_runner.log_path.read_text()
    assert "gpu-box" in cli("headless", "runners", check=True).stdout  # still answering


def test_an_endless_or_hung_nvidia_smi_is_cut(tmp_path, monkeypatch):
    endless = tmp_path / "endless"
    endless.write_text(f"#!{sys.executable}\nimport sys\nwhile True: sys.stdout.write('0, 1, 1, 1\\n')\n")
    endless.chmod(0o755)
    hung = tmp_path / "hung"
    hung.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    hung.chmod(0o755)
    monkeypatch.setattr(gpu_telemetry, "_TIMEOUT_S", 1.0)
    started = time.monotonic()
    assert gpu_telemetry.Sampler(argv=[str(endless)]).sample() == [GpuSample(0, 1.0, 1.0, 1.0)]
    assert gpu_telemetry.Sampler(argv=[str(hung)]).sample() == []
    assert gpu_telemetry.Sampler(argv=[str(tmp_path / "absent")]).sample() == []
    assert time.monotonic() - started < 20
