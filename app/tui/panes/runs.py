"""The Runs tab: runs and their jobs, newest first, filtered by text and status, and what acts on
a run or job from there: stop / abort (s / x), delete a run (D), prune ended runs.

The pane owns its filter and status choice, and tells the app with messages: a row highlighted
(`JobHighlighted`: the app shows that job in Logs, Metrics and Artifacts), a row opened with
Enter (`JobOpened`), runs deleted (`RunsDeleted`: a job shown may be gone). Stopping runs in a
worker on the app, whose one handler turns a failure into a notification.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Input, Select

from lanpool.app.controller import DEFAULT_PRUNE_AGE, Controller, Removal, parse_age
from lanpool.app.errors import LanpoolError
from lanpool.app.tui.dialogs.simple import ConfirmDialog, Field, FormDialog
from lanpool.app.tui.widgets.panes import Pane
from lanpool.app.tui.widgets.tables import RunsTable
from lanpool.app.tui.workers import run_on_app
from lanpool.app.views import overview
from lanpool.app.views.formatting import size

RUNS_LIMIT = 500  # rows in the runs list (filtering searches the whole store)
# Rows on the first frame: more than a screen holds; the rest are added just after it (adding a
# row costs DataTable ~0.2 ms: 500 rows were most of the first frame's time). The columns are
# sized for all RUNS_LIMIT rows from the start, so those the rest bring render nothing anew.
RUNS_FIRST = 100


class RunsPane(Pane):
    @dataclass
    class JobHighlighted(Message):
        job_id: str

    @dataclass
    class JobOpened(Message):
        """Enter on a row: its job's log."""

        job_id: str

    @dataclass
    class RunsDeleted(Message):
        removal: Removal

    def __init__(self, ctl: Controller, clock: Callable[[], float]) -> None:
        super().__init__("Runs", id="runs")
        self.ctl = ctl
        self.clock = clock
        self.text = ""  # the filter
        self.status = ""  # a status, or any

    def compose(self) -> ComposeResult:
        with Horizontal(id="runs-bar"):
            yield Input(placeholder="filter: run, job, workflow, runner, tag, variable  (/)", id="runs-filter")
            yield Select([(s, s) for s in overview.STATUS_CHOICES], prompt="any status", id="runs-status")
        yield RunsTable(id="runs-table")

    @property
    def table(self) -> RunsTable:
        return self.query_one(RunsTable)

    @property
    def selected(self) -> str | None:
        return self.table.selected_key

    def refresh_runs(self, first: int | None = None) -> None:
        """The runs list; `first`: when it is built anew, only that many rows now (the rest with
        the next call), the columns sized for all."""
        lines = self.ctl.runs.job_lines(self.text, self.status, RUNS_LIMIT)
        self.table.show_jobs(lines, self.clock(), first)

    def move_to(self, job_id: str) -> None:
        """The cursor onto this job's row, if it is shown."""
        table = self.table
        if job_id in table.rows:
            table.move_cursor(row=table.get_row_index(job_id), animate=False)

    def focus_filter(self) -> None:
        self.query_one("#runs-filter", Input).focus()

    @on(RunsTable.RowHighlighted, "#runs-table")
    def _highlighted(self, event: RunsTable.RowHighlighted) -> None:
        event.stop()
        if event.cursor_row != event.data_table.cursor_row:
            return  # stale: the cursor moved on since (a list rebuild, then the row of a job just submitted)
        if event.row_key.value:
            self.post_message(self.JobHighlighted(event.row_key.value))

    @on(RunsTable.RowSelected, "#runs-table")
    def _selected(self, event: RunsTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value:
            self.post_message(self.JobOpened(event.row_key.value))

    @on(Input.Changed, "#runs-filter")
    def _filter(self, event: Input.Changed) -> None:
        self.text = event.value.strip()
        self.refresh_runs()

    @on(Input.Submitted, "#runs-filter")
    def _filter_done(self) -> None:
        self.table.focus()

    @on(Select.Changed, "#runs-status")
    def _status(self, event: Select.Changed) -> None:
        self.status = event.value if isinstance(event.value, str) else ""  # the blank choice: any
        self.refresh_runs()

    # -- stop / abort ---------------------------------------------------------------------

    def stop(self, job_id: str, abort: bool = False) -> None:
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

        def answered(yes: bool | None) -> None:
            if yes:
                run_on_app(self, partial(self._stop, job_id, abort), "stop")

        self.app.push_screen(ConfirmDialog(question, verb), answered)

    async def _stop(self, job_id: str, abort: bool) -> None:
        self.notify(f"{'aborting' if abort else 'stopping'} job {job_id}…")
        job = await self.ctl.stop(job_id, abort=abort)
        self.notify(f"job {job_id}: {job.status}")
        self.refresh_runs()

    # -- delete / prune -------------------------------------------------------------------

    def delete_run(self, job_id: str) -> None:
        run = self.ctl.runs.job(job_id).run_name
        try:
            preview = self.ctl.retention.remove([run], dry_run=True)  # refuses a run still running
        except LanpoolError as exc:
            self.notify(exc.message, severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._removed(self.ctl.retention.remove([run]))

        self.app.push_screen(ConfirmDialog(f"Delete run {run}?\n{_what(preview)}", "Delete"), answered)

    def prune(self) -> None:
        def chosen(answer: dict[str, str] | None) -> None:
            if not answer:
                return
            try:
                older_than = parse_age(answer["age"])
            except LanpoolError as exc:
                self.notify(exc.message, severity="warning")
                return
            preview = self.ctl.retention.prune(older_than, dry_run=True)
            if not preview.runs:
                self.notify(f"no ended run is older than {answer['age']}")
                return

            def answered(yes: bool | None) -> None:
                if yes:
                    self._removed(self.ctl.retention.prune(older_than))

            question = f"Delete {len(preview.runs)} run(s) older than {answer['age']}?\n{_what(preview)}"
            self.app.push_screen(ConfirmDialog(question, "Delete"), answered)

        self.app.push_screen(
            FormDialog("Delete ended runs created longer ago than", [Field("age", "age", DEFAULT_PRUNE_AGE)]), chosen
        )

    def _removed(self, removal: Removal) -> None:
        self.post_message(self.RunsDeleted(removal))
        self.notify(f"deleted {len(removal.runs)} run(s), {len(removal.jobs)} job(s): {size(removal.freed)} freed")
        self.refresh_runs()


def _what(removal: Removal) -> str:
    return (
        f"{len(removal.jobs)} job(s), their logs and {removal.files} artifact file(s): "
        f"{size(removal.freed)} freed on this machine (runners keep their copies until `app agent gc`)."
    )
