"""A multi-node job that a Slurm runner runs whole (app/runs/slurm_placement.py) is ONE node to the
controller: one runner, one log. Its nodes are Slurm's, and the runner's node script tags
each of their lines `[node K] ` (agent/executors/slurm_script.py). This reads how many Slurm
nodes a stored job has, and picks one node's lines out of its log by that tag.
"""

import json
import re
from collections import deque
from collections.abc import Callable

Printer = Callable[[str, str, bytes], None]  # (job_id, stream, data), as render.LogPrinter

_TAG = re.compile(rb"\[node (\d+)\] ")
_STAMP = 24  # `logs -t` puts the line's time (23 characters and a space) before the tag


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


class NodeLines:
    """A log sink that passes on node `node`'s lines of a Slurm multi-node job, and the lines
    no node tagged (lanpool's own, srun's); another node's lines are left out.

    With `tail`, lines are held until flush() and only the last `tail` of them printed:
    `logs --tail N --node K` counts node K's lines, not the whole log's."""

    def __init__(self, printer: Printer, node: int, *, tail: int | None = None, stamped: bool = False) -> None:
        self.printer = printer
        self.node = node
        self.skip = _STAMP if stamped else 0
        self.held: deque[tuple[str, str, bytes]] | None = deque(maxlen=tail) if tail is not None else None

    def __call__(self, job_id: str, stream: str, data: bytes) -> None:
        kept = [line for line in data.splitlines(keepends=True) if self._wanted(line)]
        if not kept:
            return
        if self.held is not None:
            self.held.extend((job_id, stream, line) for line in kept)
            return
        self.printer(job_id, stream, b"".join(kept))

    def flush(self) -> None:
        """Print the held lines; from now on lines pass straight through."""
        held, self.held = self.held, None
        for job_id, stream, line in held or ():
            self.printer(job_id, stream, line)

    def _wanted(self, line: bytes) -> bool:
        tag = _TAG.match(line, self.skip)
        return tag is None or int(tag.group(1)) == self.node
