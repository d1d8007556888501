"""One metric across several jobs (a sweep's points, or jobs marked in the TUI): the read model
behind the Metrics tab's overlay, and a sweep's rows in the runs list. Plain data, no textual.

Which jobs: `sweep_jobs` (a run's jobs of one workflow: a sweep's points). What each is called:
`point_labels` (the values of the variables that differ between them, as `compare` shows them).
Which metric: `metric_order` (losses first, a validation one first; the runner's GPU samples
last), `next_metric` (the key that cycles). `Overlay` holds each job's points, read
incrementally, and its curve of the metric, built again only when that job's points or the
metric changed; `ranked` orders `compare`'s rows best first and `drawn` picks the curves the
chart gets: at most MAX_SERIES, the best (a thousand marked jobs must not turn the chart into
noise nor its legend into the whole screen).

Everything a job wrote (its variables' values, its metric names) is terminal-safe and clipped
here (`display`) before a front end shows it.
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lanpool.app.store import JobRow
from lanpool.app.views.compare import GPU_METRIC, better_is
from lanpool.app.views.overview import JobLine, MetricsReader, metric_series
from lanpool.app.views.terminal_text import safe_line

MAX_SERIES = 12  # curves on one chart: more are noise, and their legend would cover the plot
MAX_JOBS = 100  # jobs read for one overlay (each is a query per refresh): the rest are told, not read
LABEL_WIDTH = 40  # a job's label in the table (its legend entry is shorter: LEGEND_WIDTH)
LEGEND_WIDTH = 24
NAME_WIDTH = 32  # a metric's name where it is shown


def display(text: object, width: int) -> str:
    """`text` as one terminal-safe line of at most `width` characters."""
    line = safe_line(str(text))
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def sweep_jobs(job: JobRow, run_jobs: Iterable[JobRow]) -> list[str]:
    """The ids of `job`'s run's jobs of its workflow, oldest first, when there are several (a
    sweep's points); [] for a job alone (its dependencies, other workflows, do not count)."""
    mine = [j for j in run_jobs if j.workflow == job.workflow]
    mine.sort(key=lambda j: (j.submitted_at or 0.0, j.id))
    return [j.id for j in mine] if len(mine) > 1 else []


def sweep_rows(lines: Sequence[JobLine]) -> tuple[list[JobLine], dict[tuple[str, str], list[str]]]:
    """The runs list with each sweep's points together (a run's jobs of one workflow, two or
    more in the list), where its newest point is; and each sweep: (run, workflow) -> its job
    ids in the list's order. The other rows keep their places."""
    groups: dict[tuple[str, str], list[JobLine]] = {}
    for line in lines:
        groups.setdefault((line.job.run_name, line.job.workflow), []).append(line)
    out: list[JobLine] = []
    for line in lines:
        group = groups[(line.job.run_name, line.job.workflow)]
        if len(group) < 2:
            out.append(line)
        elif group[0] is line:  # the sweep's newest point: the sweep goes here, whole
            out += group
    sweeps = {key: [line.job.id for line in group] for key, group in groups.items() if len(group) > 1}
    return out, sweeps


def varying(variables: dict[str, dict[str, Any]]) -> list[str]:
    """The variable names whose values differ between the jobs (job id -> variables)."""
    if len(variables) < 2:
        return []
    names = list(dict.fromkeys(k for values in variables.values() for k in values))
    return [k for k in names if len({repr(v.get(k)) for v in variables.values()}) > 1]


def point_labels(
    variables: dict[str, dict[str, Any]], runs: dict[str, str], differ: Sequence[str] | None = None
) -> dict[str, str]:
    """Each job's name in a legend: the values of the variables that differ between the jobs
    (`differ`, else worked out: `lr=0.001 batch=64`), after its run's name when the jobs are of
    several runs; its id when nothing tells it apart. Unique (a label clipped or repeated the same
    as another's gets its job's id in front), terminal-safe and clipped."""
    keys = list(differ) if differ is not None else varying(variables)
    several_runs = len({runs.get(job_id, "") for job_id in variables}) > 1
    labels: dict[str, str] = {}
    for job_id, values in variables.items():
        words = [f"{k}={values[k]}" for k in keys if k in values]
        if several_runs:
            words.insert(0, runs.get(job_id, ""))
        labels[job_id] = display(" ".join(w for w in words if w) or job_id, LABEL_WIDTH)
    count: dict[str, int] = {}
    for label in labels.values():
        count[label] = count.get(label, 0) + 1
    return {
        job_id: label if count[label] == 1 or label == job_id else display(f"{job_id} {label}", LABEL_WIDTH)
        for job_id, label in labels.items()
    }


def metric_order(names: Iterable[str]) -> list[str]:
    """The metrics the overlay cycles through: losses first (a validation one before a training
    one: that is what a sweep is ranked by), then the others by name, the runner's GPU samples
    (gpu0_util...) last: never the default."""

    def key(name: str) -> tuple[bool, bool, bool, str]:
        low = name.lower()
        return bool(GPU_METRIC.fullmatch(name)), "loss" not in low, "val" not in low, name

    return sorted(set(names), key=key)


def next_metric(names: Sequence[str], current: str | None, step: int = 1) -> str | None:
    """The metric after (step -1: before) `current` in `names`, round; the first if `current` is not there."""
    if not names:
        return None
    if current is None or current not in names:
        return names[0]
    return names[(list(names).index(current) + step) % len(names)]


def ranked(rows: Iterable[dict[str, Any]], metric: str | None) -> list[dict[str, Any]]:
    """`compare`'s rows best first by `metric` (its best, the metric's way), those without one
    last, in the order given: what `compare --sort METRIC` gives (again, for rows read apart)."""
    out = list(rows)
    if metric is None:
        return out
    lower = better_is(metric) == "min"

    def key(row: dict[str, Any]) -> tuple[bool, float]:
        summary = (row.get("metrics") or {}).get(metric)
        best = summary.get("best") if summary else None
        if not isinstance(best, int | float):
            return True, 0.0
        return False, best if lower else -best

    return sorted(out, key=key)


def best_of(row: dict[str, Any], metric: str | None) -> dict[str, Any]:
    """The row's summary of `metric` ({} when the job never logged it)."""
    summary = (row.get("metrics") or {}).get(metric) if metric else None
    return summary if isinstance(summary, dict) else {}


def number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"


@dataclass(frozen=True)
class Curve:
    job_id: str
    steps: list[float]
    values: list[float]


class Overlay:
    """The jobs overlaid (at most MAX_JOBS of the `asked`), each one's metric points read
    incrementally, the metric chosen, and each job's curve of it, built again only when that
    job's points or the metric changed."""

    def __init__(self, jobs: Sequence[str]) -> None:
        self.asked = len(jobs)
        self.jobs = list(dict.fromkeys(jobs))[:MAX_JOBS]
        self.readers = {job_id: MetricsReader(job_id) for job_id in self.jobs}
        self.metric: str | None = None
        self._names: set[str] = set()
        self._scanned: dict[str, int] = {}  # job id -> its points already looked at for names
        self._curves: dict[str, tuple[int, str, Curve]] = {}  # job id -> (points, metric, its curve)

    def read(self, read: Callable[[MetricsReader], bool]) -> bool:
        """Each job's new points (`read`: the controller's read_metrics); True if any came."""
        changed = False
        for job_id, reader in self.readers.items():
            if read(reader):
                changed = True
                start = self._scanned.get(job_id, 0)
                self._names.update(str(p["name"]) for p in reader.points[start:])
                self._scanned[job_id] = len(reader.points)
        if self.metric is None or self.metric not in self._names:
            order = self.metrics
            self.metric = order[0] if order else None
        return changed

    @property
    def metrics(self) -> list[str]:
        """Every metric some job logged, in the order the key cycles through them."""
        return metric_order(self._names)

    def step(self, step: int) -> None:
        self.metric = next_metric(self.metrics, self.metric, step)

    def choose(self, metric: str) -> None:
        if metric in self._names:
            self.metric = metric

    def state(self) -> tuple[Any, ...]:
        """What the chart shows, to tell whether it changed: the metric, each job's point count."""
        return (self.metric, tuple(len(r.points) for r in self.readers.values()))

    def curve(self, job_id: str) -> Curve:
        """The job's curve of the metric (from all its points: built again only when they changed)."""
        reader, metric = self.readers[job_id], self.metric
        if metric is None:
            return Curve(job_id, [], [])
        cached = self._curves.get(job_id)
        if cached is None or cached[:2] != (len(reader.points), metric):
            mine = [p for p in reader.points if str(p.get("name")) == metric]
            steps, values = metric_series(mine).get(metric, ([], []))
            cached = self._curves[job_id] = (len(reader.points), metric, Curve(job_id, steps, values))
        return cached[2]

    def drawn(self, order: Sequence[str], most: int = MAX_SERIES) -> list[Curve]:
        """The curves the chart gets: the first `most` of `order` (best first) that have points."""
        out = []
        for job_id in order:
            if job_id in self.readers and (c := self.curve(job_id)).steps:
                out.append(c)
                if len(out) == most:
                    break
        return out
