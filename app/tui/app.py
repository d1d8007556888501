"""The lanpool TUI: runners, runs, live logs, loss curves and artifacts.

The app owns the Controller and the background feeds (app/tui/live.py) and wires the tabs, one
component each (app/tui/panes/): each owns its state and says what happened with messages; the
app answers them (a job highlighted in Runs is shown in Logs, Metrics and Artifacts; a runner
added is checked at once) and hands the panes what they show. Anything that touches SSH,
zeroconf or files runs in a worker on the app; a failed worker becomes an error notification,
never a crash (`on_worker_state_changed`).

This module is the shell: layout, keys (each handed to the pane it is for), timers, the selected
job and its live log, the command palette. The Run dialog's work is app/tui/run_flow.py.
"""

import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events, on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.css.query import NoMatches
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Header, TabbedContent
from textual.worker import Worker, WorkerState

from lanpool.app.controller import Controller
from lanpool.app.errors import LanpoolError, NotFoundError
from lanpool.app.tui import keys
from lanpool.app.tui.dialogs.simple import HelpScreen
from lanpool.app.tui.live import LiveFeeds
from lanpool.app.tui.panes.artifacts import ArtifactsPane
from lanpool.app.tui.panes.logs import LOG_WINDOW, LogsPane
from lanpool.app.tui.panes.metrics import MetricsPane
from lanpool.app.tui.panes.runners import RunnersPane
from lanpool.app.tui.panes.runs import RUNS_FIRST, RUNS_LIMIT, RunsPane
from lanpool.app.tui.run_flow import RunFlow
from lanpool.app.tui.widgets.footer import Footer
from lanpool.app.tui.widgets.panes import AppScreen, Tabbed
from lanpool.protocol import JobState

if TYPE_CHECKING:  # the Run dialog and the workflows (yaml) load when r is first pressed, not before the first frame
    from lanpool.app.tui.dialogs.run_dialog import RunDialog, RunRequest
    from lanpool.app.workflows import Project

__all__ = ["LOG_WINDOW", "LanpoolApp"]

FLUSH_S = 0.05  # new log lines reach the screen at most 20 times a second, however fast they come
REFRESH_S = 1.0
LOAD_AFTER_S = 0.1  # after the first frame: what the first screen does not need loads then
# Unfinished jobs not followed here (a `run -d`, another terminal's run) are brought up to date
# this often: a state shown is at most ~2 s behind its runner's (one connection per runner).
SYNC_EVERY_S = 2.0
# A key not yet answered holds the log's flush back at most this long (if its frame never comes,
# e.g. a key that changed nothing, lines still reach the screen).
KEY_HOLDS_FLUSH_S = 0.1
# Where the focus goes when a tab is shown.
TAB_FOCUS = {
    "runs": "#runs-table",
    "runners": "#runners-table",
    "logs": "#log",
    "metrics": "#metric-picker",
    "artifacts": "#artifacts-table",
}


