"""Runs side by side (`app headless compare`): one row per job, the variables that differ between
the rows, its state and duration, and for each metric the last value, the best and the step of
the best. Works on any jobs named together (several runs, or the jobs of one run); the rows come
from the store: its jobs and the summary of each metric it keeps as points arrive.

Which way is better is the metric's: `--mode` says it, else a name that reads as a score
(acc, f1, auc, precision, recall, score, reward, bleu, iou, map) is maximised and any other
(a loss, an error, perplexity) minimised. A point without a number (NaN, inf) is never best.
"""

import re
from dataclasses import dataclass, field
from typing import Any

from lanpool.app.store import JobRow
from lanpool.app.store.metric_summaries import StoredSummary
from lanpool.app.store.metric_summaries import better_is as better_is  # (read from here by the TUI)

GPU_METRIC = re.compile(r"gpu\d+_(util|mem_mb|power_w)")  # what the runner samples, not what a job logs
MODES = ("min", "max")


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


def summary_of(stored: StoredSummary, name: str, mode: str) -> MetricSummary:
    """What `compare` shows of a job's metric: the store's summary (kept as points arrived,
    app/store/metric_summaries.py) read the metric's way (`mode`)."""
    best, best_step = stored.best(mode)
    return MetricSummary(name, mode, stored.last, stored.last_step, best, best_step, stored.points)


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
    summaries: dict[str, dict[str, StoredSummary]],
    *,
    metrics: list[str] | None = None,
    mode: str | None = None,
    sort: str | None = None,
) -> Comparison:
    """Rows for `jobs` (in the order given), with each job's `variables` and metric `summaries`
    (job id -> ...; Store.metric_summaries). `metrics`: those shown (default: every metric a job logged, but the runner's
    GPU samples); `sort`: a metric whose best orders the rows, best first (jobs without it last)."""
    grouped = {j.id: summaries.get(j.id, {}) for j in jobs}
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
        own_metrics = grouped[job.id]
        shown_metrics = {
            name: summary_of(own_metrics[name], name, better_is(name, mode)) if name in own_metrics else None
            for name in shown
        }
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
                "metrics": {name: s.to_json() if s else None for name, s in shown_metrics.items()},
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
