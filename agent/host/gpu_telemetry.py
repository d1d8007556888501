"""GPU telemetry: utilization, memory used and power of this machine's GPUs, sampled every
few seconds, written into each running job's metric stream ("met") for the GPUs it holds
(gpu0_util, gpu0_mem_mb, gpu0_power_w), and the runner's current utilization per GPU for
its Hello resources (the GPU UTIL column of `app headless runners`).

One sampler per agent, whatever the number of jobs: one query per interval. Sources, first
found: LANPOOL_FAKE_NVIDIA_SMI (a program printing nvidia-smi's CSV: tests, as
LANPOOL_FAKE_GPUS fakes the GPU list), NVML through `pynvml` (nvidia-ml-py, optional),
`nvidia-smi` on the PATH. With LANPOOL_FAKE_GPUS and no fake nvidia-smi nothing is sampled:
the real GPUs, if any, are not the ones the jobs were given.

What a source prints is read bounded and checked (a broken driver, a hostile fake): a bad
line is skipped with a log line, never an exception out of here.
"""

import asyncio
import json
import logging
import math
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lanpool.agent.host.gpus import FAKE_ENV as FAKE_GPUS_ENV

if TYPE_CHECKING:
    from lanpool.agent.jobs.job import Job

log = logging.getLogger(__name__)

FAKE_SMI_ENV = "LANPOOL_FAKE_NVIDIA_SMI"
INTERVAL_ENV = "LANPOOL_GPU_SAMPLE_S"  # seconds between samples; 0 turns telemetry off
DEFAULT_INTERVAL_S = 5.0
_MIN_INTERVAL_S, _MAX_INTERVAL_S = 0.2, 3600.0
_QUERY = ["--query-gpu=index,utilization.gpu,memory.used,power.draw", "--format=csv,noheader,nounits"]
_TIMEOUT_S = 10.0
_MAX_OUTPUT = 64 * 1024  # bytes read from nvidia-smi: far more than 64 GPUs print
_MAX_LINE = 200
_MAX_GPUS = 64
_MAX_INDEX = 1023
_MAX_MEM_MB = 1 << 30
_MAX_POWER_W = 100_000.0
_UTIL_CHARS = 200  # of the "gpu_util" resource: within Hello's bound on a value (256)


@dataclass(frozen=True)
class GpuSample:
    index: int
    util: float | None  # percent
    mem_mb: float | None
    power_w: float | None


def _number(text: str, limit: float) -> float | None:
    """A reading, or None for what nvidia-smi prints when it has none ([N/A], [Not Supported])."""
    text = text.strip()
    if text.startswith("["):
        return None
    value = float(text)  # ValueError: the line is bad
    if not math.isfinite(value) or not 0 <= value <= limit:
        raise ValueError(f"{text[:20]!r} out of range")
    return value


def parse_smi(text: str) -> list[GpuSample]:
    """nvidia-smi's CSV (index, util, memory.used, power.draw), each bad line skipped."""
    out: dict[int, GpuSample] = {}
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split(",")
        if len(line) > _MAX_LINE or len(fields) != 4 or len(out) >= _MAX_GPUS:
            bad += 1
            continue
        try:
            index = int(fields[0].strip())
            if not 0 <= index <= _MAX_INDEX:
                raise ValueError("index out of range")
            sample = GpuSample(
                index, _number(fields[1], 100.0), _number(fields[2], _MAX_MEM_MB), _number(fields[3], _MAX_POWER_W)
            )
        except ValueError:
            bad += 1
            continue
        out.setdefault(index, sample)
    if bad:
        log.warning("GPU telemetry: %d line(s) of nvidia-smi's output not understood, skipped", bad)
    return [out[i] for i in sorted(out)]


