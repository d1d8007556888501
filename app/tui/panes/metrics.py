"""The Metrics tab: the shown job's metric curves against the step, live; or, for a sweep's point
(a run with several jobs of one workflow) or when jobs are marked in Runs, one metric overlaid
across those jobs (app/tui/widgets/overlay_chart.py), with a table of them best first.

The pane owns its job's metrics reader (which reads only the points that came since the last
read) and what the chart was given last, so that neither a switch to the tab nor a tick with
no new point builds the series again; in the overlay the same, per job (app/views/overlay.py).
The app tells it the job (`show_job`), the marked jobs (`set_marked`), that new points came
(`points_came`, from the live log's "met" chunks) and that the tab is shown (`tab_shown`).
Which of the two shows is settled lazily, when the tab needs it: moving along the runs list
costs no query more than it did.
"""

from typing import Any

from textual import on
from textual.app import ComposeResult

from lanpool.app.controller import Controller
from lanpool.app.errors import LanpoolError
from lanpool.app.tui.widgets.metrics_chart import MetricsChart
from lanpool.app.tui.widgets.overlay_chart import PALETTE, Curve, OverlayChart, OverlayData
from lanpool.app.tui.widgets.panes import Pane
from lanpool.app.tui.widgets.tables import Row, plain_cell, status_cell
from lanpool.app.views import overview
from lanpool.app.views.overlay import (
    MAX_JOBS,
    MAX_SERIES,
    NAME_WIDTH,
    Overlay,
    best_of,
    display,
    number,
    point_labels,
    ranked,
    sweep_jobs,
)
from lanpool.app.views.overview import MetricsReader

RUN_WIDTH = 40  # a run's name in the overlay's title


