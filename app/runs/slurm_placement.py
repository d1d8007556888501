"""A multi-node job on a Slurm runner: all its nodes as ONE job there (one Slurm allocation),
rather than one runner per node as on the LAN (app/runs/placement.py).

A runner with `--executor slurm` reports its cluster per partition
("slurm_partitions": "debug:2/2n:4/4g,gpu:0/8n:8/32g", i.e. idle/total nodes and
free/total GPUs). A job fits a partition when it has as many nodes as the job
and GPUs for each node; free nodes do not matter, since Slurm queues the job
itself (it shows QUEUED with Slurm's reason). The job's `slurm: {partition}`,
if named, is the only partition considered; else the runner's default partition
("slurm_default_partition": its --partition, or the cluster's default), where
sbatch would put the job. (A runner that reports no default: any partition.)
"""

import re
from typing import Any

from lanpool.app.runners.views import RunnerState, RunnerView
from lanpool.protocol.message_base import Record, record

_PARTITION = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*):(\d+)/(\d+)n:(\d+)/(\d+)g$")


@record
class Partition(Record):
    """A Slurm partition: its idle and total nodes and GPUs."""

    name: str
    nodes_idle: int
    nodes: int
    gpus_free: int
    gpus: int


def partitions(props: dict[str, Any]) -> list[Partition]:
    """A runner's Slurm partitions as it reports them; [] for a runner without Slurm.
    What does not parse is left out (the value comes from a peer)."""
    if props.get("executor") != "slurm":
        return []
    out = []
    for part in str(props.get("slurm_partitions", "")).split(","):
        m = _PARTITION.match(part.strip())
        if m:
            out.append(Partition(m.group(1), *(int(m.group(i)) for i in range(2, 6))))
    return out


def fitting(props: dict[str, Any], resources: dict[str, Any], nodes: int) -> list[Partition]:
    """The partitions of a Slurm runner with these props that could ever run `nodes` nodes of this job."""
    wanted = str(resources.get("slurm_partition", "") or props.get("slurm_default_partition", ""))
    gpu = int(resources.get("gpu", 0) or 0)
    return [
        p for p in partitions(props) if (not wanted or p.name == wanted) and p.nodes >= nodes and p.gpus >= gpu * nodes
    ]


def fits(props: dict[str, Any], resources: dict[str, Any], nodes: int) -> bool:
    """Whether a Slurm runner with these props could ever run `nodes` nodes of this job."""
    return bool(fitting(props, resources, nodes))


def slurm_runner(
    views: list[RunnerView], resources: dict[str, Any], nodes: int, pinned: str | None
) -> RunnerView | None:
    """The usable Slurm runner that takes the whole job (the pinned one, when pinned), if any:
    the one with the most idle nodes in a partition that fits."""
    best: tuple[int, str] | None = None
    chosen = None
    for v in views:
        if pinned is not None and v.name != pinned:
            continue
        if not v.trusted or v.problem or v.state not in (RunnerState.LIVE, RunnerState.BUSY):
            continue
        usable = fitting(v.props, resources, nodes)
        if not usable:
            continue
        key = (-max(p.nodes_idle for p in usable), v.name)
        if best is None or key < best:
            best, chosen = key, v
    return chosen
