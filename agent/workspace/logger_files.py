"""Metrics a job already logs with Lightning's CSVLogger (`metrics.csv`) or TensorBoardLogger
(`events.out.tfevents.*`), turned into lanpool metric lines (the format of training/metrics.py)
so they join the same "met" stream, with no change to the job's script.

One source per job: lanpool's own metrics file when the job writes it, else its CSV
files, else its event files. Lightning sends every value to every logger, so reading
two of them would show each point twice.

The files are the job's, so they are untrusted: each is opened through `open_regular`
(no link, FIFO or device), the event reader reads the descriptor so opened (not the
name, which the job may swap for a link), the walk is bounded, and this runs in a
thread. The CSV module and TensorBoard's own event reader parse them.

What was read is kept per file as a count (rows or scalar values), saved beside the
workspace, so an agent restart goes on where it stopped: CSVLogger rewrites its whole
file when a new metric appears, so a byte offset would not do.
"""

import csv
import io
import json
import logging
import math
import os
import time
from pathlib import Path

from lanpool.agent.workspace.files import NotARegularFile, open_regular

log = logging.getLogger(__name__)

STATE_FILE = "logger_files.json"  # in the job's dir, beside its workspace
SCAN_EVERY_S = 5.0  # looking for new files walks the workspace: not every poll
_MAX_ENTRIES = 20_000  # directory entries looked at per walk: a dataset tree is not searched through
_MAX_DEPTH = 6
_MAX_FILES = 16  # of each kind
_MAX_CSV_BYTES = 32 * 1024 * 1024
_SKIP_DIRS = {".git", ".lanpool", "__pycache__", "node_modules", ".venv", "venv"}


def _is_csv(name: str) -> bool:
    return name == "metrics.csv"


def _is_events(name: str) -> bool:
    return name.startswith("events.out.tfevents.")


def _point(step: int, name: str, value: float, at: float, epoch: int | None = None) -> bytes:
    value_or_none = value if math.isfinite(value) else None  # JSON has no NaN, as training/metrics.py
    line = {"step": step, "epoch": epoch, "name": name, "value": value_or_none, "time": at}
    return json.dumps(line).encode() + b"\n"


class LoggerFiles:
    """New points of a workspace's CSVLogger and TensorBoardLogger files, as metric lines.

    Blocking (a walk, file reads): call it in a thread, one call at a time.
    """

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._state_path = workspace.parent / STATE_FILE
        self.done: dict[str, int] = self._load()  # rel path -> rows or values already sent
        self._loaders: dict[str, tuple[int, object]] = {}  # rel path -> (fd, EventFileLoader)
        self._seen: dict[str, int] = {}  # rel path -> scalar values its loader has read
        self._csv: list[str] = []
        self._events: list[str] = []
        self._scanned = 0.0

    def _load(self) -> dict[str, int]:
        try:
            data = json.loads(self._state_path.read_text())
            return {str(k): int(v) for k, v in data.items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def _save(self) -> None:
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.done))
        os.replace(tmp, self._state_path)

    def read(self, final: bool = False) -> bytes:
        if final or time.monotonic() - self._scanned >= SCAN_EVERY_S:
            self._scan()
        out = b"".join(self._read_csv(rel) for rel in self._csv)
        if not self._csv:
            out += b"".join(self._read_events(rel) for rel in self._events)
        if out:
            self._save()  # before the lines are spooled: a crash between loses them, never repeats them
        if final:
            self.close()
        return out

    def close(self) -> None:
        for fd, _loader in self._loaders.values():
            os.close(fd)
        self._loaders.clear()

    def _scan(self) -> None:
        self._scanned = time.monotonic()
        seen = 0
        root = str(self.workspace)
        for top, dirs, files in os.walk(root):  # links to directories are not followed
            depth = 0 if top == root else os.path.relpath(top, root).count(os.sep) + 1
            dirs[:] = [] if depth >= _MAX_DEPTH else sorted(d for d in dirs if d not in _SKIP_DIRS)
            seen += len(dirs) + len(files)
            for name in sorted(files):
                rel = os.path.relpath(os.path.join(top, name), root)
                if _is_csv(name) and rel not in self._csv and len(self._csv) < _MAX_FILES:
                    self._csv.append(rel)
                elif _is_events(name) and rel not in self._events and len(self._events) < _MAX_FILES:
                    self._events.append(rel)
            if seen > _MAX_ENTRIES:
                break

    def _read_csv(self, rel: str) -> bytes:
        try:
            fd = open_regular(self.workspace, rel)
        except OSError as exc:
            self._refuse(rel, exc)
            return b""
        try:
            raw = os.pread(fd, _MAX_CSV_BYTES, 0)
        except OSError:
            return b""
        finally:
            os.close(fd)
        if not raw.endswith(b"\n"):  # a row being written: read it next time
            raw = raw[: raw.rfind(b"\n") + 1]
        rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8", "replace"))))
        done = self.done.get(rel, 0)
        if len(rows) <= done:
            return b""
        at = time.time()
        out = []
        for row in rows[done:]:
            step = _int(row.get("step"))
            epoch = _int(row.get("epoch"))
            for name, cell in row.items():
                if name in ("step", "epoch") or not name or cell in (None, ""):
                    continue
                value = _float(cell)
                if step is not None and value is not None:
                    out.append(_point(step, name, value, at, epoch))
        self.done[rel] = len(rows)
        return b"".join(out)

    def _read_events(self, rel: str) -> bytes:
        loader = self._loader(rel)
        if loader is None:
            return b""
        done = self.done.get(rel, 0)
        out = []
        try:
            for event in loader.Load():  # type: ignore[attr-defined]  # from where it stopped
                for value in event.summary.value:
                    number = _scalar(value)
                    if number is None or value.tag == "epoch":
                        continue
                    self._seen[rel] = seen = self._seen.get(rel, 0) + 1
                    if seen > done:  # a new loader (after a restart) passes over what was sent
                        out.append(_point(int(event.step), value.tag, number, float(event.wall_time)))
                        self.done[rel] = done = seen
        except Exception as exc:  # a corrupt file is the job's: that file is read no further
            log.warning("event file %s of %s not read further: %s", rel, self.workspace, exc)
            self._events.remove(rel)
        return b"".join(out)

    def _loader(self, rel: str) -> object | None:
        if rel in self._loaders:
            return self._loaders[rel][1]
        try:
            fd = open_regular(self.workspace, rel)
        except OSError as exc:
            self._refuse(rel, exc)
            return None
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: PLC0415

        # The descriptor opened above, through /proc: the job cannot swap the name for a link.
        loader: object = EventFileLoader(f"/proc/self/fd/{fd}")
        self._loaders[rel] = (fd, loader)
        return loader

    def _refuse(self, rel: str, exc: OSError) -> None:
        if isinstance(exc, NotARegularFile):
            log.warning("logger file %s of %s not read: %s", rel, self.workspace, exc)
        for files in (self._csv, self._events):
            if rel in files:
                files.remove(rel)


def _scalar(value: object) -> float | None:
    if value.HasField("simple_value"):  # type: ignore[attr-defined]
        return float(value.simple_value)  # type: ignore[attr-defined]
    tensor = getattr(value, "tensor", None)
    if tensor is not None and len(tensor.float_val) == 1 and not tensor.tensor_shape.dim:
        return float(tensor.float_val[0])
    return None


def _int(cell: str | None) -> int | None:
    try:
        return int(float(cell)) if cell not in (None, "") else None
    except ValueError:
        return None


def _float(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None
