"""Switching tabs, and the selected job's views: its live log (Logs), loss curves (Metrics) and
artifacts (Artifacts), and the keys that act on what they show.

One job is selected at a time (`job_id`); selecting it loads the stored tail of
its log and follows it live when it still runs. New lines arrive on the event
loop from whichever task follows the job (`_on_log`) and reach the screen in
batches (`_flush_log`, on a timer), however fast they come.
"""

import asyncio
import time
from pathlib import Path

from textual import on, work
from textual.notifications import SeverityLevel
from textual.widgets import Label, TabbedContent

from lanpool.app.tui.base import LOG_PAGE, LOG_WINDOW, LanpoolBase
from lanpool.app.tui.dialogs.simple import Field, FormDialog
from lanpool.app.tui.widgets.headers import set_header
from lanpool.app.tui.widgets.log_view import LogView
from lanpool.app.tui.widgets.metrics_chart import MetricsChart
from lanpool.app.views import overview
from lanpool.app.views.formatting import duration, status_text
from lanpool.app.views.overview import MetricsReader
from lanpool.protocol import JobState

# A key not yet answered holds the log's flush back at most this long (if its frame never comes,
# e.g. a key that changed nothing, lines still reach the screen).
KEY_HOLDS_FLUSH_S = 0.1


class JobView(LanpoolBase):
    def action_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab
        target = {
            "runs": "#runs-table",
            "runners": "#runners-table",
            "logs": "#log",
            "metrics": "#metric-picker",
            "artifacts": "#artifacts-table",
        }.get(tab)
        if target and tab in ("logs", "metrics"):
            # Focus moves after the frame that shows the tab: the blurred and the focused widget
            # restyle (:focus), 4-11 ms of the key's frame (scripts/bench-tui). A key or click that
            # comes before that frame moves it first (LanpoolApp.on_event), so none goes astray.
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
            self.call_after_refresh(self.show_runs)

    def apply_focus(self) -> None:
        """The focus a tab switch asked for, if not given yet."""
        widget, self._focus_next = self._focus_next, None
        if widget is not None and widget.is_attached:
            # At once, not by widget.focus()'s call_later: a key being routed goes to it (on_event).
            widget.screen.set_focus(widget)

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id != "metrics":
            return
        if (
            self._metrics is not None
            and self._metrics_shown is not None
            and (self._metrics_shown[0] == self._metrics.job_id)
        ):
            # The chart already shows this job: the switch's frame shows it as it is, and the
            # points that came since (a read and plotext's whole canvas) follow in the next one;
            # building them on the key was the slowest key (p95 ~140 ms, scripts/bench-tui).
            self.call_after_refresh(self.show_metrics, True)
        else:
            self.show_metrics(force=True)  # another job's chart must not show, even for a frame

    # -- the selected job ------------------------------------------------------------------

    def select_job(self, job_id: str) -> None:
        """Show this job in Logs, Metrics and Artifacts; follow it live if it still runs."""
        self.job_id = job_id
        self.node = None
        self._pending.clear()
        self._metrics = MetricsReader(job_id)
        self._load_log(job_id)
        if self.active_tab() == "metrics":
            self.show_metrics(force=True)
        self.artifacts.show_job(self.job_id)
        job = self.ctl.runs.job(job_id)
        if not job.synced and job.state is not JobState.QUEUED:
            # From the line after the window just read: every line shown once.
            self.feeds.follow(job_id, self.ctl.runs.log_end(job_id))

    def _load_log(self, job_id: str) -> None:
        window = self.ctl.runs.log_window(job_id, LOG_PAGE, self.node)  # the tail; g pages older ones in
        self.query_one(LogView).set_lines(window.lines, window.at_start)
        self._oldest = window.oldest
        self._show_job_header()

    @on(LogView.WantNewest)
    def _newest(self, event: LogView.WantNewest) -> None:
        """G after paging back: the window is the log's end again (what came meanwhile is stored)."""
        if self.job_id:
            self._pending.clear()
            self._load_log(self.job_id)

    @on(LogView.WantOlder)
    def _older(self, event: LogView.WantOlder) -> None:
        if not self.job_id:
            return
        before = self._oldest
        if before is None:  # trimmed while following: the view starts that many lines before the stored end
            held = len(event.view.lines) + len(self._pending)
            if self.node is not None or len(self.ctl.runs.nodes(self.job_id)) <= 1:
                # From the chunks' line counts: reading the window again decoded ~20,000 lines for this.
                node = self.node or 0
                before = {node: self.ctl.runs.log_window_start(self.job_id, held, node)}
            else:  # nodes' lines merged by seq: where each node's part starts needs the merge itself
                before = self.ctl.runs.log_window(self.job_id, held, self.node).oldest
        window = self.ctl.runs.log_window(self.job_id, LOG_PAGE, self.node, before=before)
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
        who = [f"run {job.run_name}", f"job {job.id}"]
        where_what = [job.workflow, f"on {where}"]
        state = [status, duration(job.started_at, job.finished_at, self.clock())]
        more = []
        if len(nodes) > 1:
            more.append(f"node {self.node}" if self.node is not None else f"all {len(nodes)} nodes")
        if not job.state.is_terminal():
            more.append("following" if view.following else "paused (G follows)")
        if job.error:
            more.append(job.error)
        more += [f"warning: {w}" for w in self.ctl.runs.warnings(job.id)]  # e.g. an artifact not produced
        text = "  ·  ".join(who + where_what + state + more)
        if len(text) > self.size.width - 2:  # .header's padding
            # Narrow (80 columns): the state and duration before the workflow and runner, which
            # the Runs list shows too, and tighter separators, so the end cut off is the least wanted.
            text = " · ".join(who + state + where_what + more)
        set_header(self.query_one("#log-header", Label), text)

    # -- live log --------------------------------------------------------------------------

    def _on_log(self, job_id: str, stream: str, data: bytes) -> None:
        """Sink for every followed job's new log chunks (called on the event loop)."""
        if job_id != self.job_id:
            return
        if stream == "met":
            self._metrics_dirty = True
            return
        # Stamped on arrival here: the agent's time is in the store (shown on a reload), the
        # sink gets only the bytes; the two differ by the link's latency.
        lines = overview.decode_lines(data, stream, None, self.clock())
        if self.node is not None:
            tag = f"[node {self.node}] "
            lines = [line for line in lines if line.text.startswith(tag)]
        self._pending.extend(lines)
        if len(self._pending) > LOG_WINDOW:  # the screen is behind: keep only what can be shown
            del self._pending[:-LOG_WINDOW]

    def _flush_log(self) -> None:
        if not self._running:
            return
        if self._key_at is not None and time.monotonic() - self._key_at < KEY_HOLDS_FLUSH_S:
            return  # a key's frame is not out yet: these lines come with the next flush
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
        if self._metrics_dirty and self.active_tab() == "metrics":
            self.show_metrics()

    def _job_ended(self, job_id: str) -> None:
        job = self.ctl.runs.job(job_id)
        severity: SeverityLevel = "information" if job.state is JobState.DONE else "warning"
        self.notify(
            f"run {job.run_name} ({job.workflow}): {job.status}"
            + (f" ({job.exit_code})" if job.exit_code is not None else ""),
            severity=severity,
        )
        if self._closing or self._exit:
            return  # a run's worker ended while the app closes: its widgets are gone or going
        if job_id == self.job_id:
            self._show_job_header()
            self.artifacts.show_job(self.job_id)
            self.show_metrics(force=True)
        self.show_runs()

    # -- metrics and artifacts -------------------------------------------------------------

    def show_metrics(self, force: bool = False) -> None:
        if self._metrics is None:
            return
        changed = self.ctl.runs.read_metrics(self._metrics)
        self._metrics_dirty = False
        shown = (self._metrics.job_id, len(self._metrics.points))
        if shown == self._metrics_shown:
            # What the chart shows already: a switch to the tab (the key and the TabActivated it
            # sends both came here) built every series again only for the chart to find them equal.
            return
        if changed or force:
            self._metrics_shown = shown
            job = self.ctl.runs.job(self._metrics.job_id)
            series = overview.metric_series(self._metrics.points)
            title = f"{job.workflow} · run {job.run_name}" + ("" if series else ": no metrics yet")
            self.query_one(MetricsChart).show_series(series, title)

    # -- keys of the Logs tab --------------------------------------------------------------

    def search_log(self) -> None:
        view = self.query_one(LogView)
        self.push_screen(
            FormDialog("Search the log", [Field("text", "text (n / N: next / previous)", view.search)], ok="Find"),
            self._search_log,
        )

    def _search_log(self, answer: dict[str, str] | None) -> None:
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
        nodes: list[int | None] = [n["node"] for n in self.ctl.runs.nodes(self.job_id)]
        if len(nodes) < 2:
            self.notify("this job runs on one node")
            return
        choices = [None, *nodes]
        self.node = choices[(choices.index(self.node) + step) % len(choices)]
        self._pending.clear()
        self._load_log(self.job_id)

    def action_save_log(self) -> None:
        job_id = self.job_id
        if not job_id:
            self.notify("select a job in Runs first")
            return
        job = self.ctl.runs.job(job_id)
        default = str(Path.cwd() / f"{job.run_name}-{job.id}.log")

        def chosen(answer: dict[str, str] | None) -> None:
            if answer:
                self._save_log(job_id, Path(answer["path"]).expanduser())

        self.push_screen(
            FormDialog("Save the whole log (from the store)", [Field("path", "file", default)], ok="Save"), chosen
        )

    @work(group="save", exit_on_error=False)
    async def _save_log(self, job_id: str, path: Path) -> None:
        count = await asyncio.to_thread(self.ctl.runs.save_log, job_id, path, self.node)  # its own connection
        self.notify(f"{count} line(s) -> {path}")

    def action_copy_log(self) -> None:
        view = self.query_one(LogView)
        self.copy_to_clipboard(view.text)
        self.notify(f"copied {len(view.lines)} line(s) (terminals with OSC 52 clipboard support)")
