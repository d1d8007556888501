"""The lanpool TUI: runners, runs, live logs, loss curves and artifacts.

The app owns the Controller and the background feeds (app/tui/live.py); widgets
only show what the app hands them and post messages. Anything that touches
SSH, zeroconf or files runs in a worker; a failed worker becomes an error
notification, never a crash.

This module is the shell: layout, keys, timers, the Runs filter, the command
palette. The areas it stacks on are app/tui/base.py (shared state, the lists),
app/tui/job_view.py (the selected job's log, metrics, artifacts) and
app/tui/actions.py (run, stop, download, runners).
"""

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

from textual import events, on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Header, Input, Label, Select

from lanpool.app.controller import Controller
from lanpool.app.tui.actions import Actions
from lanpool.app.tui.base import LOG_WINDOW, RUNS_FIRST, RUNS_LIMIT
from lanpool.app.tui.dialogs.simple import HelpScreen
from lanpool.app.tui.live import LiveFeeds
from lanpool.app.tui.panes.artifacts import ArtifactsPane
from lanpool.app.tui.panes.runners import RunnersPane
from lanpool.app.tui.widgets.footer import Footer
from lanpool.app.tui.widgets.log_view import LogView
from lanpool.app.tui.widgets.metrics_chart import MetricsChart
from lanpool.app.tui.widgets.panes import AppScreen, Pane, Tabbed
from lanpool.app.tui.widgets.tables import RunsTable
from lanpool.app.views import overview

__all__ = ["LOG_WINDOW", "LanpoolApp"]

FLUSH_S = 0.05  # new log lines reach the screen at most 20 times a second, however fast they come
REFRESH_S = 1.0
LOAD_AFTER_S = 0.1  # after the first frame: what the first screen does not need loads then
# Unfinished jobs not followed here (a `run -d`, another terminal's run) are brought up to date
# this often: a state shown is at most ~2 s behind its runner's (one connection per runner).
SYNC_EVERY_S = 2.0


