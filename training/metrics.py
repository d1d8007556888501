"""A Lightning logger that appends metrics to a JSON-lines file for lanpool.

The agent tails this file while the job runs and sends each line to the
controller as a metric message. The file is written by global rank zero only,
appended to (a resumed run adds to it) and flushed after every call, so a
tail sees each line as soon as Lightning logs it.

Path: the logger's `path` argument, else $LANPOOL_METRICS_FILE, else
`metrics.jsonl` in the working directory.

One line per metric value (so one `log_metrics` call with three metrics gives
three lines with the same step and time):

    {"step": 50, "epoch": 0, "name": "train_loss", "value": 2.71, "time": 1732270000.25}

- step: Lightning's logging step (optimizer steps taken so far, restored on
  resume);
- epoch: the 0-based epoch, or null when Lightning did not report one;
- value: a float, or null when not finite (JSON has no NaN or infinity);
- time: seconds since the Unix epoch (time.time()) when the line was written.

Hyperparameters, once at the start of fit, as one line of their own:

    {"hparams": {"lr": 0.001, "n_layer": 4}, "time": 1732270000.0}

A reader tells the two kinds apart by the "hparams" key.
"""

from __future__ import annotations

import json
import math
import os
import time
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from lightning.pytorch.loggers.logger import Logger
from lightning.pytorch.utilities import rank_zero_only

ENV_VAR = "LANPOOL_METRICS_FILE"
DEFAULT_FILE = "metrics.jsonl"


def metrics_path() -> str:
    """Where the recipes write metrics unless told otherwise."""
    return os.environ.get(ENV_VAR) or DEFAULT_FILE


def _finite_or_none(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return _finite_or_none(value)
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # tensors and numpy scalars
        return value.item()
    return str(value)


class LanpoolMetrics(Logger):
    """Appends every logged metric to a JSON-lines file (see the module docstring)."""

    def __init__(self, path: str | None = None):
        super().__init__()
        self._path = path or metrics_path()

    @property
    def name(self) -> str:
        return "lanpool"

    @property
    def version(self) -> int:
        return 0

    @property
    def path(self) -> str:
        return self._path

    def _append(self, records: list[dict[str, Any]]) -> None:
        directory = os.path.dirname(self._path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        with open(self._path, "a", encoding="utf-8") as file:
            for record in records:
                file.write(json.dumps(record, allow_nan=False) + "\n")
            file.flush()

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        metrics = dict(metrics)
        # Lightning adds the epoch to every call as if it were a metric.
        epoch = metrics.pop("epoch", None)
        now = time.time()
        self._append(
            [
                {
                    "step": int(step) if step is not None else None,
                    "epoch": int(epoch) if epoch is not None else None,
                    "name": name,
                    "value": _finite_or_none(value),
                    "time": now,
                }
                for name, value in metrics.items()
            ]
        )

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        if isinstance(params, Namespace):
            params = vars(params)
        self._append([{"hparams": _jsonable(dict(params)), "time": time.time()}])
