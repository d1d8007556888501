"""What one job needs of a runner: SubmitJob.resources, typed.

The wire keeps the flat map (gpu, cpu, memory_mb, shm_size, and hints such as
gpu_name that a runner does not act on; a Slurm runner also reads nodes and the
workflow's slurm_partition, slurm_account, slurm_qos, slurm_constraint) so peers of this protocol version still
read each other; `Resources.parse` is the one reading of it, with the limits
both sides hold to.
"""

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from lanpool.protocol.errors import clip

# What one job may ask for: far above any machine, low enough that no sum or
# int() of them overflows, and refused at submit rather than at start.
MAX_GPUS = 1024
MAX_CPUS = 65536
MAX_MEMORY_MB = 2**30  # 1 PiB
MAX_SHM_BYTES = 2**50
_SIZE = re.compile(r"^([0-9]{1,16})([bkmg]?)$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}
N = TypeVar("N", int, float)


class ResourcesError(ValueError):
    """A resources map that cannot be honoured; the message is one line naming the key."""


@dataclass(frozen=True)
class Resources:
    gpu: int | None = None  # None: not asked (a process job then sees every GPU)
    cpu: float | None = None
    memory_mb: int | None = None
    shm_size: str | None = None  # as Docker takes it: "8g", "512m"

    @classmethod
    def parse(cls, res: Mapping[str, object]) -> "Resources":
        """Raises ResourcesError for anything but a finite number in range: "nan", "inf",
        "1e309" or -1 never reach a runner's bookkeeping, where int(nan) would fail."""
        shm_size = _shm_size(res.get("shm_size"))  # checked in this order: the first bad key is the one named
        gpu = _number(res, "gpu", int, MAX_GPUS)
        memory_mb = _number(res, "memory_mb", int, MAX_MEMORY_MB, positive=True)
        cpu = _number(res, "cpu", float, MAX_CPUS, positive=True)
        return cls(gpu=gpu, cpu=cpu, memory_mb=memory_mb, shm_size=shm_size)


def _number(
    res: Mapping[str, object], key: str, kind: Callable[[str | int | float], N], limit: int, positive: bool = False
) -> N | None:
    value = res.get(key)
    if value is None:
        return None
    num: N | None = None
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        try:
            num = kind(value)
        except (ValueError, OverflowError):
            num = None
    if num is None or not math.isfinite(num) or num < 0 or (positive and num == 0) or num > limit:
        least = "more than 0" if positive else "0 or more"
        raise ResourcesError(
            f"resources.{key}: {clip(repr(value), 40)} is not a valid number: "
            f"give a finite number, {least}, at most {limit}"
        )
    return num


def _shm_size(shm: object) -> str | None:
    if shm is None:
        return None
    m = _SIZE.match(str(shm).strip())
    if not m or int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()] > MAX_SHM_BYTES:
        raise ResourcesError(
            f"resources.shm_size: {clip(repr(shm), 40)} is not a size like 8g or 512m (at most {MAX_SHM_BYTES >> 30}g)"
        )
    return m.group(0)