class LanpoolApp(Actions):
    TITLE = "lanpool"
    CSS_PATH = "lanpool.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "tab('runs')", "Runs"),
        Binding("2", "tab('runners')", "Runners"),
        Binding("3", "tab('logs')", "Logs"),
        Binding("4", "tab('metrics')", "Metrics"),
        Binding("5", "tab('artifacts')", "Artifacts"),
        Binding("r", "run", "Run"),
        Binding("s", "stop", "Stop"),
        Binding("x", "abort", "Abort", show=False),
        Binding("e", "shell", "Shell"),
        Binding("slash", "search", "Filter/Search"),
        Binding("d", "download", "Download", show=False),
        Binding("D", "delete_run", "Delete run", show=False),
        Binding("w", "save_log", "Save log", show=False),
        Binding("c", "copy_log", "Copy log", show=False),
        Binding("left_square_bracket", "node(-1)", "Prev node", show=False),
        Binding("right_square_bracket", "node(1)", "Next node", show=False),
        Binding("p", "pair", "Pair", show=False),
        Binding("plus,a", "add_runner", "Add runner", show=False),
        Binding("minus,delete", "remove_runner", "Remove runner", show=False),
        Binding("F", "forget_offline", "Forget offline runners", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]
    KEYS_HELP = [
        ("1 2 3 4 5", "Runs, Runners, Logs, Metrics, Artifacts"),
        ("Enter", "open the selected job's log (Runs)"),
        ("j / k, g / G", "Runs, Runners: down / up, first / last row (also Home / End)"),
        ("r", "run a workflow (dialog: variables, nodes, runner, plan)"),
        ("s / x", "stop / abort the selected job (asks first)"),
        ("e", "a shell in the selected running job (on the node the log shows); exit it to come back"),
        ("/", "Runs: filter by text; Logs: search the log (n / N: next / previous match)"),
        ("[ ]", "Logs: show one node / all nodes (multi-node jobs)"),
        ("g / G", "Logs: top (pages older lines in from the store) / follow the end"),
        ("t", "Logs: show / hide each line's arrival time (the runner's clock)"),
        ("space / l / m", "Metrics: show or hide a metric / log scale / smoothing (off, 0.6, 0.9)"),
        ("w / c", "Logs: save the whole log to a file / copy the shown lines"),
        ("d", "download the selected job's artifacts to a directory"),
        ("D", "delete the selected job's run: its jobs, logs, artifacts (asks first)"),
        ("p / a / -", "Runners: pair (with the runner's code) / add by address / remove"),
        ("F", "Runners: forget every OFFLINE runner (asks first)"),
        ("ctrl+p", "command palette"),
        ("?", "this help"),
        ("q", "quit (jobs keep running on their runners)"),
    ]

    def __init__(
        self,
        project_dir: Path | None = None,
        controller: Controller | None = None,
        clock: Callable[[], float] = time.time,
        discover: bool = True,
        probe_every_s: float = 3.0,
    ) -> None:
        super().__init__()
        self.ctl = controller or Controller()
        self.project_dir = project_dir
        self.project = None
        self.project_error = ""
        self.clock = clock
        self._discover = discover
        self._probe_every_s = probe_every_s
        self.runners = RunnersPane(self.ctl, clock)
        self.artifacts = ArtifactsPane(self.ctl)
        self.feeds = LiveFeeds(self.ctl, self.runners.changed, self._on_log, self._job_ended, self._error)
        self.job_id = None
        self.node = None
        self._pending = []
        self._metrics = None
        self._metrics_shown = None
        self._oldest = {}
        self._metrics_dirty = False
        self._focus_next = None
        self._key_at = None
        self._last_sync = 0.0
        self.runs_filter = ""
        self.runs_status = ""

    # -- layout ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Tabbed(initial="runs", id="tabs"):
            with Pane("Runs", id="runs"):
                with Horizontal(id="runs-bar"):
                    yield Input(placeholder="filter: run, job, workflow, runner, tag, variable  (/)", id="runs-filter")
                    yield Select([(s, s) for s in overview.STATUS_CHOICES], prompt="any status", id="runs-status")
                yield RunsTable(id="runs-table")
            yield self.runners
            with Pane("Logs", id="logs"):
                yield Label("no job selected: pick one in Runs (Enter)", id="log-header", classes="header")
                yield LogView(max_lines=LOG_WINDOW, id="log")
            with Pane("Metrics", id="metrics"):
                yield MetricsChart(id="chart")
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
        self.show_runs(first=RUNS_FIRST)
        self.call_after_refresh(self.show_runs)  # the rest of the list, after the first frame
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

    # -- periodic -------------------------------------------------------------------------

    def _tick(self) -> None:
        if not self._running:
            return  # quitting: the timer may fire once more while the widgets are taken down
        tab = self.active_tab()
        if tab == "runs":
            self.show_runs()
        if self.runners.stale or tab == "runners":
            self.runners.refresh_runners()
        if self.job_id:
            self._show_job_header()
            if tab == "metrics":
                self.show_metrics()
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

    # -- the Runs list ----------------------------------------------------------------------

    @on(RunsTable.RowHighlighted, "#runs-table")
    def _highlighted(self, event: RunsTable.RowHighlighted) -> None:
        if event.cursor_row != event.data_table.cursor_row:
            return  # stale: the cursor moved on since (a list rebuild, then the row of a job just submitted)
        if event.row_key.value and event.row_key.value != self.job_id:
            self.select_job(event.row_key.value)

    @on(RunsTable.RowSelected, "#runs-table")
    def _selected(self, event: RunsTable.RowSelected) -> None:
        if event.row_key.value:
            if event.row_key.value != self.job_id:
                self.select_job(event.row_key.value)
            self.action_tab("logs")

    @on(Input.Changed, "#runs-filter")
    def _filter(self, event: Input.Changed) -> None:
        self.runs_filter = event.value.strip()
        self.show_runs()

    @on(Input.Submitted, "#runs-filter")
    def _filter_done(self) -> None:
        self.query_one("#runs-table").focus()

    @on(Select.Changed, "#runs-status")
    def _status(self, event: Select.Changed) -> None:
        self.runs_status = event.value if isinstance(event.value, str) else ""  # the blank choice: any
        self.show_runs()

    def action_search(self) -> None:
        if self.active_tab() == "logs":
            self.search_log()
        else:
            self.action_tab("runs")
            self.query_one("#runs-filter", Input).focus()

    # -- the Runners pane ------------------------------------------------------------------------

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
