"""Per-job GPU telemetry: a real agent whose GPUs are faked at the edge (LANPOOL_FAKE_GPUS for the
list, LANPOOL_FAKE_NVIDIA_SMI for the readings) writes the figures of the GPUs a job holds, and
only those, into its metrics; `metrics --gpu` and the runners' GPU UTIL column show them; a
broken or hostile nvidia-smi is skipped with a log line and never stops the agent or the job.
The in-process part (unit); the rest: tests/integration/test_gpu_telemetry.py."""

import json
import math

from lanpool.agent.host import gpu_telemetry
from lanpool.agent.host.gpu_telemetry import GpuSample, job_points, parse_smi


def test_parse_smi_keeps_good_lines_and_skips_the_rest():
    text = "0, 12, 300, 70.25\n1, [N/A], 10, [Not Supported]\nnope\n2, NaN, 1, 1\n3, 101, 1, 1\n0, 1, 1, 1\n"
    assert parse_smi(text) == [GpuSample(0, 12.0, 300.0, 70.25), GpuSample(1, None, 10.0, None)]
    assert parse_smi("x" * 10_000_000) == []


def test_job_points_are_metric_lines_for_held_gpus():
    samples = [GpuSample(0, 1.0, 2.0, 3.0), GpuSample(1, 50.0, None, 9.5)]
    lines = [json.loads(line) for line in job_points(samples, [1], 7, 100.0).splitlines()]
    assert [(p["name"], p["value"], p["step"]) for p in lines] == [("gpu1_util", 50.0, 7), ("gpu1_power_w", 9.5, 7)]


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