def _run_bounded(argv: list[str]) -> str:
    """The program's stdout, at most _MAX_OUTPUT bytes, killed after _TIMEOUT_S."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    timer = threading.Timer(_TIMEOUT_S, proc.kill)  # a hung driver call must not hold the sampler
    timer.start()
    try:
        assert proc.stdout is not None
        data = proc.stdout.read(_MAX_OUTPUT)
        if len(data) >= _MAX_OUTPUT:
            log.warning("GPU telemetry: nvidia-smi printed more than %d bytes; the rest is ignored", _MAX_OUTPUT)
            data = data[: data.rfind(b"\n") + 1]
        proc.stdout.close()
        proc.kill()  # it has said enough (a no-op once it exited)
        proc.wait()
    finally:
        timer.cancel()
    return data.decode("utf-8", "replace")


class Sampler:
    """Reads all GPUs at once from the first source found. Blocking: call in a thread."""

    def __init__(self, argv: list[str] | None = None, nvml: object | None = None) -> None:
        self.argv = argv
        self.nvml = nvml
        self._lock = threading.Lock()  # one query at a time

    @classmethod
    def from_env(cls) -> "Sampler | None":
        fake = os.environ.get(FAKE_SMI_ENV)
        if fake:
            return cls(argv=[fake, *_QUERY])
        if os.environ.get(FAKE_GPUS_ENV) is not None:
            return None
        try:
            import pynvml  # type: ignore[import-not-found]  # noqa: PLC0415  # optional: nvidia-ml-py

            pynvml.nvmlInit()
            return cls(nvml=pynvml)
        except Exception:  # not installed, or no driver: try nvidia-smi
            pass
        smi = shutil.which("nvidia-smi")
        return cls(argv=[smi, *_QUERY]) if smi else None

    def sample(self) -> list[GpuSample]:
        with self._lock:
            try:
                if self.nvml is not None:
                    return self._sample_nvml()
                assert self.argv is not None
                return parse_smi(_run_bounded(self.argv))
            except Exception as exc:  # a broken source: no sample this time, the agent goes on
                log.warning("GPU telemetry: sampling failed: %s", str(exc)[:200])
                return []

    def _sample_nvml(self) -> list[GpuSample]:
        nvml: Any = self.nvml
        out = []
        for index in range(min(nvml.nvmlDeviceGetCount(), _MAX_GPUS)):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            util = _reading(lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu, handle, 1, 100.0)
            mem = _reading(lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used, handle, 1 << 20, _MAX_MEM_MB)
            power = _reading(nvml.nvmlDeviceGetPowerUsage, handle, 1000, _MAX_POWER_W)  # milliwatts
            out.append(GpuSample(index, util, mem, power))
        return out


def _reading(read: Callable[[Any], Any], handle: object, scale: float, limit: float) -> float | None:
    """One NVML reading in our unit, or None: not supported on this GPU, or out of range."""
    try:
        return _number(str(float(read(handle)) / scale), limit)
    except Exception:
        return None


def job_points(samples: list[GpuSample], held: list[int], step: int, at: float) -> bytes:
    """Metric lines (training/metrics.py's format) for the GPUs in `held` only."""
    lines = []
    for s in samples:
        if s.index not in held:
            continue
        for suffix, value in (("util", s.util), ("mem_mb", s.mem_mb), ("power_w", s.power_w)):
            if value is not None:
                point = {"step": step, "epoch": None, "name": f"gpu{s.index}_{suffix}", "value": value, "time": at}
                lines.append(json.dumps(point).encode() + b"\n")
    return b"".join(lines)


def interval_s() -> float:
    text = os.environ.get(INTERVAL_ENV, "").strip()
    if not text:
        return DEFAULT_INTERVAL_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if value == 0:
        return 0.0
    if not math.isfinite(value) or value < 0:
        log.warning("%s=%r: expected seconds like 5 (0: off); using %g", INTERVAL_ENV, text[:20], DEFAULT_INTERVAL_S)
        return DEFAULT_INTERVAL_S
    return min(max(value, _MIN_INTERVAL_S), _MAX_INTERVAL_S)


class Telemetry:
    """The agent's one sampling loop, started on first use, and its latest sample."""

    def __init__(self, sampler: Sampler | None, interval: float) -> None:
        self.sampler = sampler if interval > 0 else None
        self.interval = interval
        self.latest: list[GpuSample] = []
        self._new = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    def ensure_running(self) -> None:
        if self.sampler is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside the agent's loop: nothing to start
            return
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._new = asyncio.Condition()  # bound to the loop that uses it
            self._task = loop.create_task(self._loop())

    async def _loop(self) -> None:
        assert self.sampler is not None
        while True:
            self.latest = await asyncio.to_thread(self.sampler.sample)
            async with self._new:
                self._new.notify_all()
            await asyncio.sleep(self.interval)

    async def next_sample(self) -> list[GpuSample]:
        async with self._new:
            await self._new.wait()
        return self.latest

    def resources(self) -> dict[str, str]:
        """{"gpu_util": "37,0"}: percent per GPU in index order, for Hello (empty without a sample)."""
        self.ensure_running()
        if not self.latest:
            return {}
        text = ",".join("-" if s.util is None else str(round(s.util)) for s in self.latest)
        return {"gpu_util": text[:_UTIL_CHARS]}

    async def watch(self, job: "Job") -> None:
        """Write each new sample of the job's GPUs into its metric stream while this start of it runs."""
        record, execution = job.record, job.execution
        if self.sampler is None or not record.gpus:
            return
        self.ensure_running()
        held = list(record.gpus)
        while not record.terminal and job.execution is execution and record.gpus == held:
            samples = await self.next_sample()
            if record.terminal or job.execution is not execution:
                return
            now = time.time()
            # Seconds since the job started: a re-adopted job's new points follow its old ones.
            data = job_points(samples, held, int(now - (record.started_at or now)), now)
            if data:
                job.output("met", data)


_shared: Telemetry | None = None


def telemetry() -> Telemetry:
    """The agent's Telemetry, built from the environment on first use."""
    global _shared
    if _shared is None:
        _shared = Telemetry(Sampler.from_env(), interval_s())
    return _shared
