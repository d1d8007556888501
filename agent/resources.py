"""What this machine offers to jobs: CPUs, memory, GPUs."""

import os
import shutil
import subprocess


def detect_resources() -> dict[str, int | str]:
    """A flat map, as carried in Hello (and later in the mDNS TXT record)."""
    res: dict[str, int | str] = {"cpus": os.cpu_count() or 1, "memory_mb": _memory_mb()}
    gpus = _nvidia_gpus()
    res["gpus"] = len(gpus)
    if gpus:
        res["gpu_name"] = gpus[0][0]
        res["gpu_memory_mb"] = gpus[0][1]
    return res


def _memory_mb() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError):
        return 0


def _nvidia_gpus() -> list[tuple[str, int]]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, _, mem = line.rpartition(",")
        try:
            gpus.append((name.strip(), int(mem.strip())))
        except ValueError:
            continue
    return gpus
