"""The state the TUI's areas share, and what every area calls: the lowest layer of
the app (app/tui/app.py has the whole stack).

The app is built in layers, each a module by concern, each a subclass of the one
below: this base (the shared state, the Runs and Runners lists, errors), then the
selected job's views (app/tui/job_view.py), then the actions that start work
(app/tui/actions.py), then the shell (app/tui/app.py: layout, keys, timers). A
layer calls only what it or a layer below defines, so each reads on its own.
"""

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import App
from textual.css.query import NoMatches
from textual.widget import Widget
from textual.widgets import TabbedContent
from textual.worker import Worker, WorkerState

from lanpool.app.controller import Controller
from lanpool.app.errors import LanpoolError
from lanpool.app.tui.live import LiveFeeds
from lanpool.app.tui.panes.artifacts import ArtifactsPane
from lanpool.app.tui.panes.runners import RunnersPane
from lanpool.app.tui.widgets.tables import RunsTable
from lanpool.app.views.overview import LogLine, MetricsReader

if TYPE_CHECKING:
    from lanpool.app.workflows import Project

LOG_WINDOW = 20_000  # lines held by the log view; older ones are paged in from SQLite
# Lines read from SQLite at a time: a job's tail when it is selected or G reloads it, and each older
# page when the view is scrolled to its top. A screen shows ~50; reading and decoding a 20,000-line
# window on the event loop held keys back ~100 ms on a 2-core machine (scripts/bench-tui).
LOG_PAGE = 2_000
RUNS_LIMIT = 500  # rows in the runs list (filtering searches the whole store)
# Rows on the first frame: more than a screen holds; the rest are added just after it (adding a
# row costs DataTable ~0.2 ms: 500 rows were most of the first frame's time). The columns are
# sized for all RUNS_LIMIT rows from the start, so those the rest bring render nothing anew.
RUNS_FIRST = 100


class LanpoolBase(App[None]):
    # Set by LanpoolApp.__init__; declared here so that every layer sees their types.
    ctl: Controller
    feeds: LiveFeeds
    clock: Callable[[], float]
    project_dir: Path | None
    project: "Project | None"
    project_error: str
    job_id: str | None  # the job the Logs/Metrics/Artifacts tabs show
    node: int | None  # Logs: one node, or all
    _pending: list[LogLine]  # live lines not on the screen yet
    _metrics: MetricsReader | None
    _metrics_shown: tuple[str, int] | None  # the job and number of points the chart was given last
    _oldest: dict[int, int] | None  # per node, the seq of the view's first line
    _metrics_dirty: bool
    _key_at: float | None  # time.monotonic() of a key whose frame is not out yet (LanpoolApp.on_event)
    _focus_next: "Widget | None"  # a tab switch's focus, given after its frame (JobView.action_tab)
    runners: RunnersPane
    artifacts: ArtifactsPane
    runs_filter: str
    runs_status: str

    def load_project(self) -> None:
        """Read the project's workflows, once (after the first frame, or when r needs them)."""
        if self.project is not None or self.project_error:
            return
        from lanpool.app.workflows import find_project  # with yaml and the workflow parser: after the first frame

        root = self.project_dir or find_project(Path.cwd())
        if root is None:
            self.project_error = "no .lanpool/workflows.yaml here or above: `app PATH` opens a project"
            self.sub_title = "no project"
            return
        try:
            self.project = self.ctl.load_project(root)
            self.sub_title = str(root)
        except LanpoolError as exc:
            self.project_error = exc.message
            self.sub_title = f"{root}: workflows have errors"
            self.notify(exc.message, title="workflows", severity="error", timeout=10)

    def active_tab(self) -> str:
        return self.query_one("#tabs", TabbedContent).active

    def show_runs(self, first: int | None = None) -> None:
        """The runs list; `first`: when it is built anew, only that many rows now (the rest with
        the next call), the columns sized for all."""
        lines = self.ctl.runs.job_lines(self.runs_filter, self.runs_status, RUNS_LIMIT)
        self.query_one("#runs-table", RunsTable).show_jobs(lines, self.clock(), first)

    def _selected_job(self) -> str | None:
        """The job an action is for: the highlighted row in Runs, else the job shown."""
        if self.active_tab() == "runs":
            return self.query_one(RunsTable).selected_key or self.job_id
        return self.job_id

    def _error(self, text: str) -> None:
        self.notify(text, severity="warning", timeout=8)

    def _handle_exception(self, error: Exception) -> None:
        # A lanpool error raised by a handler (a job gone from the store, a bad address)
        # is the user's news, not a reason to quit: show it, keep the app running.
        if isinstance(error, LanpoolError):
            self.notify(error.message, title="error", severity="error", timeout=10)
            return
        super()._handle_exception(error)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """One place turns a failed worker into a notification."""
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            error = event.worker.error
            if isinstance(error, NoMatches) and (self._closing or self._exit):
                return  # a worker (a run just submitted) ended while the app closes: its widgets are gone
            message = getattr(error, "message", None) or f"{type(error).__name__}: {error}"
            self.notify(message, title="error", severity="error", timeout=10)
