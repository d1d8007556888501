"""The Logs tab: the shown job's log, following live (all nodes, or one), paged back from the
store, and its keys: / search, n / N, [ ] node, w save, c copy (g / G / t are the view's own).

The pane owns the job it shows, the node shown, the live lines not on the screen yet and where
the view's window starts in the store. Selecting a job (`show_job`) reads the stored tail of its
log; new lines come from whichever task follows the job (`add_chunk`, on the event loop) and
reach the screen in batches (`flush`, on the app's timer), however fast they come.
"""

import asyncio
from collections.abc import Callable
from functools import partial
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.widgets import Label

from lanpool.app.controller import Controller
from lanpool.app.tui.dialogs.simple import Field, FormDialog
from lanpool.app.tui.widgets.headers import set_header
from lanpool.app.tui.widgets.log_view import LogView
from lanpool.app.tui.widgets.panes import Pane
from lanpool.app.tui.workers import run_on_app
from lanpool.app.views import overview
from lanpool.app.views.formatting import duration, status_text
from lanpool.app.views.overview import LogLine

LOG_WINDOW = 20_000  # lines held by the log view; older ones are paged in from SQLite
# Lines read from SQLite at a time: a job's tail when it is selected or G reloads it, and each older
# page when the view is scrolled to its top. A screen shows ~50; reading and decoding a 20,000-line
# window on the event loop held keys back ~100 ms on a 2-core machine (scripts/bench-tui).
LOG_PAGE = 2_000


