"""The lanpool TUI: runners, runs, live logs, loss curves and artifacts.

The app owns the Controller and the background feeds (app/live.py); widgets
only show what the app hands them and post messages. Anything that touches
SSH, zeroconf or files runs in a worker; a failed worker becomes an error
notification, never a crash.
"""

import asyncio
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Header, Input, Label, ProgressBar, Select, TabbedContent, TabPane
from textual.worker import Worker, WorkerState

from app import overview
from app.controller import Controller
from app.errors import LanpoolError
from app.formatting import duration, size, status_text
from app.live import LiveFeeds
from app.overview import LogLine, MetricsReader
from app.tui.dialogs.run_dialog import RunDialog, RunRequest
from app.tui.dialogs.simple import ConfirmDialog, Field, FormDialog, HelpScreen
from app.tui.widgets.artifacts_list import ArtifactsList
from app.tui.widgets.footer import Footer
from app.tui.widgets.log_view import LogView
from app.tui.widgets.metrics_chart import MetricsChart
from app.tui.widgets.tables import RunnersTable, RunsTable
from app.workflows import Project, find_project
from protocol import JobState

LOG_WINDOW = 20_000  # lines held by the log view; older ones are paged in from SQLite
FLUSH_S = 0.05  # new log lines reach the screen at most 20 times a second, however fast they come
RUNS_LIMIT = 500  # rows in the runs list (filtering searches the whole store)
REFRESH_S = 1.0
SYNC_EVERY_S = 10.0  # unfinished jobs not followed here are brought up to date this often