class LanpoolApp(App[None]):
    TITLE = "lanpool"
    CSS_PATH = "lanpool.tcss"
    BINDINGS: ClassVar[list[BindingType]] = keys.BINDINGS
    KEYS_HELP = keys.KEYS_HELP

    def __init__(
        self,
        project_dir: Path | None = None,
        controller: Controller | None = None,
        clock: Callable[[], float] = time.time,
        discover: bool = True,
        probe_every_s: float = 3.0,
        notify_desktop: bool = False,
        notify_command: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.ctl = controller or Controller()
        # `app --notify`, `--notify-cmd CMD`: each job that ends while the TUI is open is also
        # shown on the desktop / given to the command (app/notify.py), beside the toast.
        self.notify_desktop = notify_desktop
        self.notify_command = notify_command
        self.project_dir = project_dir
        self.project: Project | None = None
        self.project_error = ""
        self.clock = clock
        self._discover = discover
        self._probe_every_s = probe_every_s
        # The tabs, made here so that the feeds' callbacks can name them before they are mounted.
        self.runs = RunsPane(self.ctl, clock)
        self.runners = RunnersPane(self.ctl, clock)
        self.logs = LogsPane(self.ctl, clock)
        self.metrics = MetricsPane(self.ctl)
        self.artifacts = ArtifactsPane(self.ctl)
        self.run_flow = RunFlow(self)
        self.feeds = LiveFeeds(self.ctl, self.runners.changed, self.log_sink, self.job_ended, self._error)
        self.job_id: str | None = None  # the job the Logs/Metrics/Artifacts tabs show
        self._focus_next: Widget | None = None  # a tab switch's focus, given after its frame (action_tab)
        self._key_at: float | None = None  # time.monotonic() of a key whose frame is not out yet (on_event)
        self._last_sync = 0.0

    # -- layout ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Tabbed(initial="runs", id="tabs"):
            yield self.runs
            yield self.runners
            yield self.logs
            yield self.metrics
            yield self.artifacts
        yield Footer()

    async def on_event(self, event: events.Event) -> None:
        # A key or click before the frame of a tab switch: the switch's focus first, so that the
        # key goes where the tab shown says (3 then g: the log's top, not the Runs table's).
        if self._focus_next is not None and isinstance(event, events.InputEvent):
            self.apply_focus()
        if isinstance(event, events.Key) and not event.is_forwarded:
            # Until its frame is out, the log's new lines wait (_flush_log): a flush in between
            # adds its render to the frame the key waits for.
            self._key_at = time.monotonic()
            self.call_after_refresh(self._key_shown)
        await super().on_event(event)

    def _key_shown(self) -> None:
        self._key_at = None

    def get_default_screen(self) -> Screen[Any]:
        return AppScreen(id="_default")  # its own blank lines drawn once (app/tui/widgets/panes.py)

    def on_mount(self) -> None:
        self.sub_title = str(self.project_dir) if self.project_dir else "loading…"  # the workflows: just after
        self.runs.refresh_runs(first=RUNS_FIRST)
        self.call_after_refresh(self.runs.refresh_runs)  # the rest of the list, after the first frame
        # Not on the first screen, and its query reads every job's status (no index): after it too.
        self.call_after_refresh(self.runners.refresh_runners)
        self.set_interval(REFRESH_S, self._tick)
        self.set_interval(FLUSH_S, self._flush_log)
        self.query_one("#runs-table").focus()
        # The workflows (yaml) and the network stacks (zeroconf, asyncssh: the feeds) load once the
        # first screen is up, ~0.3 s of a 1 s start otherwise (scripts/bench-tui); r loads the
        # workflows at once if they are not yet.
        self.call_after_refresh(self.set_timer, LOAD_AFTER_S, self._after_first_frame)

    def _after_first_frame(self) -> None:
        self.load_project()
        self._start_feeds()

    @work(group="feeds", exit_on_error=False)
    async def _start_feeds(self) -> None:
        await self.feeds.start(discover=self._discover, probe_every_s=self._probe_every_s)

    async def on_unmount(self) -> None:
        await self.feeds.close()
        self.ctl.close()

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

    # -- periodic -------------------------------------------------------------------------

    def _tick(self) -> None:
        if not self._running:
            return  # quitting: the timer may fire once more while the widgets are taken down
        tab = self.active_tab()
        if tab == "runs":
            self.runs.refresh_runs()
        if self.runners.stale or tab == "runners":
            self.runners.refresh_runners()
        if self.job_id:
            try:
                self.logs.refresh_header()
                if tab == "metrics":
                    self.metrics.refresh_metrics()
            except NotFoundError:  # its run was deleted just now: RunsDeleted, on its way, clears it
                self.job_id = None
        now = self.clock()
        if now - self._last_sync >= SYNC_EVERY_S:
            self._last_sync = now
            self._sync_jobs()

    @work(group="sync", exclusive=True, exit_on_error=False)
    async def _sync_jobs(self) -> None:
        """Unfinished jobs not followed here (started by another process, or before this app
        started) are asked for their news: QUEUED on a runner and SUBMITTED ones too."""
        pending = [
            line.job
            for line in self.ctl.runs.job_lines(limit=RUNS_LIMIT)
            if not line.job.synced and line.job.id not in self.feeds.following
        ]
        if pending:
            await self.ctl.refresh(pending)

    # -- tabs -----------------------------------------------------------------------------

    def active_tab(self) -> str:
        return self.query_one("#tabs", TabbedContent).active

    def action_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab
        # Metrics: the picker of the chart it shows (the job's own, or the overlay of a sweep or marks).
        target = self.metrics.focus_target() if tab == "metrics" else TAB_FOCUS.get(tab)
        if target and tab in ("logs", "metrics"):
            # Focus moves after the frame that shows the tab: the blurred and the focused widget
            # restyle (:focus), 4-11 ms of the key's frame (scripts/bench-tui). A key or click that
            # comes before that frame moves it first (on_event), so none goes astray.
            # Not for the tables: they draw a focused cursor, so a frame before the focus would
            # render every shown row twice (unfocused, then focused) instead of from their caches.
            self._focus_next = self.query_one(target)
            self.call_after_refresh(self.apply_focus)
        elif target:
            self._focus_next = None
            self.query_one(target).focus()
        # The Metrics tab's chart: on its TabActivated (a click on the tab sends one too).
        if tab == "runners":
            self.call_after_refresh(self.runners.refresh_runners)
        elif tab == "runs":
            # The list as it was comes back at once (its rows render from the table's cache);
            # bringing it up to date (a query, and changed cells re-render every visible row)
            # runs after that frame: the key gets its answer first (scripts/bench-tui).
            self.call_after_refresh(self.runs.refresh_runs)

    def apply_focus(self) -> None:
        """The focus a tab switch asked for, if not given yet."""
        widget, self._focus_next = self._focus_next, None
        if widget is not None and widget.is_attached:
            # At once, not by widget.focus()'s call_later: a key being routed goes to it (on_event).
            widget.screen.set_focus(widget)

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane is self.metrics:
            self.metrics.tab_shown()

    # -- the selected job: what the panes say, and its live log ---------------------------------

    @on(RunsPane.JobHighlighted)
    def _highlighted(self, event: RunsPane.JobHighlighted) -> None:
        if event.job_id != self.job_id:
            self.select_job(event.job_id)

    @on(RunsPane.JobOpened)
    def _opened(self, event: RunsPane.JobOpened) -> None:
        if event.job_id != self.job_id:
            self.select_job(event.job_id)
        self.action_tab("logs")

    @on(RunsPane.MarksChanged)
    def _marks_changed(self, event: RunsPane.MarksChanged) -> None:
        self.metrics.set_marked(event.job_ids, visible=self.active_tab() == "metrics")

    @on(RunsPane.RunsDeleted)
    def _runs_deleted(self, event: RunsPane.RunsDeleted) -> None:
        if self.job_id in event.removal.jobs:  # the log shown was of a job now gone
            self.job_id = None

    def select_job(self, job_id: str) -> None:
        """Show this job in Logs, Metrics and Artifacts; follow it live if it still runs."""
        self.job_id = job_id
        self.logs.show_job(job_id)
        self.metrics.show_job(job_id, visible=self.active_tab() == "metrics")
        self.artifacts.show_job(job_id)
        job = self.ctl.runs.job(job_id)
        if not job.synced and job.state is not JobState.QUEUED:
            # From the line after the window just read: every line shown once.
            self.feeds.follow(job_id, self.ctl.runs.log_end(job_id))

    def _selected_job(self) -> str | None:
        """The job an action is for: the highlighted row in Runs, else the job shown."""
        if self.active_tab() == "runs":
            return self.runs.selected or self.job_id
        return self.job_id

    def log_sink(self, job_id: str, stream: str, data: bytes) -> None:
        """Sink for every followed job's new log chunks (called on the event loop)."""
        if job_id != self.job_id:
            return
        if stream == "met":
            self.metrics.points_came()
        else:
            self.logs.add_chunk(stream, data)

    @work(thread=True, group="notify")
    def _notify_elsewhere(self, run_name: str, job_id: str, workflow: str, state: str, code: int | None) -> None:
        """The desktop notification and the user's command, in a thread: either may take seconds."""
        from lanpool.app.notify import JobEnd, notify_job_end

        end = JobEnd(run_name, job_id, workflow, state, code)
        for problem in notify_job_end(end, self.notify_command, self.notify_desktop):
            self.call_from_thread(self.notify, problem, severity="warning", timeout=8)

    def _flush_log(self) -> None:
        if not self._running:
            return
        if self._key_at is not None and time.monotonic() - self._key_at < KEY_HOLDS_FLUSH_S:
            return  # a key's frame is not out yet: these lines come with the next flush
        self.logs.flush()
        if self.metrics.stale and self.active_tab() == "metrics":
            self.metrics.refresh_metrics()

    def job_ended(self, job_id: str) -> None:
        job = self.ctl.runs.job(job_id)
        severity: SeverityLevel = "information" if job.state is JobState.DONE else "warning"
        self.notify(
            f"run {job.run_name} ({job.workflow}): {job.status}"
            + (f" ({job.exit_code})" if job.exit_code is not None else ""),
            severity=severity,
        )
        if self.notify_desktop or self.notify_command:
            self._notify_elsewhere(job.run_name, job_id, job.workflow, job.status, job.exit_code)
        if self._closing or self._exit:
            return  # a run's worker ended while the app closes: its widgets are gone or going
        if job_id == self.job_id:
            self.logs.refresh_header()
            self.artifacts.show_job(job_id)
            self.metrics.refresh_metrics(force=True)
        self.runs.refresh_runs()

    # -- keys: each to the pane it is for ---------------------------------------------------------

    def _job_or_say(self) -> str | None:
        job_id = self._selected_job()
        if not job_id:
            self.notify("select a job in Runs first")
        return job_id

    def action_run(self) -> None:
        self.run_flow.open()

    def on_run_dialog_plan_wanted(self, event: "RunDialog.PlanWanted") -> None:
        self.run_flow.plan(event.dialog, event.request)

    @work(group="runs", exit_on_error=False)
    async def start_run(self, request: "RunRequest") -> None:
        """What the Run dialog's Run starts (app/tui/run_flow.py)."""
        await self.run_flow.run(request)

    def action_stop(self, abort: bool = False) -> None:
        if job_id := self._job_or_say():
            self.runs.stop(job_id, abort)

    def action_abort(self) -> None:
        self.action_stop(abort=True)

    def action_delete_run(self) -> None:
        if job_id := self._job_or_say():
            self.runs.delete_run(job_id)

    def action_prune(self) -> None:
        self.runs.prune()

    def action_download(self) -> None:
        if job_id := self._job_or_say():
            self.artifacts.download(job_id)

    def action_shell(self) -> None:
        """`app headless ssh JOB` on this terminal, the TUI suspended until the shell exits; on the
        node the log shows, when it shows one node of several."""
        job_id = self._job_or_say()
        if not job_id:
            return
        job = self.ctl.runs.job(job_id)
        if job.state is not JobState.RUNNING:
            self.notify(f"job {job_id} is {job.status}: a shell opens in a running job only")
            return
        with self.suspend():
            # A process of its own: the shell owns the terminal, with no event loop of ours in between.
            node = [] if self.logs.node is None or self.logs.job_id != job_id else ["--node", str(self.logs.node)]
            subprocess.run(
                [sys.executable, "-m", "lanpool.app.cli.main", "headless", "ssh", job_id, *node], check=False
            )

    def action_search(self) -> None:
        if self.active_tab() == "logs":
            self.logs.search()
        else:
            self.action_tab("runs")
            self.runs.focus_filter()

    def action_node(self, step: int) -> None:
        self.logs.cycle_node(step)

    def action_save_log(self) -> None:
        self.logs.save()

    def action_copy_log(self) -> None:
        self.logs.copy()

    def action_pair(self) -> None:
        self.runners.pair()

    def action_add_runner(self) -> None:
        self.runners.add_by_address()

    @on(RunnersPane.Added)
    def _runner_added(self) -> None:
        self._check_runners()

    @work(group="runners", exit_on_error=False)
    async def _check_runners(self) -> None:
        await self.feeds.check_runners()  # a runner just added: its state now, not at the next probe
        self.runners.refresh_runners()

    def action_remove_runner(self) -> None:
        if self.active_tab() != "runners":
            self.notify("select a runner in Runners first")
            return
        self.runners.forget_selected()

    def action_forget_offline(self) -> None:
        if self.active_tab() != "runners":
            self.notify("F forgets the offline runners: in Runners (2)")
            return
        self.runners.forget_offline()

    # -- errors ---------------------------------------------------------------------------

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
        """One place turns a failed worker into a notification: the panes run theirs on the app."""
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            error = event.worker.error
            if isinstance(error, NoMatches) and (self._closing or self._exit):
                return  # a worker (a run just submitted) ended while the app closes: its widgets are gone
            message = getattr(error, "message", None) or f"{type(error).__name__}: {error}"
            self.notify(message, title="error", severity="error", timeout=10)

    # -- help -----------------------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.KEYS_HELP))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        for command in super().get_system_commands(screen):
            if command.title != "Keys":  # Textual's key panel: ours (?) lists every key, with what it does
                yield command
        for title, help_text, action in [
            ("Run a workflow", "open the Run dialog", self.action_run),
            ("Stop job", "stop the selected job", self.action_stop),
            ("Abort job", "stop the selected job without artifacts", self.action_abort),
            ("Shell in job", "a shell in the selected running job (exit it to come back)", self.action_shell),
            ("Download artifacts", "copy the selected job's artifacts to a directory", self.action_download),
            ("Save log", "write the selected job's whole log to a file", self.action_save_log),
            ("Copy log", "copy the shown log lines to the clipboard", self.action_copy_log),
            ("Pair runner", "pair with a runner using its code", self.action_pair),
            ("Add runner", "add a runner by address", self.action_add_runner),
            ("Remove runner", "forget the selected runner", self.action_remove_runner),
            ("Forget offline runners", "forget every OFFLINE runner and its pinned key", self.action_forget_offline),
            ("Delete run", "delete the selected job's run, its logs and artifacts", self.action_delete_run),
            ("Prune runs", "delete ended runs older than an age (default 7d)", self.action_prune),
            ("Show runs", "the runs list", lambda: self.action_tab("runs")),
            ("Show runners", "the runner pool", lambda: self.action_tab("runners")),
            ("Show logs", "the selected job's log", lambda: self.action_tab("logs")),
            ("Show metrics", "the selected job's loss curves", lambda: self.action_tab("metrics")),
            ("Show artifacts", "the selected job's artifacts", lambda: self.action_tab("artifacts")),
            ("Keys", "all key bindings", self.action_help),
        ]:
            yield SystemCommand(title, help_text, action)
