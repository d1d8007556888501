"""Bringing a job's metrics file (JSON lines written by training/metrics.py) into its
log spool as the "met" stream, so metrics travel, replay and are stored exactly
like log lines: same sequence numbers, same re-attach, nothing lost.

The file is the job's, so it is untrusted: it is opened through
`open_regular` (no link, FIFO or device is ever read; see agent/workspace/files.py),
and the caller reads it in a thread, never on the event loop.
"""

import logging
import os
from pathlib import Path

from lanpool.agent.workspace.files import NotARegularFile, open_regular
from lanpool.agent.workspace.logger_files import LoggerFiles

log = logging.getLogger(__name__)

METRICS_REL = ".lanpool/metrics.jsonl"  # inside the workspace: containers see it too
POLL_S = 0.5
_MAX_READ = 4 * 1024 * 1024


class MetricsTail:
    """Reads whole new lines from a file that a job appends to (or, while there is
    none, the job's CSVLogger and TensorBoardLogger files: agent/workspace/logger_files.py)."""

    def __init__(self, workspace: Path, offset: int = 0) -> None:
        self.workspace = workspace
        self.offset = offset
        self._refused = False  # logged once, not every poll
        # CSVLogger/TensorBoardLogger files: read while the job writes no lanpool metrics file
        self.logger_files = LoggerFiles(workspace)

    def read(self, final: bool = False) -> bytes:
        """New whole lines since the last read; with `final`, a last line without newline too.

        Blocking (disk I/O): call it in a thread, one call at a time.
        """
        try:
            fd = open_regular(self.workspace, METRICS_REL)
        except NotARegularFile as exc:
            if not self._refused:
                log.warning("metrics file of %s not read: %s", self.workspace, exc)
                self._refused = True
            return b""
        except OSError:  # not written (yet): the job may log with Lightning's own loggers
            return self.logger_files.read(final) if self.offset == 0 else b""
        try:
            data = os.pread(fd, _MAX_READ, self.offset)
        except OSError:
            return b""
        finally:
            os.close(fd)
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
