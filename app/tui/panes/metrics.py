"""The Metrics tab: the shown job's metric curves against the step, live.

The pane owns its job's metrics reader (which reads only the points that came since the last
read) and what the chart was given last, so that neither a switch to the tab nor a tick with
no new point builds the series again. The app tells it the job (`show_job`), that new points
came (`points_came`, from the live log's "met" chunks) and that the tab is shown (`tab_shown`).
"""

from textual.app import ComposeResult

from lanpool.app.controller import Controller
from lanpool.app.tui.widgets.metrics_chart import MetricsChart
from lanpool.app.tui.widgets.panes import Pane
from lanpool.app.views import overview
from lanpool.app.views.overview import MetricsReader


class MetricsPane(Pane):
    def __init__(self, ctl: Controller) -> None:
        super().__init__("Metrics", id="metrics")
        self.ctl = ctl
        self.reader: MetricsReader | None = None
        self.stale = False  # points came since the last read
        self._shown: tuple[str, int] | None = None  # the job and number of points the chart was given last

    def compose(self) -> ComposeResult:
        yield MetricsChart(id="chart")

    def show_job(self, job_id: str, visible: bool) -> None:
        self.reader = MetricsReader(job_id)
        if visible:
            self.refresh_metrics(force=True)

    def points_came(self) -> None:
        self.stale = True

    def tab_shown(self) -> None:
        if self.reader is not None and self._shown is not None and self._shown[0] == self.reader.job_id:
            # The chart already shows this job: the switch's frame shows it as it is, and the
            # points that came since (a read and plotext's whole canvas) follow in the next one;
            # building them on the key was the slowest key (p95 ~140 ms, scripts/bench-tui).
            self.call_after_refresh(self.refresh_metrics, True)
        else:
            self.refresh_metrics(force=True)  # another job's chart must not show, even for a frame

    def refresh_metrics(self, force: bool = False) -> None:
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
