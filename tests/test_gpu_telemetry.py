"""Per-job GPU telemetry: a real agent whose GPUs are faked at the edge (LANPOOL_FAKE_GPUS for the
list, LANPOOL_FAKE_NVIDIA_SMI for the readings) writes the figures of the GPUs a job holds, and
only those, into its metrics; `metrics --gpu` and the runners' GPU UTIL column show them; a
broken or hostile nvidia-smi is skipped with a log line and never stops the agent or the job."""

import json
import math
import stat
import sys
import time

import pytest

from lanpool.agent.host import gpu_telemetry
from lanpool.agent.host.gpu_telemetry import GpuSample, job_points, parse_smi
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


def test_parse_smi_keeps_good_lines_and_skips_the_rest():
    text = "0, 12, 300, 70.25\n1, [N/A], 10, [Not Supported]\nnope\n2, NaN, 1, 1\n3, 101, 1, 1\n0, 1, 1, 1\n"
    assert parse_smi(text) == [GpuSample(0, 12.0, 300.0, 70.25), GpuSample(1, None, 10.0, None)]
    assert parse_smi("x" * 10_000_000) == []


def test_job_points_are_metric_lines_for_held_gpus():
    samples = [GpuSample(0, 1.0, 2.0, 3.0), GpuSample(1, 50.0, None, 9.5)]
    lines = [json.loads(line) for line in job_points(samples, [1], 7, 100.0).splitlines()]
    assert [(p["name"], p["value"], p["step"]) for p in lines] == [("gpu1_util", 50.0, 7), ("gpu1_power_w", 9.5, 7)]


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


def test_sampling_interval_from_the_environment(monkeypatch):
    for text, want in (("", 5.0), ("2", 2.0), ("0", 0.0), ("nan", 5.0), ("-1", 5.0), ("1e9", 3600.0)):
        monkeypatch.setenv(gpu_telemetry.INTERVAL_ENV, text)
        assert gpu_telemetry.interval_s() == want
    assert math.isfinite(gpu_telemetry.interval_s())


class _FakeNvml:
    """pynvml's calls as nvidia-ml-py names them; GPU 1 has no power reading, as some boards."""

    class NVMLError(Exception):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        return type("U", (), {"gpu": [12, 80][h]})()

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("M", (), {"used": (h + 1) * 1024 * 1024 * 1024})()

    def nvmlDeviceGetPowerUsage(self, h):
        if h == 1:
            raise self.NVMLError("Not Supported")
        return 65_500  # milliwatts


def test_nvml_readings_in_our_units():
    samples = gpu_telemetry.Sampler(nvml=_FakeNvml()).sample()
    assert samples == [GpuSample(0, 12.0, 1024.0, 65.5), GpuSample(1, 80.0, 2048.0, None)]
