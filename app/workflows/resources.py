"""Checking and normalising a workflow's `resources:` (gpu, cpu, memory, shm_size).

Every number must be finite, positive where a size, and at most a limit far
above any machine: YAML reads `.inf` and `.nan` as floats, and a value past
the limits would only fail later, on the wire or on the runner.
"""

import math
import re
from collections.abc import Callable
from typing import Any

from lanpool.app.workflows.slurm import SLURM_KEYS, slurm_name_problem

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNIT_MB = {"": 1, "B": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
# The runner refuses more (agent/jobs/manager.py): 1 PiB, 1024 GPUs, 65536 CPUs.
MAX_SIZE_MB = 2**30
MAX_COUNT = {"gpu": 1024, "cpu": 65536}


def parse_size_mb(value: object, what: str) -> int:
    """`24GB`, `512MB`, `16Gi`, or a number of MB: at least 1 MB, at most MAX_SIZE_MB."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a size like 16GB, not {value!r}")
    if isinstance(value, (int, float)):
        mb = value
    else:
        m = _SIZE.match(str(value))
        if not m:
            raise ValueError(f"{what} must be a size like 16GB or 512MB, not {_short(value)}")
        mb = float(m.group(1)) * _UNIT_MB[(m.group(2) or "").upper()[:1]]
    if not math.isfinite(mb) or mb < 1 or mb > MAX_SIZE_MB:
        raise ValueError(f"{what} must be a size from 1MB to {MAX_SIZE_MB // 2**20}TB, not {_short(value)}")
    return int(mb)


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        else:
            raise ValueError(f"{what} must be a whole number, not {_short(value)}")
    if value < 0:
        raise ValueError(f"{what} must not be negative")
    limit = MAX_COUNT[what.split(".")[1]]
    if value > limit:
        raise ValueError(f"{what} must be at most {limit}, not {_short(value)}")
    return value


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def normalize_resources(raw: dict[str, Any]) -> dict[str, int | str]:
    """The flat map sent to runners; raises ValueError with a message for the user."""
    out: dict[str, int | str] = {}
    gpu = raw.get("gpu")
    if isinstance(gpu, dict):
        out["gpu"] = _count(gpu.get("count", 1), "resources.gpu.count")
        if gpu.get("name"):
            out["gpu_name"] = str(gpu["name"])
        if gpu.get("memory") is not None:
            out["gpu_memory_mb"] = parse_size_mb(gpu["memory"], "resources.gpu.memory")
    elif gpu is not None:
        out["gpu"] = _count(gpu, "resources.gpu")
    if raw.get("cpu") is not None:
        out["cpu"] = _count(raw["cpu"], "resources.cpu")
    if raw.get("memory") is not None:
        out["memory_mb"] = parse_size_mb(raw["memory"], "resources.memory")
    if raw.get("shm_size") is not None:
        out["shm_size"] = f"{parse_size_mb(raw['shm_size'], 'resources.shm_size')}m"  # docker's format
    for key in SLURM_KEYS:  # the workflow's `slurm:`, its variables substituted
        value = raw.get(f"slurm_{key}")
        if value:
            problem = slurm_name_problem(key, str(value))
            if problem:
                raise ValueError(problem)
            out[f"slurm_{key}"] = str(value)
    return out


def check_resources(raw: dict[str, Any], err: Callable[[str], Exception]) -> None:
    try:
        normalize_resources(raw)
    except ValueError as exc:
        raise err(str(exc)) from None
