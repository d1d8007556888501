"""What this machine offers to jobs: CPUs, memory, GPUs."""

import os

from agent.gpus import Gpu


def detect_resources(gpus: list[Gpu], executor: str, python: str = "") -> dict[str, int | str]:
    """A flat map, as carried in Hello (and later in the mDNS TXT record).

    `executor` is what runs jobs that name an image: "docker" or "process";
    `python` the versions process jobs can have, the base first ("3.11,3.10").
    """
    res: dict[str, int | str] = {"cpus": os.cpu_count() or 1, "memory_mb": _memory_mb()}
    res["gpus"] = len(gpus)
    if gpus:
        res["gpu_name"] = gpus[0].name
        res["gpu_memory_mb"] = gpus[0].memory_mb
    res["executor"] = executor
    if python:
        res["python"] = python[:200]  # within Hello's bound on a resources value (256)
    return res


def _memory_mb() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError):
        return 0
