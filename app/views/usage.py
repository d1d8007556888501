"""`app headless usage`: GPU-, CPU- and wall-hours of the jobs this controller ran, from its store
alone (no runner is asked), like Slurm's sreport; `app agent usage` is the runner's own account.

Each node of a job counts with the resources the job asked for (every node holds them), on its
own runner: a 2-node job of 4 GPUs a node is 8 GPU-hours an hour. GPUs and CPUs are those asked
for (a job that asked no CPU counts none). Only jobs that ended count, and only their time within
the window: a job that started before it counts from its start.
"""

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from lanpool.app.store import Store
from lanpool.app.store.usage_rows import ended_job_nodes

BY = ("runner", "workflow", "run")
_MOST_GPUS = 4096
_MOST_CPUS = 1_000_000.0


@dataclass(frozen=True)
class NodeUsage:
    """One node of a job that ran: where, what it asked for, from when to when, its hours counted."""

    job_id: str
    node: int
    runner: str
    workflow: str
    run: str
    status: str
    gpus: int
    cpus: float
    memory_mb: int
    started_at: float
    finished_at: float
    hours: float  # within the window


@dataclass
class UsageRow:
    """A group's totals within the window. A job counts once however many of its nodes are in the group."""

    key: str
    jobs: int = 0
    gpu_hours: float = 0.0
    cpu_hours: float = 0.0
    wall_hours: float = 0.0
    _seen: set[str] = field(default_factory=set, repr=False)

    def add(self, node: NodeUsage) -> None:
        self.gpu_hours += node.gpus * node.hours
        self.cpu_hours += node.cpus * node.hours
        if node.job_id not in self._seen:  # a job's wall time once, not once per node
            self._seen.add(node.job_id)
            self.jobs += 1
            self.wall_hours += node.hours

    def figures(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "gpu_hours": self.gpu_hours,
            "cpu_hours": self.cpu_hours,
            "wall_hours": self.wall_hours,
        }


@dataclass
class Usage:
    by: str
    since: float
    until: float
    rows: list[UsageRow] = field(default_factory=list)
    total: UsageRow = field(default_factory=lambda: UsageRow("total"))
    nodes: list[NodeUsage] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "by": self.by,
            "since": self.since,
            "until": self.until,
            "rows": [{self.by: r.key, **r.figures()} for r in self.rows],
            "total": self.total.figures(),
            "nodes": [asdict(n) for n in self.nodes],
        }


def usage_of(store: Store, since_s: float, by: str, now: float | None = None) -> Usage:
    """The hours of the last `since_s` seconds, a row per runner, workflow or run; most GPU-hours first."""
    until = time.time() if now is None else now
    since = until - since_s
    usage = Usage(by, since, until)
    groups: dict[str, UsageRow] = {}
    for row in ended_job_nodes(store.conn, since, until):
        node = _node(row, since, until)
        if node is None:
            continue
        key = {"runner": node.runner, "workflow": node.workflow, "run": node.run}[by]
        groups.setdefault(key, UsageRow(key)).add(node)
        usage.total.add(node)
        usage.nodes.append(node)
    usage.rows = sorted(groups.values(), key=lambda r: (-r.gpu_hours, -r.cpu_hours, -r.wall_hours, r.key))
    return usage


def _node(row: tuple[Any, ...], since: float, until: float) -> NodeUsage | None:
    """A stored row as counted; None for times that cannot be (stored by something else)."""
    job_id, run, workflow, runner, node, status, started, finished, gpu, cpu, memory = row
    if not _finite(started) or not _finite(finished) or finished < started:
        return None
    seconds = max(0.0, min(float(finished), until) - max(float(started), since))
    return NodeUsage(
        job_id=str(job_id),
        node=int(node) if isinstance(node, int) else 0,
        runner=str(runner or ""),
        workflow=str(workflow or ""),
        run=str(run or ""),
        status=str(status or ""),
        gpus=int(_count(gpu, _MOST_GPUS, whole=True)),
        cpus=_count(cpu, _MOST_CPUS),
        memory_mb=int(_count(memory, float(1 << 40), whole=True)),
        started_at=float(started),
        finished_at=float(finished),
        hours=seconds / 3600,
    )


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any, most: float, whole: bool = False) -> float:
    """A resource as the spec holds it; 0 when it holds none, or something that is no count."""
    if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
        return 0.0
    return float(value) if math.isfinite(value) and 0 <= value <= most else 0.0