class LogsPane(Pane):
    def __init__(self, ctl: Controller, clock: Callable[[], float]) -> None:
        super().__init__("Logs", id="logs")
        self.ctl = ctl
        self.clock = clock
        self.job_id: str | None = None
        self.node: int | None = None  # one node, or all
        self.pending: list[LogLine] = []  # live lines not on the screen yet
        self._oldest: dict[int, int] | None = {}  # per node, the seq of the view's first line

    def compose(self) -> ComposeResult:
        yield Label("no job selected: pick one in Runs (Enter)", id="log-header", classes="header")
        yield LogView(max_lines=LOG_WINDOW, id="log")

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    def show_job(self, job_id: str) -> None:
        self.job_id = job_id
        self.node = None
        self.pending.clear()
        self._load()

    def _load(self) -> None:
        assert self.job_id is not None
        window = self.ctl.runs.log_window(self.job_id, LOG_PAGE, self.node)  # the tail; g pages older ones in
        self.view.set_lines(window.lines, window.at_start)
        self._oldest = window.oldest
        self.refresh_header()

    @on(LogView.WantNewest)
    def _newest(self, event: LogView.WantNewest) -> None:
        """G after paging back: the window is the log's end again (what came meanwhile is stored)."""
        if self.job_id:
            self.pending.clear()
            self._load()

    @on(LogView.WantOlder)
    def _older(self, event: LogView.WantOlder) -> None:
        if not self.job_id:
            return
        before = self._oldest
        if before is None:  # trimmed while following: the view starts that many lines before the stored end
            held = len(event.view.lines) + len(self.pending)
            if self.node is not None or len(self.ctl.runs.nodes(self.job_id)) <= 1:
                # From the chunks' line counts: reading the window again decoded ~20,000 lines for this.
                node = self.node or 0
                before = {node: self.ctl.runs.log_window_start(self.job_id, held, node)}
            else:  # nodes' lines merged by seq: where each node's part starts needs the merge itself
                before = self.ctl.runs.log_window(self.job_id, held, self.node).oldest
        window = self.ctl.runs.log_window(self.job_id, LOG_PAGE, self.node, before=before)
        self._oldest = window.oldest
        event.view.prepend(window.lines, window.at_start)

    def refresh_header(self) -> None:
        if not self.job_id:
            return
        job = self.ctl.runs.job(self.job_id)
        nodes = self.ctl.runs.nodes(self.job_id)
        where = ", ".join(n["runner"] for n in nodes) if nodes else (job.runner or "-")
        who = [f"run {job.run_name}", f"job {job.id}"]
        where_what = [job.workflow, f"on {where}"]
        state = [status_text(job), duration(job.started_at, job.finished_at, self.clock())]
        more = []
        if len(nodes) > 1:
            more.append(f"node {self.node}" if self.node is not None else f"all {len(nodes)} nodes")
        if not job.state.is_terminal():
            more.append("following" if self.view.following else "paused (G follows)")
        if job.error:
            more.append(job.error)
        more += [f"warning: {w}" for w in self.ctl.runs.warnings(job.id)]  # e.g. an artifact not produced
        text = "  ·  ".join(who + where_what + state + more)
        if len(text) > self.app.size.width - 2:  # .header's padding
            # Narrow (80 columns): the state and duration before the workflow and runner, which
            # the Runs list shows too, and tighter separators, so the end cut off is the least wanted.
            text = " · ".join(who + state + where_what + more)
        set_header(self.query_one("#log-header", Label), text)

    # -- live lines ------------------------------------------------------------------------

    def add_chunk(self, stream: str, data: bytes) -> None:
        """A chunk of the shown job's live log (called on the event loop)."""
        # Stamped on arrival here: the agent's time is in the store (shown on a reload), the
        # sink gets only the bytes; the two differ by the link's latency.
        lines = overview.decode_lines(data, stream, None, self.clock())
        if self.node is not None:
            tag = f"[node {self.node}] "
            lines = [line for line in lines if line.text.startswith(tag)]
        self.pending.extend(lines)
        if len(self.pending) > LOG_WINDOW:  # the screen is behind: keep only what can be shown
            del self.pending[:-LOG_WINDOW]

    def flush(self) -> None:
        """The live lines that came since the last flush, onto the screen."""
        if not self.pending:
            return
        lines, self.pending = self.pending, []
        view = self.view
        first = view.lines[0] if view.lines else None
        if len(lines) >= LOG_WINDOW:  # the screen fell behind and add_chunk kept the newest: show only those
            view.set_lines(lines, at_start=False)
        else:
            view.append(lines)
        if view.lines[0] is not first:
            self._oldest = None  # the oldest lines were dropped: _older finds where the view starts now

    # -- keys --------------------------------------------------------------------------------

    def cycle_node(self, step: int) -> None:
        if not self.job_id:
            return
        nodes: list[int | None] = [n["node"] for n in self.ctl.runs.nodes(self.job_id)]
        if len(nodes) < 2:
            self.notify("this job runs on one node")
            return
        choices = [None, *nodes]
        self.node = choices[(choices.index(self.node) + step) % len(choices)]
        self.pending.clear()
        self._load()

    def search(self) -> None:
        self.app.push_screen(
            FormDialog("Search the log", [Field("text", "text (n / N: next / previous)", self.view.search)], ok="Find"),
            self._search,
        )

    def _search(self, answer: dict[str, str] | None) -> None:
        if not answer:
            return
        view = self.view
        if not view.find(answer["text"], forward=False) and not view.find(answer["text"]) and self.job_id:
            # On the app: its one handler reports a failure (a worker's StateChanged does not bubble).
            run_on_app(self, partial(self._search_older, self.job_id, answer["text"]), "search", exclusive=True)

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

    def save(self) -> None:
        job_id, node = self.job_id, self.node
        if not job_id:
            self.notify("select a job in Runs first")
            return
        job = self.ctl.runs.job(job_id)
        default = str(Path.cwd() / f"{job.run_name}-{job.id}.log")

        def chosen(answer: dict[str, str] | None) -> None:
            if answer:
                path = Path(answer["path"]).expanduser()
                run_on_app(self, partial(self._save, job_id, path, node), "save")

        self.app.push_screen(
            FormDialog("Save the whole log (from the store)", [Field("path", "file", default)], ok="Save"), chosen
        )

    async def _save(self, job_id: str, path: Path, node: int | None) -> None:
        count = await asyncio.to_thread(self.ctl.runs.save_log, job_id, path, node)  # its own connection
        self.notify(f"{count} line(s) -> {path}")

    def copy(self) -> None:
        view = self.view
        self.app.copy_to_clipboard(view.text)
        self.notify(f"copied {len(view.lines)} line(s) (terminals with OSC 52 clipboard support)")
