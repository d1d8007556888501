"""The runs and runners tables: DataTables updated in place (only changed cells
are touched, so a live list of hundreds of jobs redraws cheaply)."""

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable

from app.formatting import ago, duration, runner_cells
from app.overview import JobLine
from app.runner_views import RunnerView

STATUS_STYLE = {
    "QUEUED": "yellow",
    "SUBMITTED": "cyan",
    "RUNNING": "bold cyan",
    "DONE": "green",
    "FAILED": "bold red",
    "STOPPED": "magenta",
    "ABORTED": "magenta",
    "LOST": "red",
    "LIVE": "green",
    "BUSY": "yellow",
    "OFFLINE": "red",
    "UNPAIRED": "cyan",
    "CONFLICT": "bold red",
}


def status_cell(text: str, width: int = 48) -> Text:
    state = text.split(" ")[0].rstrip(":")
    return Text(text if len(text) <= width else text[: width - 1] + "…", style=STATUS_STYLE.get(state, ""))


class LiveTable(DataTable):
    """A DataTable whose rows are replaced by key: new rows added, gone rows removed,
    changed cells updated; order follows the given rows."""

    COLUMNS: Sequence[tuple[str, str]] = ()

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for key, label in self.COLUMNS:
            self.add_column(label, key=key)

    def show(self, rows: list[tuple[str, list]]) -> None:
        current = {k.value for k in self.rows}
        wanted = [k for k, _ in rows]
        if [k.value for k in self.rows] != wanted:
            # Order or membership changed: rebuild (rare: a new job, a filter).
            selected = self.selected_key
            self.clear()
            for key, cells in rows:
                self.add_row(*cells, key=key)
            if selected in wanted:
                self.move_cursor(row=wanted.index(selected), animate=False)
            return
        for key, cells in rows:
            if key not in current:
                continue
            for (col, _), value in zip(self.COLUMNS, cells, strict=False):
                old = self.get_cell(key, col)
                if str(old) != str(value) or getattr(old, "style", None) != getattr(value, "style", None):
                    self.update_cell(key, col, value, update_width=True)  # RUNNING -> DONE (0) is wider

    @property
    def selected_key(self) -> str | None:
        if not self.row_count or self.cursor_row < 0:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:  # cursor outside the rows (table just emptied)
            return None


class RunsTable(LiveTable):
    COLUMNS = (
        ("run", "RUN"),
        ("job", "JOB"),
        ("workflow", "WORKFLOW"),
        ("variables", "VARIABLES"),
        ("runner", "RUNNER"),
        ("status", "STATUS"),
        ("submitted", "SUBMITTED"),
        ("duration", "DURATION"),
        ("artifacts", "ARTIFACTS"),
    )

    def show_jobs(self, lines: list[JobLine], now: float) -> None:
        rows = []
        for line in lines:
            j = line.job
            runner = ", ".join(line.runners) or "-"
            variables = line.variables_text
            rows.append(
                (
                    j.id,
                    [
                        j.run_name + (f" ({line.tag})" if line.tag else ""),
                        j.id,
                        j.workflow,
                        variables if len(variables) <= 40 else variables[:39] + "…",
                        runner,
                        status_cell(line.status_text),
                        ago(j.submitted_at, now),
                        duration(j.started_at, j.finished_at, now),
                        str(line.artifacts) if line.artifacts else "-",
                    ],
                )
            )
        self.show(rows)


class RunnersTable(LiveTable):
    COLUMNS = (
        ("name", "NAME"),
        ("address", "ADDRESS"),
        ("state", "STATE"),
        ("gpus", "GPUS FREE"),
        ("jobs", "JOBS"),
        ("executor", "EXECUTOR"),
        ("source", "SOURCE"),
        ("seen", "LAST SEEN"),
    )

    def show_runners(self, runners: list[RunnerView], now: float) -> None:
        rows = []
        for v in runners:
            cells: list = runner_cells(v, now)  # the same row as `app headless runners`, its state in colour
            cells[2] = status_cell(v.state)
            rows.append((v.name, cells))
        self.show(rows)
