"""The Runs tab: runs and their jobs, newest first, filtered by text and status, and what acts on
a run or job from there: stop / abort (s / x), delete a run (D), prune ended runs, mark jobs
(space; u unmarks all) for the Metrics tab to overlay. A sweep's points sit together under their
run, each named by the values of its variables that differ from the others'.

The pane owns its filter and status choice, and tells the app with messages: a row highlighted
(`JobHighlighted`: the app shows that job in Logs, Metrics and Artifacts), a row opened with
Enter (`JobOpened`), runs deleted (`RunsDeleted`: a job shown may be gone), the marks changed
(`MarksChanged`). Stopping runs in a
worker on the app, whose one handler turns a failure into a notification.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

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
from lanpool.app.views import overlay, overview
from lanpool.app.views.formatting import size
from lanpool.app.views.overview import JobLine

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

    @dataclass
    class MarksChanged(Message):
        """The jobs marked (space), in the order marked: the Metrics tab overlays them."""

        job_ids: list[str]

    def __init__(self, ctl: Controller, clock: Callable[[], float]) -> None:
        super().__init__("Runs", id="runs")
        self.ctl = ctl
        self.clock = clock
        self.text = ""  # the filter
        self.status = ""  # a status, or any
        self.marked: dict[str, None] = {}  # job ids, in the order marked
        # Each sweep point's own variables (what tells it from the others), read once: they never change.
        self._own: dict[str, dict[str, Any]] = {}

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
        lines, sweeps = overlay.sweep_rows(self.ctl.runs.job_lines(self.text, self.status, RUNS_LIMIT))
        labels = self._point_labels(lines, list(sweeps.values())) if sweeps else {}
        self.table.show_jobs(lines, self.clock(), first, self.marked, sweeps.values(), labels)

    def _point_labels(self, lines: list[JobLine], sweeps: list[list[str]]) -> dict[str, str]:
        """Each sweep point's label: the values of the variables that differ between its sweep's
        points. The list's variables are its run's when they tell nothing apart (a sweep's run
        holds each swept variable as its list of values): then each point's own, read once."""
        listed = {line.job.id: line.variables for line in lines}
        labels: dict[str, str] = {}
        for ids in sweeps:
            values = {job_id: listed[job_id] for job_id in ids}
            if not overlay.varying(values):
                self._read_own([job_id for job_id in ids if job_id not in self._own])
                values = {job_id: self._own.get(job_id, {}) for job_id in ids}
            named = overlay.point_labels(values, {})
            labels.update((job_id, label) for job_id, label in named.items() if label != job_id)
        return labels

    def _read_own(self, job_ids: list[str]) -> None:
        for start in range(0, len(job_ids), overlay.MAX_JOBS):
            chunk = job_ids[start : start + overlay.MAX_JOBS]
            try:
                rows = self.ctl.runs.compared(chunk).rows
            except LanpoolError:  # one gone meanwhile: shown without its values
                rows = []
            for job_id in chunk:
                self._own[job_id] = {}
            self._own.update((str(r["job_id"]), r.get("variables") or {}) for r in rows)

    @on(RunsTable.MarkWanted)
    def _mark(self, event: RunsTable.MarkWanted) -> None:
        event.stop()
        if event.job_id is None:
            if not self.marked:
                return
            self.marked.clear()
        elif event.job_id in self.marked:
            del self.marked[event.job_id]
        else:
            self.marked[event.job_id] = None
        self.post_message(self.MarksChanged(list(self.marked)))
        self.refresh_runs()

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
        gone = [job_id for job_id in self.marked if job_id in removal.jobs]
        if gone:
            for job_id in gone:
                del self.marked[job_id]
            self.post_message(self.MarksChanged(list(self.marked)))
        self.notify(f"deleted {len(removal.runs)} run(s), {len(removal.jobs)} job(s): {size(removal.freed)} freed")
        self.refresh_runs()


def _what(removal: Removal) -> str:
    return (
        f"{len(removal.jobs)} job(s), their logs and {removal.files} artifact file(s): "
        f"{size(removal.freed)} freed on this machine (runners keep their copies until `app agent gc`)."
    )
