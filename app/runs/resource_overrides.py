"""`run --gpu N --cpu N --memory SIZE` (like `sky launch --gpus`, `srun --gres`): the requested
workflow's `resources:` with the command line's over them. Its dependencies keep their own.

The values were checked by the command line with the workflow's own rule
(app/workflows/resources.py: normalize_resources). `--gpu N` changes the count and keeps a
GPU name or memory the workflow asks for; `--gpu NAME:N` changes both; `--gpu 0` asks for none.
"""

import dataclasses

from lanpool.app.workflows.resolve import ResolvedJob

_GPU_DETAILS = ("gpu_name", "gpu_memory_mb")


def with_resources(job: ResolvedJob, overrides: dict[str, int | str] | None) -> ResolvedJob:
    """The job with `overrides` (normalised: gpu, gpu_name, cpu, memory_mb) over its resources."""
    if not overrides:
        return job
    resources = dict(job.resources)
    if overrides.get("gpu") == 0 or "gpu_name" in overrides:
        for key in _GPU_DETAILS:  # none asked for, or another GPU named: the workflow's details go
            resources.pop(key, None)
    resources.update(overrides)
    if resources.get("gpu") == 0:
        del resources["gpu"]
    return dataclasses.replace(job, resources=resources)


def shown_resources(resources: dict[str, int | str]) -> str:
    """`gpu=2 (A100), cpu=8, memory=32768MB`: what `plan` prints."""
    parts = []
    if resources.get("gpu"):
        name = f" ({resources['gpu_name']})" if resources.get("gpu_name") else ""
        parts.append(f"gpu={resources['gpu']}{name}")
    if resources.get("cpu"):
        parts.append(f"cpu={resources['cpu']}")
    if resources.get("memory_mb"):
        parts.append(f"memory={resources['memory_mb']}MB")
    if resources.get("shm_size"):
        parts.append(f"shm_size={resources['shm_size']}")
    return ", ".join(parts) or "none asked (any runner)"
