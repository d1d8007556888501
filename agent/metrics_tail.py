"""Bringing a job's metrics file (JSON lines written by training/metrics.py) into its
log spool as the "met" stream, so metrics travel, replay and are stored exactly
like log lines: same sequence numbers, same re-attach, nothing lost.
"""

import os
from pathlib import Path

METRICS_REL = ".lanpool/metrics.jsonl"  # inside the workspace: containers see it too
POLL_S = 0.5
_MAX_READ = 4 * 1024 * 1024


class MetricsTail:
    """Reads whole new lines from a file that a job appends to."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset

    def read(self, final: bool = False) -> bytes:
        """New whole lines since the last read; with `final`, a last line without newline too."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(_MAX_READ)
        except OSError:
            return b""
        cut = len(data) if final else data.rfind(b"\n") + 1
        if cut <= 0:
            return b""
        self.offset += cut
        lines = data[:cut]
        return lines if lines.endswith(b"\n") else lines + b"\n"


def metrics_env(workspace: Path, in_container: bool) -> dict[str, str]:
    """LANPOOL_METRICS_FILE as the job sees the workspace."""
    root = "/workspace" if in_container else str(workspace)
    return {"LANPOOL_METRICS_FILE": os.path.join(root, METRICS_REL)}