class LanpoolApp(App):
    TITLE = "lanpool"
    CSS_PATH = "lanpool.tcss"
    BINDINGS = [
        Binding("1", "tab('runs')", "Runs"),
        Binding("2", "tab('runners')", "Runners"),
        Binding("3", "tab('logs')", "Logs"),
        Binding("4", "tab('metrics')", "Metrics"),
        Binding("5", "tab('artifacts')", "Artifacts"),
        Binding("r", "run", "Run"),
        Binding("s", "stop", "Stop"),
        Binding("x", "abort", "Abort", show=False),
        Binding("slash", "search", "Filter/Search"),
        Binding("d", "download", "Download", show=False),
        Binding("w", "save_log", "Save log", show=False),
        Binding("c", "copy_log", "Copy log", show=False),
        Binding("left_square_bracket", "node(-1)", "Prev node", show=False),
        Binding("right_square_bracket", "node(1)", "Next node", show=False),
        Binding("p", "pair", "Pair", show=False),
        Binding("plus,a", "add_runner", "Add runner", show=False),
        Binding("minus,delete", "remove_runner", "Remove runner", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]
    HELP = [
        ("1 2 3 4 5", "Runs, Runners, Logs, Metrics, Artifacts"),
        ("Enter", "open the selected job's log (Runs)"),
        ("r", "run a workflow (dialog: variables, nodes, runner, plan)"),
        ("s / x", "stop / abort the selected job (asks first)"),
        ("/", "Runs: filter by text; Logs: search the log (n / N: next / previous match)"),
        ("[ ]", "Logs: show one node / all nodes (multi-node jobs)"),
        ("g / G", "Logs: top (pages older lines in from the store) / follow the end"),
        ("w / c", "Logs: save the whole log to a file / copy the shown lines"),
        ("d", "download the selected job's artifacts to a directory"),
        ("p / a / -", "Runners: pair (with the runner's code) / add by address / remove"),
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
        self.project: Project | None = None
        self.project_error = ""
        self.clock = clock
        self._discover = discover
        self._probe_every_s = probe_every_s
        self.feeds = LiveFeeds(self.ctl, self._runners_changed, self._on_log, self._job_ended, self._error)
        self.job_id: str | None = None  # the job the Logs/Metrics/Artifacts tabs show
        self.node: int | None = None  # Logs: one node, or all
        self._pending: list[LogLine] = []
        self._metrics: MetricsReader | None = None
        self._oldest: dict[int, int] | None = {}  # per node, the seq of the view's first line
        self._metrics_dirty = False
        self._runners_dirty = True
        self._last_sync = 0.0
        self.runs_filter = ""
        self.runs_status = ""

    # -- layout ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial="runs", id="tabs"):
            with TabPane("Runs", id="runs"):
                with Horizontal(id="runs-bar"):
                    yield Input(placeholder="filter: run, job, workflow, runner, tag, variable  (/)", id="runs-filter")
                    yield Select([(s, s) for s in overview.STATUS_CHOICES], prompt="any status", id="runs-status")
                yield RunsTable(id="runs-table")
            with TabPane("Runners", id="runners"):
                yield RunnersTable(id="runners-table")
                yield Label("", id="runners-hint", classes="hint")
            with TabPane("Logs", id="logs"):
                yield Label("no job selected: pick one in Runs (Enter)", id="log-header", classes="header")
                yield LogView(max_lines=LOG_WINDOW, id="log")
            with TabPane("Metrics", id="metrics"):
                yield MetricsChart(id="chart")
            with TabPane("Artifacts", id="artifacts"):
                yield Label("no job selected", id="artifacts-header", classes="header")
                yield ArtifactsList(id="artifacts-table")
                with Vertical(id="download-box"):
                    yield Label("", id="download-label")
                    yield ProgressBar(id="download-progress", show_eta=False)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "loading…"
        self._load_project()
        self.show_runs()
        self.show_runners()
        self.set_interval(REFRESH_S, self._tick)
        self.set_interval(FLUSH_S, self._flush_log)
        self.query_one("#download-box").display = False
        self.query_one("#runs-table").focus()
        self._start_feeds()

    def _load_project(self) -> None:
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
        tab = self.query_one("#tabs", TabbedContent).active
        if tab == "runs":
            self.show_runs()
        if self._runners_dirty or tab == "runners":
            self.show_runners()
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
        """Unfinished jobs not followed here (started by another controller, or before
        this app started) are asked for their news now and then."""
        pending = [
            line.job
            for line in self.ctl.runs.job_lines(limit=RUNS_LIMIT)
            if not line.job.synced and line.job.id not in self.feeds.following and line.job.state is not JobState.QUEUED
        ]
        if pending:
            await self.ctl.refresh(pending)

    def show_runs(self) -> None:
        lines = self.ctl.runs.job_lines(self.runs_filter, self.runs_status, RUNS_LIMIT)
        self.query_one("#runs-table", RunsTable).show_jobs(lines, self.clock())

    def show_runners(self) -> None:
        self._runners_dirty = False
        views = self.ctl.pool.views()
        self.query_one("#runners-table", RunnersTable).show_runners(views, self.clock())
        live = sum(1 for v in views if v.state in ("LIVE", "BUSY"))
        gpus = sum(v.gpus_free for v in views if v.state in ("LIVE", "BUSY"))
        hint = (
            f"{len(views)} runner(s), {live} answering, {gpus} GPU(s) free.  p: pair  a: add  -: remove"
            if views
            else "no runners yet: start `app agent serve` on a GPU machine of this LAN, "
            "or press a to add one by address"
        )
        self.query_one("#runners-hint", Label).update(hint)

    def _runners_changed(self) -> None:
        self._runners_dirty = True

    # -- selection ------------------------------------------------------------------------

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

    def select_job(self, job_id: str) -> None:
        """Show this job in Logs, Metrics and Artifacts; follow it live if it still runs."""
        self.job_id = job_id
        self.node = None
        self._pending.clear()
        self._metrics = MetricsReader(job_id)
        self._load_log()
        if self.query_one("#tabs", TabbedContent).active == "metrics":
            self.show_metrics(force=True)
        self.show_artifacts()
        job = self.ctl.runs.job(job_id)
        if not job.synced and job.state is not JobState.QUEUED:
            # From the line after the window just read: every line shown once.
            self.feeds.follow(job_id, self.ctl.runs.log_end(job_id))

    def _load_log(self) -> None:
        window = self.ctl.runs.log_window(self.job_id, LOG_WINDOW, self.node)
        self.query_one(LogView).set_lines(window.lines, window.at_start)
        self._oldest = window.oldest
        self._show_job_header()

    @on(LogView.WantNewest)
    def _newest(self, event: LogView.WantNewest) -> None:
        """G after paging back: the window is the log's end again (what came meanwhile is stored)."""
        if self.job_id:
            self._pending.clear()
            self._load_log()

    @on(LogView.WantOlder)
    def _older(self, event: LogView.WantOlder) -> None:
        if not self.job_id:
            return
        before = self._oldest
        if before is None:  # trimmed while following: the view starts that many lines before the stored end
            before = self.ctl.runs.log_window(self.job_id, len(event.view.lines) + len(self._pending), self.node).oldest
        window = self.ctl.runs.log_window(self.job_id, LOG_WINDOW // 4, self.node, before=before)
        self._oldest = window.oldest
        event.view.prepend(window.lines, window.at_start)

    def _show_job_header(self) -> None:
        if not self.job_id:
            return
        job = self.ctl.runs.job(self.job_id)
        nodes = self.ctl.runs.nodes(self.job_id)
        where = ", ".join(n["runner"] for n in nodes) if nodes else (job.runner or "-")
        status = status_text(job)
        view = self.query_one(LogView)
        parts = [
            f"run {job.run_name}",
            f"job {job.id}",
            job.workflow,
            f"on {where}",
            status,
            duration(job.started_at, job.finished_at, self.clock()),
        ]
        if len(nodes) > 1:
            parts.append(f"node {self.node}" if self.node is not None else f"all {len(nodes)} nodes")
        if not job.state.is_terminal():
            parts.append("following" if view.following else "paused (G follows)")
        if job.error:
            parts.append(job.error)
        self.query_one("#log-header", Label).update("  ·  ".join(parts))

    # -- live log --------------------------------------------------------------------------

    def _on_log(self, job_id: str, stream: str, data: bytes) -> None:
        """Sink for every followed job's new log chunks (called on the event loop)."""
        if job_id != self.job_id:
            return
        if stream == "met":
            self._metrics_dirty = True
            return
        lines = overview.decode_lines(data, stream, None)
        if self.node is not None:
            tag = f"[node {self.node}] "
            lines = [line for line in lines if line.text.startswith(tag)]
        self._pending.extend(lines)
        if len(self._pending) > LOG_WINDOW:  # the screen is behind: keep only what can be shown
            del self._pending[:-LOG_WINDOW]

    def _flush_log(self) -> None:
        if not self._running:
            return
        if self._pending:
            lines, self._pending = self._pending, []
            view = self.query_one(LogView)
            first = view.lines[0] if view.lines else None
            if len(lines) >= LOG_WINDOW:  # the screen fell behind and _on_log kept the newest: show only those
                view.set_lines(lines, at_start=False)
            else:
                view.append(lines)
            if view.lines[0] is not first:
                self._oldest = None  # the oldest lines were dropped: _older finds where the view starts now
        if self._metrics_dirty and self.query_one("#tabs", TabbedContent).active == "metrics":
            self.show_metrics()

    def _job_ended(self, job_id: str) -> None:
        job = self.ctl.runs.job(job_id)
        severity = "information" if job.state is JobState.DONE else "warning"
        self.notify(
            f"run {job.run_name} ({job.workflow}): {job.status}"
            + (f" ({job.exit_code})" if job.exit_code is not None else ""),
            severity=severity,
        )
        if job_id == self.job_id:
            self._show_job_header()
            self.show_artifacts()
            self.show_metrics(force=True)
        self.show_runs()

    def _error(self, text: str) -> None:
        self.notify(text, severity="warning", timeout=8)

    # -- metrics and artifacts -------------------------------------------------------------

    def show_metrics(self, force: bool = False) -> None:
        if self._metrics is None:
            return
        changed = self.ctl.runs.read_metrics(self._metrics)
        self._metrics_dirty = False
        if changed or force:
            job = self.ctl.runs.job(self._metrics.job_id)
            series = overview.metric_series(self._metrics.points)
            title = f"{job.workflow} · run {job.run_name}" + ("" if series else ": no metrics yet")
            self.query_one(MetricsChart).show_series(series, title)

    def show_artifacts(self) -> None:
        if not self.job_id:
            return
        job = self.ctl.runs.job(self.job_id)
        files = self.ctl.runs.artifacts(self.job_id)
        total = sum(n for _, n in files)
        if files:
            text = f"run {job.run_name} · job {job.id}: {len(files)} file(s), {size(total)}.  d: download"
        elif job.state.is_terminal():
            text = f"run {job.run_name} · job {job.id}: no artifacts"
        else:
            text = f"run {job.run_name} · job {job.id}: artifacts come back when the job ends"
        self.query_one("#artifacts-header", Label).update(text)
        self.query_one(ArtifactsList).show_files(files)

    # -- actions ----------------------------------------------------------------------------

    def action_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab
        target = {
            "runs": "#runs-table",
            "runners": "#runners-table",
            "logs": "#log",
            "artifacts": "#artifacts-table",
        }.get(tab)
        if target:
            self.query_one(target).focus()
        if tab == "metrics":
            self.show_metrics(force=True)
        elif tab == "runners":
            self.show_runners()
        elif tab == "runs":
            self.show_runs()

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id == "metrics":
            self.show_metrics(force=True)

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
        tab = self.query_one("#tabs", TabbedContent).active
        if tab == "logs":
            view = self.query_one(LogView)
            self.push_screen(
                FormDialog("Search the log", [Field("text", "text (n / N: next / previous)", view.search)], ok="Find"),
                self._search_log,
            )
        else:
            self.action_tab("runs")
            self.query_one("#runs-filter", Input).focus()

    def _search_log(self, answer: dict | None) -> None:
        if not answer:
            return
        view = self.query_one(LogView)
        if not view.find(answer["text"], forward=False) and not view.find(answer["text"]) and self.job_id:
            self._search_older(self.job_id, answer["text"])

    @work(group="search", exclusive=True, exit_on_error=False)
    async def _search_older(self, job_id: str, text: str) -> None:
        found = await asyncio.to_thread(self.ctl.runs.search_log, job_id, text, 100)  # its own connection
        self.notify(
            f"{text!r}: not in the lines shown"
            + (
                f"; {len(found)}{'+' if len(found) == 100 else ''} match(es) in older lines: g pages them in"
                if found
                else ", nor in the stored log"
            )
        )

    def action_node(self, step: int) -> None:
        if not self.job_id:
            return
        nodes = [n["node"] for n in self.ctl.runs.nodes(self.job_id)]
        if len(nodes) < 2:
            self.notify("this job runs on one node")
            return
        choices = [None] + nodes
        self.node = choices[(choices.index(self.node) + step) % len(choices)]
        self._pending.clear()
        self._load_log()

    def _selected_job(self) -> str | None:
        tab = self.query_one("#tabs", TabbedContent).active
        if tab == "runs":
            return self.query_one(RunsTable).selected_key or self.job_id
        return self.job_id

    def action_stop(self, abort: bool = False) -> None:
        job_id = self._selected_job()
        if not job_id:
            self.notify("select a job in Runs first")
            return
        job = self.ctl.runs.job(job_id)
        if job.state.is_terminal():
            self.notify(f"job {job_id} already ended: {job.status}")
            return
        verb = "Abort" if abort else "Stop"
        question = f"{verb} job {job_id} ({job.workflow}, run {job.run_name})?" + (
            "\nNo artifacts come back from an aborted job."
            if abort
            else "\nSIGTERM, then SIGKILL after the grace period; artifacts come back."
        )
        self.push_screen(ConfirmDialog(question, verb), lambda yes: yes and self._stop(job_id, abort))

    def action_abort(self) -> None:
        self.action_stop(abort=True)

    @work(group="stop", exit_on_error=False)
    async def _stop(self, job_id: str, abort: bool) -> None:
        self.notify(f"{'aborting' if abort else 'stopping'} job {job_id}…")
        job = await self.ctl.stop(job_id, abort=abort)
        self.notify(f"job {job_id}: {job.status}")
        self.show_runs()

    def action_run(self) -> None:
        if self.project is None:
            self.notify(self.project_error or "no project", severity="error")
            return
        if not self.project.workflows:
            self.notify("the project has no workflows", severity="error")
            return
        runners = self.ctl.pool.names()
        self.push_screen(RunDialog(self.project, runners, self.ctl.variables), self._submit)

    @on(RunDialog.PlanWanted)
    def _plan_wanted(self, event: RunDialog.PlanWanted) -> None:
        self._plan(event.dialog, event.request)

    @work(group="plan", exclusive=True, exit_on_error=False)
    async def _plan(self, dialog: RunDialog, request: RunRequest) -> None:
        await asyncio.sleep(0.2)  # typing: plan once the keys stop
        try:
            # Hashing the project's files can take a while: a thread, with its own connection.
            plan = await asyncio.to_thread(
                self.ctl.plan_in_thread, self.project, request.workflow, request.overrides, request.no_cache, False
            )
        except LanpoolError as exc:
            dialog.show_plan(f"[red]{exc.message}[/red]")
            return
        rows = [
            f"{'[green]RUN  [/green]' if j.action == 'run' else '[cyan]REUSE[/cyan]'} {j.workflow}"
            + (f"  ← {', '.join(j.deps)}" if j.deps else "")
            + (f"  ({j.reason})" if j.reason else "")
            for j in plan.jobs
        ]
        dialog.show_plan("\n".join(rows))

    def _submit(self, request: RunRequest | None) -> None:
        if request is not None:
            self._run(request)

    @work(group="runs", exit_on_error=False)
    async def _run(self, request: RunRequest) -> None:
        def submitted(sub) -> None:
            self.feeds.adopt(sub.job_id, me)
            self.show_runs()
            table = self.query_one(RunsTable)
            if sub.job_id in table.rows:  # the cursor goes with the shown job (or its highlight takes Logs back)
                table.move_cursor(row=table.get_row_index(sub.job_id), animate=False)
            self.select_job(sub.job_id)
            self.action_tab("logs")
            self.notify(f"run {sub.run_name}: job {sub.job_id} on {sub.runner}")

        def say(text: str) -> None:
            self.notify(text, timeout=6)

        me = asyncio.current_task()

        def sink(job_id: str, stream: str, data: bytes) -> None:
            # One follower per job feeds the view: this run's, unless the user's
            # selection started another first (multi-node jobs announce no submit).
            owner = self.feeds.following.get(job_id)
            if owner is None or owner.done():
                self.feeds.adopt(job_id, me)
                owner = me
            if owner is me:
                self._on_log(job_id, stream, data)

        outcome = await self.ctl.run(
            self.project,
            request.workflow,
            request.runner,
            request.overrides,
            sink=sink,
            say=say,
            on_submitted=submitted,
            no_cache=request.no_cache,
            nodes=request.nodes,
        )
        for job in outcome.jobs:
            self._job_ended(job.id)
        if not outcome.jobs:
            self.notify(f"run {outcome.run_name}: every job reused; nothing ran")

    def action_download(self) -> None:
        job_id = self._selected_job()
        if not job_id:
            self.notify("select a job in Runs first")
            return
        job = self.ctl.runs.job(job_id)
        default = str(Path.cwd() / job.run_name)
        self.push_screen(
            FormDialog(
                f"Download the artifacts of job {job_id} (run {job.run_name})",
                [Field("dir", "to directory", default)],
                ok="Download",
            ),
            lambda answer: answer and self._download(job_id, Path(answer["dir"]).expanduser()),
        )

    @work(group="download", exclusive=True, exit_on_error=False)
    async def _download(self, job_id: str, output: Path) -> None:
        box = self.query_one("#download-box")
        bar = self.query_one("#download-progress", ProgressBar)
        label = self.query_one("#download-label", Label)
        box.display = True
        label.update(f"downloading to {output}…")
        bar.update(total=None, progress=0)

        def progress(done: int, total: int) -> None:
            bar.update(total=max(total, 1), progress=done)

        try:
            files = await self.ctl.download_artifacts(job_id, output, progress)
        finally:
            box.display = False
        self.notify(f"{len(files)} file(s), {size(sum(n for _, n in files))} -> {output}")
        self.show_artifacts()

    def action_save_log(self) -> None:
        if not self.job_id:
            self.notify("select a job in Runs first")
            return
        job = self.ctl.runs.job(self.job_id)
        default = str(Path.cwd() / f"{job.run_name}-{job.id}.log")
        self.push_screen(
            FormDialog("Save the whole log (from the store)", [Field("path", "file", default)], ok="Save"),
            lambda answer: answer and self._save_log(self.job_id, Path(answer["path"]).expanduser()),
        )

    @work(group="save", exit_on_error=False)
    async def _save_log(self, job_id: str, path: Path) -> None:
        count = await asyncio.to_thread(self.ctl.runs.save_log, job_id, path, self.node)  # its own connection
        self.notify(f"{count} line(s) -> {path}")

    def action_copy_log(self) -> None:
        view = self.query_one(LogView)
        self.copy_to_clipboard(view.text)
        self.notify(f"copied {len(view.lines)} line(s) (terminals with OSC 52 clipboard support)")

    def action_pair(self) -> None:
        selected = self.query_one(RunnersTable).selected_key or ""
        self.push_screen(
            FormDialog(
                "Pair with a runner: `app agent pair` on it shows a code",
                [Field("target", "runner name or HOST[:PORT]", selected), Field("code", "pairing code")],
                ok="Pair",
            ),
            lambda answer: answer and self._pair(answer["target"], answer["code"]),
        )

    @work(group="runners", exit_on_error=False)
    async def _pair(self, target: str, code: str) -> None:
        import socket

        name = await self.ctl.pool.pair(target, code, label=socket.gethostname())
        self.notify(f"paired with runner {name}")
        self.show_runners()

    def action_add_runner(self) -> None:
        self.push_screen(
            FormDialog(
                "Add a runner by address (where multicast does not reach)",
                [Field("address", "HOST[:PORT]", placeholder=f"192.168.1.20:{Controller.DEFAULT_PORT}")],
                ok="Add",
            ),
            lambda answer: answer and self._add_runner(answer["address"]),
        )

    @work(group="runners", exit_on_error=False)
    async def _add_runner(self, address: str) -> None:
        from app.controller import parse_address

        host, port = parse_address(address, Controller.DEFAULT_PORT)
        name = await self.ctl.add_runner(host, port)  # the user's act: trusted from now on
        await self.feeds.check_runners()
        self.notify(f"added runner {name} at {host}:{port}")
        self.show_runners()

    def action_remove_runner(self) -> None:
        name = self.query_one(RunnersTable).selected_key
        if self.query_one("#tabs", TabbedContent).active != "runners" or not name:
            self.notify("select a runner in Runners first")
            return
        self.push_screen(
            ConfirmDialog(f"Forget runner {name} and its pinned host key?", "Remove"),
            lambda yes: yes and self._remove_runner(name),
        )

    def _remove_runner(self, name: str) -> None:
        self.ctl.pool.forget(name)
        self.notify(f"forgot runner {name}")
        self.show_runners()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.HELP))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for title, help_text, action in [
            ("Run a workflow", "open the Run dialog", self.action_run),
            ("Stop job", "stop the selected job", self.action_stop),
            ("Abort job", "stop the selected job without artifacts", self.action_abort),
            ("Download artifacts", "copy the selected job's artifacts to a directory", self.action_download),
            ("Save log", "write the selected job's whole log to a file", self.action_save_log),
            ("Copy log", "copy the shown log lines to the clipboard", self.action_copy_log),
            ("Pair runner", "pair with a runner using its code", self.action_pair),
            ("Add runner", "add a runner by address", self.action_add_runner),
            ("Remove runner", "forget the selected runner", self.action_remove_runner),
            ("Show runs", "the runs list", lambda: self.action_tab("runs")),
            ("Show runners", "the runner pool", lambda: self.action_tab("runners")),
            ("Show logs", "the selected job's log", lambda: self.action_tab("logs")),
            ("Show metrics", "the selected job's loss curves", lambda: self.action_tab("metrics")),
            ("Show artifacts", "the selected job's artifacts", lambda: self.action_tab("artifacts")),
            ("Keys", "all key bindings", self.action_help),
        ]:
            yield SystemCommand(title, help_text, action)

    # -- errors ---------------------------------------------------------------------------------

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
            message = getattr(error, "message", None) or f"{type(error).__name__}: {error}"
            self.notify(message, title="error", severity="error", timeout=10)
