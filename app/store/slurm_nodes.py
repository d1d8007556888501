"""A multi-node job that a Slurm runner runs whole (app/runs/slurm_placement.py) is ONE job
there: one allocation, one log. Its nodes are Slurm's, and the runner's node script tags each
of their lines `[node K] ` (agent/executors/slurm_script.py). In the store it has N node rows
like any gang (app/jobs/remote.py follows it): this reads how many from a stored job's spec,
and sends each line of its one log to its node's rows by that tag (as it is followed, and
once for jobs stored before: app/store/migrations.py).
"""

import json
import re
from typing import Any

_TAG = re.compile(rb"\[node (\d+)\] ")
_LOG_STREAMS = ("out", "err", "sys")  # lines; metrics ("met") are data, and node 0's


def slurm_nodes(spec: str | None) -> int:
    """How many nodes a job stored with this spec runs on as one Slurm job; 0 for any other job.
    (app/jobs/submit.py stores such a job with one runner and `nodes` in its resources.)"""
    try:
        data = json.loads(spec or "{}")
    except ValueError:
        return 0
    if not isinstance(data, dict) or data.get("nodes", 1) != 1 or not isinstance(data.get("resources"), dict):
        return 0
    nodes = data["resources"].get("nodes")
    return nodes if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 1 else 0


def by_node(rows: list[tuple[Any, ...]], nodes: int) -> list[tuple[Any, ...]]:
    """Store rows (job_id, node, seq, n_lines, stream, data, at) of the one log, as rows of
    the node each line is tagged with (the tag taken off: it is shown again like any gang's).
    A line no node tagged (lanpool's own, srun's), or a tag past the job's nodes, is node
    0's; a line keeps its number in the one log, so each node's numbers have gaps."""
    out: list[tuple[Any, ...]] = []
    for job_id, _node, seq, _n, stream, data, at in rows:
        if stream not in _LOG_STREAMS:
            out.append((job_id, 0, seq, _n, stream, data, at))
            continue
        run: list[bytes] = []
        run_node, run_seq = 0, seq
        for i, line in enumerate(data.splitlines(keepends=True)):
            node, tag = 0, _TAG.match(line)
            if tag is not None and int(tag.group(1)) < nodes:
                node, line = int(tag.group(1)), line[tag.end() :]
            if run and node != run_node:
                out.append((job_id, run_node, run_seq, len(run), stream, b"".join(run), at))
                run = []
            if not run:
                run_node, run_seq = node, seq + i
            run.append(line)
        if run:
            out.append((job_id, run_node, run_seq, len(run), stream, b"".join(run), at))
    return out
