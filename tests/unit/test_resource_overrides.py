"""`run --gpu/--cpu/--memory` over a workflow's `resources:` (app/runs/resource_overrides.py)."""

import dataclasses

from lanpool.app.runs.resource_overrides import shown_resources, with_resources
from lanpool.app.workflows.resolve import ResolvedJob

JOB = ResolvedJob(
    workflow="train",
    commands=["true"],
    env={},
    artifacts=[],
    artifacts_all_nodes=[],
    working_dir=".",
    image="",
    pull="",
    resources={"gpu": 1, "gpu_name": "A100", "gpu_memory_mb": 40960, "cpu": 4},
    nodes=1,
    executor="",
)


def test_a_count_keeps_the_named_gpu_and_a_name_replaces_it():
    assert with_resources(JOB, {"gpu": 2}).resources == {**JOB.resources, "gpu": 2}
    assert with_resources(JOB, {"gpu": 2, "gpu_name": "H100"}).resources == {"gpu": 2, "gpu_name": "H100", "cpu": 4}
    assert with_resources(JOB, {"gpu": 0}).resources == {"cpu": 4}
    assert with_resources(JOB, {"cpu": 8, "memory_mb": 32768}).resources == {
        **JOB.resources,
        "cpu": 8,
        "memory_mb": 32768,
    }
    assert with_resources(JOB, None) is JOB and with_resources(JOB, {}) is JOB
    assert JOB.resources["gpu"] == 1  # the workflow's own job is left as it was


def test_shown():
    assert shown_resources({"gpu": 2, "gpu_name": "A100", "cpu": 8, "memory_mb": 1024}) == (
        "gpu=2 (A100), cpu=8, memory=1024MB"
    )
    assert shown_resources(dataclasses.replace(JOB, resources={}).resources) == "none asked (any runner)"
