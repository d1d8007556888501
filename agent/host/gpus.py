"""This machine's GPUs, and which running job holds each one.

GPUs are found with `nvidia-smi`. A machine without a GPU can pretend to have
some with LANPOOL_FAKE_GPUS="0,1" (tests): only the list of indices is faked;
everything built from it (device requests, env vars) is real.
"""

import os
import shutil
import subprocess
from dataclasses import dataclass

from lanpool.agent.errors import AgentError

FAKE_ENV = "LANPOOL_FAKE_GPUS"


@dataclass(frozen=True)
class Gpu:
    index: int  # nvidia-smi's index (PCI bus order), as Docker's device_ids use it
    name: str
    memory_mb: int


class GpuError(Exception):
    """A GPU request that cannot be met now; the message says why."""


def detect_gpus() -> list[Gpu]:
    fake = os.environ.get(FAKE_ENV)
    if fake is not None:
        try:
            indices = [int(part) for part in fake.replace(" ", "").split(",") if part]
        except ValueError:
            raise AgentError(f"{FAKE_ENV}={fake!r}: expected GPU indices like 0,1") from None
        return [Gpu(i, f"fake GPU ({FAKE_ENV})", 0) for i in indices]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        index, _, rest = line.partition(",")
        name, _, mem = rest.rpartition(",")
        try:
            gpus.append(Gpu(int(index), name.strip(), int(mem.strip())))
        except ValueError:
            continue
    return gpus


def gpu_env(indices: list[int], in_container: bool) -> dict[str, str]:
    """The env that makes a job see exactly `indices` (none when empty).

    In a container the runtime exposes only the requested devices, renumbered
    from 0, so CUDA's numbering inside starts at 0; a plain process sees the
    host's numbering. PCI bus order makes CUDA's numbers match nvidia-smi's.
    """
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if in_container:
        env["NVIDIA_VISIBLE_DEVICES"] = ",".join(map(str, indices)) if indices else "void"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(indices)))
    else:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, indices))
    return env


class GpuAllocator:
    """Hands out GPU indices so that two running jobs never share one."""

    def __init__(self, indices: list[int]) -> None:
        self.indices = sorted(indices)
        self._held: dict[str, list[int]] = {}

    @property
    def free(self) -> list[int]:
        taken = {i for held in self._held.values() for i in held}
        return [i for i in self.indices if i not in taken]

    def allocate(self, job_id: str, count: int) -> list[int]:
        """The lowest `count` free indices, now held by `job_id`."""
        if count <= 0:
            return []
        free = self.free
        if not self.indices:
            raise GpuError(f"the job needs {count} GPU{'s' if count > 1 else ''} and this runner has none")
        if count > len(free):
            raise GpuError(
                f"the job needs {count} GPU{'s' if count > 1 else ''}; {len(free)} of this runner's "
                f"{len(self.indices)} {'is' if len(free) == 1 else 'are'} free now"
            )
        self._held[job_id] = free[:count]
        return free[:count]

    def claim(self, job_id: str, indices: list[int]) -> None:
        """Mark `indices` as held by a job found running after a restart."""
        if indices:
            self._held[job_id] = list(indices)

    def release(self, job_id: str) -> None:
        self._held.pop(job_id, None)
