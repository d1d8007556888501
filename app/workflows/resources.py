"""Checking and normalising a workflow's `resources:` (gpu, cpu, memory, shm_size)."""

import re
from collections.abc import Callable

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNIT_MB = {"": 1, "B": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_size_mb(value, what: str) -> int:
    """`24GB`, `512MB`, `16Gi`, or a number of MB."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a size like 16GB, not {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"{what} must be a size like 16GB or 512MB, not {value!r}")
    unit = (m.group(2) or "").upper()[:1]
    return int(float(m.group(1)) * _UNIT_MB[unit])


def _count(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        raise ValueError(f"{what} must be a whole number, not {value!r}")
    if value < 0:
        raise ValueError(f"{what} must not be negative")
    return value


def normalize_resources(raw: dict) -> dict[str, int | str]:
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
    return out


def check_resources(raw: dict, err: Callable[[str], Exception]) -> None:
    try:
        normalize_resources(raw)
    except ValueError as exc:
        raise err(str(exc)) from None