class MetricsPane(Pane):
    def __init__(self, ctl: Controller) -> None:
        super().__init__("Metrics", id="metrics")
        self.ctl = ctl
        self.reader: MetricsReader | None = None
        self.stale = False  # points came since the last read
        self._shown: tuple[Any, ...] | None = None  # what the chart (or the overlay) was given last
        self.marked: list[str] = []  # jobs marked in Runs: overlaid, whatever job is shown
        self.overlay: Overlay | None = None  # the jobs overlaid, when the overlay shows
        self._group: tuple[str, ...] | None = None  # the jobs to overlay for the shown job; None: not settled
        self._overlay_for: tuple[str, ...] = ()  # the jobs self.overlay was made for
        self._what = ""  # the overlay's title after the metric: "sweep RUN" or "N marked jobs"

    def compose(self) -> ComposeResult:
        yield MetricsChart(id="chart")
        overlay = OverlayChart(id="overlay")
        overlay.display = False
        yield overlay

    # -- what the app says --------------------------------------------------------------------

    def show_job(self, job_id: str, visible: bool) -> None:
        self.reader = MetricsReader(job_id)
        self._group = None
        if visible:
            self.refresh_metrics(force=True)

    def set_marked(self, job_ids: list[str], visible: bool) -> None:
        self.marked = list(job_ids)
        self._group = None
        if visible:
            self.refresh_metrics(force=True)

    def points_came(self) -> None:
        self.stale = True

    def focus_target(self) -> str:
        """The widget a switch to the tab focuses: the picker of the chart that shows."""
        return "#overlay-picker" if self._settle() else "#metric-picker"

    def tab_shown(self) -> None:
        self._group = None  # settled again: a sweep being sent may have more points since
        overlay = self._settle()
        if overlay:
            same = self.overlay is not None and self._shown is not None and self._shown[0] == "overlay"
        else:
            same = self.reader is not None and self._shown is not None and self._shown[0] == self.reader.job_id
        if same:
            # The chart already shows this job: the switch's frame shows it as it is, and the
            # points that came since (a read and plotext's whole canvas) follow in the next one;
            # building them on the key was the slowest key (p95 ~140 ms, scripts/bench-tui).
            self.call_after_refresh(self.refresh_metrics, True)
        else:
            self.refresh_metrics(force=True)  # another job's chart must not show, even for a frame

    def refresh_metrics(self, force: bool = False) -> None:
        if self._settle():
            self._refresh_overlay(force)
            return
        if self.reader is None:
            return
        changed = self.ctl.runs.read_metrics(self.reader)
        self.stale = False
        shown = (self.reader.job_id, len(self.reader.points))
        if shown == self._shown:
            # What the chart shows already: a switch to the tab (the key and the TabActivated it
            # sends both came here) built every series again only for the chart to find them equal.
            return
        if changed or force:
            self._shown = shown
            job = self.ctl.runs.job(self.reader.job_id)
            series = overview.metric_series(self.reader.points)
            title = f"{job.workflow} · run {job.run_name}" + ("" if series else ": no metrics yet")
            self.query_one(MetricsChart).show_series(series, title)

    # -- which chart: the job's own, or the overlay ---------------------------------------------

    def _settle(self) -> bool:
        """Settle which jobs the tab shows (once per job shown or marks changed); True: the overlay."""
        if self._group is None:
            if self.marked:
                self._group = tuple(self.marked)
                self._what = f"{len(self.marked)} marked job{'s' if len(self.marked) != 1 else ''}"
            else:
                self._group = self._sweep()
            if self._group != self._overlay_for:
                self._overlay_for = self._group
                self.overlay = self._new_overlay(list(self._group)) if self._group else None
            self._show_mode(self.overlay is not None)
        return self.overlay is not None

    def _sweep(self) -> tuple[str, ...]:
        """The shown job's sweep (its run's jobs of its workflow), if it is a point of one."""
        if self.reader is None:
            return ()
        try:
            job = self.ctl.runs.job(self.reader.job_id)
            found = sweep_jobs(job, self.ctl.runs.jobs_of(job.run_name))
        except LanpoolError:  # gone meanwhile (its run deleted)
            return ()
        self._what = f"sweep {display(job.run_name, RUN_WIDTH)} ({len(found)} points)"
        return tuple(found)

    def _new_overlay(self, job_ids: list[str]) -> Overlay | None:
        """An overlay of those of the jobs still there (None when none is)."""
        rows = self._compared(list(dict.fromkeys(job_ids))[:MAX_JOBS], None)[0]
        known = {str(r["job_id"]) for r in rows}
        overlay = Overlay([j for j in job_ids if j in known])
        if not overlay.jobs:
            return None
        overlay.asked = len(job_ids)
        if self.overlay is not None:
            overlay.metric = self.overlay.metric  # the metric chosen stays, if these jobs logged it too
        return overlay

    def _compared(self, job_ids: list[str], metric: str | None) -> tuple[list[dict[str, Any]], list[str] | None]:
        """`compare`'s rows of the jobs (best first by `metric`) and the variables that differ
        between them; a job gone meanwhile (its run deleted) is left out."""
        metrics = [metric] if metric else None
        try:
            comparison = self.ctl.runs.compared(job_ids, metrics=metrics, sort=metric)
            return comparison.rows, comparison.varying
        except LanpoolError:
            rows: list[dict[str, Any]] = []
            for job_id in job_ids:
                try:
                    rows += self.ctl.runs.compared([job_id], metrics=metrics).rows
                except LanpoolError:
                    continue
            return ranked(rows, metric), None

    def _show_mode(self, overlay: bool) -> None:
        chart, over = self.query_one(MetricsChart), self.query_one(OverlayChart)
        if over.display == overlay:
            return
        focused = self.app.focused
        had_focus = focused is not None and (chart if overlay else over) in focused.ancestors_with_self
        chart.display, over.display = not overlay, overlay
        self._shown = None
        if had_focus:  # the hidden chart's picker had it: the shown one's gets it
            self.query_one("#overlay-picker" if overlay else "#metric-picker").focus()

    # -- the overlay ----------------------------------------------------------------------------

    @on(OverlayChart.MetricWanted)
    def _metric_wanted(self, event: OverlayChart.MetricWanted) -> None:
        event.stop()
        if self.overlay is None:
            return
        if event.name is not None:
            self.overlay.choose(event.name)
        else:
            self.overlay.step(event.step)
        self._refresh_overlay(force=True)

    def _refresh_overlay(self, force: bool) -> None:
        overlay = self.overlay
        assert overlay is not None
        overlay.read(self.ctl.runs.read_metrics)
        self.stale = False
        state = ("overlay", tuple(overlay.jobs), *overlay.state())
        if state == self._shown and not force:
            return
        self._shown = state
        self.query_one(OverlayChart).show(self._overlay_data(overlay))

    def _overlay_data(self, overlay: Overlay) -> OverlayData:
        metric = overlay.metric
        rows, differ = self._compared(overlay.jobs, metric)
        labels = point_labels(
            {str(r["job_id"]): r.get("variables") or {} for r in rows},
            {str(r["job_id"]): str(r.get("run", "")) for r in rows},
            differ,
        )
        order = [str(r["job_id"]) for r in rows]
        drawn = overlay.drawn(order, MAX_SERIES)
        colours = {c.job_id: PALETTE[i % len(PALETTE)] for i, c in enumerate(drawn)}
        table: list[Row] = []
        for rank, row in enumerate(rows, 1):
            job_id = str(row["job_id"])
            colour = colours.get(job_id)
            summary = best_of(row, metric)
            best_step = summary.get("best_step")
            table.append(
                (
                    job_id,
                    [
                        plain_cell("━━", f"color({colour})") if colour is not None else plain_cell("  "),
                        str(rank),
                        labels.get(job_id, job_id),
                        job_id,
                        status_cell(str(row.get("status", ""))),
                        number(summary.get("best")),
                        "-" if best_step is None else display(best_step, 12),
                        number(summary.get("last")),
                    ],
                )
            )
        with_points = sum(1 for job_id in order if overlay.curve(job_id).steps)
        notes = []
        if with_points > len(drawn):
            notes.append(f"{len(drawn)} of {with_points} shown (the best)")
        if overlay.asked > len(overlay.jobs):
            notes.append(f"the first {len(overlay.jobs)} of {overlay.asked} jobs read")
        name = display(metric, NAME_WIDTH) if metric else "no metrics yet"
        title = " · ".join([name, self._what, *notes])
        curves = [Curve(labels.get(c.job_id, c.job_id), colours[c.job_id], c.steps, c.values) for c in drawn]
        return OverlayData(title, metric, overlay.metrics, curves, table, "; ".join(notes))
