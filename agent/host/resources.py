"""What this machine offers to jobs: CPUs, memory, GPUs."""

import os

from lanpool.agent.errors import AgentError
from lanpool.agent.host.gpus import Gpu

FAKE_CPUS_ENV = "LANPOOL_FAKE_CPUS"


def detect_resources(gpus: list[Gpu], executor: str, python: str = "") -> dict[str, int | str]:
    """A flat map, as carried in Hello (and later in the mDNS TXT record).

    `executor` is what runs jobs that name an image: "docker" or "process";
    `python` the versions process jobs can have, the base first ("3.11,3.10").
    """
    res: dict[str, int | str] = dict(detect_machine())
    res["gpus"] = len(gpus)
    if gpus:
        res["gpu_name"] = gpus[0].name
        res["gpu_memory_mb"] = gpus[0].memory_mb
    res["executor"] = executor
    if python:
        res["python"] = python[:200]  # within Hello's bound on a resources value (256)
    return res


def detect_machine() -> dict[str, int]:
    """CPUs and memory (MB). LANPOOL_FAKE_CPUS=N claims N CPUs (tests: a job that needs
    "all of a runner" the same on every machine), as LANPOOL_FAKE_GPUS does for GPUs."""
    cpus = os.cpu_count() or 1
    fake = os.environ.get(FAKE_CPUS_ENV, "").strip()
    if fake:
        if not fake.isdigit() or not 0 < int(fake) <= 65536:
            raise AgentError(f"{FAKE_CPUS_ENV}={fake[:20]!r}: expected a CPU count like 2")
        cpus = int(fake)
    return {"cpus": cpus, "memory_mb": _memory_mb()}


def _memory_mb() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError):
        return 0
