"""Runs side by side (`app headless compare`): one row per job, the variables that differ between
the rows, its state and duration, and for each metric the last value, the best and the step of
the best. Works on any jobs named together (several runs, or the jobs of one run); the rows come
from the store and the metric points the jobs logged, nothing else.

Which way is better is the metric's: `--mode` says it, else a name that reads as a score
(acc, f1, auc, precision, recall, score, reward, bleu, iou, map) is maximised and any other
(a loss, an error, perplexity) minimised. A point without a number (NaN, inf) is never best.
"""

import math
import re
from dataclasses import dataclass, field
from typing import Any

from lanpool.app.store import JobRow

GPU_METRIC = re.compile(r"gpu\d+_(util|mem_mb|power_w)")  # what the runner samples, not what a job logs
_SCORES = frozenset(
    {"acc", "accuracy", "f1", "auc", "auroc", "precision", "recall", "score", "reward", "bleu", "iou", "map"}
)
MODES = ("min", "max")


def better_is(metric: str, mode: str | None = None) -> str:
    """ "min" or "max": `mode` when given, else read from the metric's name."""
    if mode:
        return mode
    words = [w for w in re.split(r"[^a-z0-9]+", metric.lower()) if w]
    return "max" if any(w in _SCORES or w.endswith("acc") for w in words) else "min"


@dataclass(frozen=True)
class MetricSummary:
    """One metric of one job: its last point, its best point (by `mode`), how many points."""

    name: str
    mode: str
    last: float | None
    last_step: int | None
    best: float | None
    best_step: int | None
    points: int

    def to_json(self) -> dict[str, Any]:
        return {
            "last": self.last,
            "last_step": self.last_step,
            "best": self.best,
            "best_step": self.best_step,
            "mode": self.mode,
            "points": self.points,
        }


def summarize(points: list[dict[str, Any]], name: str, mode: str) -> MetricSummary | None:
    """The summary of metric `name` among a job's points (in the order logged); None if never logged."""
    return _summary([p for p in points if str(p.get("name")) == name], name, mode)


def _by_name(points: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for point in points:
        name = point.get("name")
        grouped.setdefault(name if name.__class__ is str else str(name), []).append(point)
    return grouped


def _summary(mine: list[dict[str, Any]], name: str, mode: str) -> MetricSummary | None:
    """summarize() of points already of one metric."""
    if not mine:
        return None
    best: tuple[float, Any] | None = None
    lower = mode == "min"
    for p in mine:  # the first of equal bests: where it was reached
        value = p.get("value")
        if value.__class__ is not float and value.__class__ is not int:  # (not bool, not text: no number)
            continue
        if value != value or value in (math.inf, -math.inf):  # NaN, inf: never best
            continue
        if best is None or (value < best[0] if lower else value > best[0]):
            best = (float(value), p.get("step"))
    last = mine[-1]
    return MetricSummary(
        name=name,
        mode=mode,
        last=_number(last.get("value")),
        last_step=last.get("step"),
        best=best[0] if best else None,
        best_step=best[1] if best else None,
        points=len(mine),
    )


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass
class Comparison:
    """What `compare` shows: the rows in order, the variables that differ, the metrics shown."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    varying: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    sort: str | None = None
    logged: list[str] = field(default_factory=list)  # every metric some job logged (shown or not)


def compare(
    jobs: list[JobRow],
    variables: dict[str, dict[str, Any]],
    points: dict[str, list[dict[str, Any]]],
    *,
    metrics: list[str] | None = None,
    mode: str | None = None,
    sort: str | None = None,
) -> Comparison:
    """Rows for `jobs` (in the order given), with each job's `variables` and metric `points`
    (job id -> ...). `metrics`: those shown (default: every metric a job logged, but the runner's
    GPU samples); `sort`: a metric whose best orders the rows, best first (jobs without it last)."""
    grouped = {j.id: _by_name(points.get(j.id, [])) for j in jobs}  # one pass over each job's points
    logged = list(dict.fromkeys(name for j in jobs for name in grouped[j.id]))
    shown = list(dict.fromkeys(metrics)) if metrics else sorted(n for n in logged if not GPU_METRIC.fullmatch(n))
    if sort and sort not in shown:
        shown.append(sort)
    names = list(dict.fromkeys(k for j in jobs for k in variables.get(j.id, {})))
    # The variables worth a column: those whose values differ between the rows (all, for one row).
    varying = [k for k in names if len(jobs) < 2 or len({repr(variables.get(j.id, {}).get(k)) for j in jobs}) > 1]
    rows = []
    for job in jobs:
        own = variables.get(job.id, {})
        summaries = {name: _summary(grouped[job.id].get(name, []), name, better_is(name, mode)) for name in shown}
        rows.append(
            {
                "run": job.run_name,
                "job_id": job.id,
                "workflow": job.workflow,
                "runner": job.runner,
                "status": job.status,
                "exit_code": job.exit_code,
                "error": job.error,  # a point stopped by its sweep says why here
                "started_at": job.started_at,
                "finished_at": job.finished_at,
                "variables": own,
                "metrics": {name: s.to_json() if s else None for name, s in summaries.items()},
            }
        )
    if sort:
        direction = better_is(sort, mode)

        def key(row: dict[str, Any]) -> tuple[bool, float]:
            summary = row["metrics"].get(sort)
            best = summary["best"] if summary else None
            if best is None:
                return True, 0.0
            return False, best if direction == "min" else -best

        rows.sort(key=key)  # stable: ties keep the order given
    return Comparison(rows=rows, varying=varying, metrics=shown, sort=sort, logged=sorted(logged))
