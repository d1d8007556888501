"""The runs and runners tables: DataTables updated in place (only changed cells
are touched, so a live list of hundreds of jobs redraws cheaply).

A narrow terminal (80 columns) cannot hold every column: the columns that do not
fit are hidden, the least wanted first (`HIDE_ORDER`), so STATUS stays on screen.
Keys are k9s/lazygit's: j/k, g/G, Home/End.

Going back to a tab shows its table from DataTable's render caches: Textual's
DataTable drops them whenever its tab is shown again (the pane's CSS is
re-applied and a Resize comes, both with nothing changed), and re-rendering
every visible cell was most of the cost of the key (scripts/bench-tui). Here
they are dropped only when the width, the styles or the rows shown really
changed (rows added below, as the rest of the list after the first frame, are
not a change to the rows above).
"""

from collections.abc import Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.text import Text
from textual.binding import Binding
from textual.events import Resize
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable

from lanpool.app.runners.views import RunnerView
from lanpool.app.views.formatting import ago, duration, gpu_util_text, runner_cells
from lanpool.app.views.overview import JobLine

Cell = str | Text
Row = tuple[str, list[Cell]]  # (key, cells in COLUMNS order)

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
    return plain_cell(text if len(text) <= width else text[: width - 1] + "…", STATUS_STYLE.get(state, ""))


def plain_cell(value: str, style: str = "") -> Text:
    """A cell as DataTable shows a one-line str, without reading it as markup: a run name or a
    variable's value holding "[...]" shows as typed, and DataTable does not parse each cell's
    markup again whenever it measures or renders it (most of the runs list's first frame,
    scripts/bench-tui)."""
    return Text(value, style=style, no_wrap=True, end="")


class LiveTable(DataTable[Cell]):
    """A DataTable whose rows are replaced by key: new rows added, gone rows removed,
    changed cells updated; order follows the given rows."""

    COLUMNS: Sequence[tuple[str, str]] = ()
    HIDE_ORDER: Sequence[str] = ()  # columns hidden first when the table is too narrow
    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
        Binding("g,home", "first", "First", show=False),
        Binding("G,end", "last", "Last", show=False),
    ]

    _sized: object = None  # the size of the last Resize
    _drawn_width = -1  # the width the rendered rows DataTable caches were drawn at
    _styled: Hashable = None  # the theme and classes the cached cells were rendered with

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self._rows: list[Row] = []
        self.shown_columns: list[str] = [key for key, _ in self.COLUMNS]
        self._add_columns()

    def _add_columns(self) -> None:
        labels = dict(self.COLUMNS)
        for key in self.shown_columns:
            self.add_column(labels[key], key=key)

    def action_first(self) -> None:
        if self.row_count:
            self.move_cursor(row=0, animate=False)

    def action_last(self) -> None:
        if self.row_count:
            self.move_cursor(row=self.row_count - 1, animate=False)

    def on_resize(self, event: Resize) -> None:
        # DataTable's own handler drops every rendered row at each Resize: the first one, which
        # comes after the first frame, and one each time its tab is shown again. A row's lines
        # depend on the table's width alone (they are padded to it): render_lines drops them
        # when that changed.
        event.prevent_default()
        if event.size != self._sized:
            self._sized = event.size
            self._fit(event.size.width)

    def render_lines(self, crop: Region) -> list[Strip]:
        if self.size.width != self._drawn_width:
            self._drawn_width = self.size.width
            self._update_count += 1  # DataTable's key to its rendered rows: those of another width go
        return super().render_lines(crop)

    def notify_style_update(self) -> None:
        # What the table's styles derive from besides the focus/hover state, which DataTable's
        # cache keys hold already: the theme and the table's classes (CSS files do not change).
        styled = (self.app.theme, frozenset(self.classes))
        if styled == self._styled:
            Widget.notify_style_update(self)  # the widget's own small style caches only
            return
        self._styled = styled
        super().notify_style_update()  # a new theme: every cached cell goes

    def _fit(self, width: int, first: int | None = None) -> bool:
        """Hide the least wanted columns until the rest fit `width` (shown again when it grows);
        True when that built the rows anew."""
        if width <= 0:
            return False
        need = {}
        for i, (key, label) in enumerate(self.COLUMNS):
            cells = [cell_len(str(c[i])) for _, c in self._rows[:200]]
            need[key] = max([cell_len(label), *cells]) + 2 * self.cell_padding
        shown = [key for key, _ in self.COLUMNS]
        room = width - 2  # the vertical scrollbar
        for key in self.HIDE_ORDER:
            if sum(need[k] for k in shown) <= room:
                break
            shown.remove(key)
        if shown != self.shown_columns:
            self.shown_columns = shown
            selected = self.selected_key
            self.clear(columns=True)
            self._add_columns()
            self._rebuild(self._rows, selected, first)
            return True
        return False

    def _cells(self, cells: list[Cell]) -> list[Cell]:
        """The shown columns' cells, as the DataTable gets them (str wrapped when it goes in: rows
        compare as given, cheaply, every refresh)."""
        return [plain_cell(c) if isinstance(c, str) else c for c in (cells[i] for i in self._shown_index())]

    def _shown_index(self) -> list[int]:
        """Where each shown column's cell is in a row's cells (COLUMNS order)."""
        index = {key: i for i, (key, _) in enumerate(self.COLUMNS)}
        return [index[key] for key in self.shown_columns]

    def _rebuild(self, rows: list[Row], selected: str | None, first: int | None = None) -> None:
        self.clear()
        self._add(rows[:first], rows)
        wanted = [k for k, _ in rows[:first]]
        if selected in wanted:
            self.move_cursor(row=wanted.index(selected), animate=False)

    def _add(self, rows: list[Row], fit: list[Row]) -> None:
        """Add rows, with the columns as wide as the cells of `fit` (these rows and the ones
        that will follow them) need.

        The cells are one-line plain text: measured here by their length, which DataTable would
        do at the next idle for each cell as a renderable (a third of a 500-row list's cost).
        Sized for the rows that follow too, the columns do not widen when they come: what the
        first rows rendered stays valid (see _append)."""
        columns = list(self.columns.values())
        widths = [column.content_width for column in columns]
        shown = self._shown_index()
        for _, cells in fit:  # measured as given: wrapping each cell to measure it was half of this
            for i, j in enumerate(shown):
                cell = cells[j]
                widths[i] = max(widths[i], cell_len(cell.plain if isinstance(cell, Text) else cell))
        for key, cells in rows:
            self._new_rows.discard(self.add_row(*self._cells(cells), key=key))
        for column, width in zip(columns, widths, strict=True):
            column.content_width = width
        self._require_update_dimensions = True  # the table's size from those widths, at the next idle

    def _append(self, rows: list[Row]) -> None:
        """Add rows below the others, keeping what the rows above have rendered.

        DataTable keys its render caches on a counter that every add_row bumps: the rest of the
        first page, added just after the first frame, made every visible row render again at the
        next frame, which is the next key's when the user went to another tab meanwhile (back to
        the Runs tab took 2x as long, scripts/bench-tui). Rows added below change nothing drawn
        above unless a column widens, so then the counter is put back (the row offsets, cached on
        the counter alone, are dropped: they do change)."""
        count = self._update_count
        widths = [column.content_width for column in self.columns.values()]
        pending = bool(self._updated_cells) or bool(self._new_rows)
        self._add(rows, rows)
        if not pending and widths == [column.content_width for column in self.columns.values()]:
            self._update_count = count
            self._offset_cache.clear()

    def show(self, rows: list[Row], first: int | None = None) -> None:
        """Show these rows; `first`: when the table is built anew, only that many now (the rest
        come with the next call), in columns sized for them all."""
        old_rows, self._rows = self._rows, rows
        if not old_rows or any(len(a[1]) != len(b[1]) for a, b in zip(old_rows, rows, strict=False)):
            # Not laid out yet (filled in on_mount): fit the terminal's width, which the table spans,
            # so that the first Resize does not build all the rows a second time.
            if self._fit(self.size.width or self.app.size.width, first):
                return  # built anew with the first rows: the rest come with the next call
        wanted = [k for k, _ in rows]
        current = [k.value for k in self.rows]
        added: list[Row] = []
        if current != wanted:
            if not current or wanted[: len(current)] != current:
                # Order or membership changed: rebuild (rare: a new job, a filter).
                self._rebuild(rows, self.selected_key, first)
                return
            added = rows[len(current) :]  # more of the same list (the rest of the first page): added below
        before = dict(old_rows)
        for key, cells in rows[: len(current)]:
            if before.get(key) == cells:
                continue  # nothing changed in this row: not even a cell read (a tab switch costs nothing)
            for col, value in zip(self.shown_columns, self._cells(cells), strict=True):
                old = self.get_cell(key, col)
                if str(old) != str(value) or getattr(old, "style", None) != getattr(value, "style", None):
                    # Widened only for a wider value (RUNNING -> DONE (0)): for a narrower one DataTable
                    # measures every cell of the column again, per cell (500 rows, each "59s" -> "1m").
                    wider = cell_len(str(value)) > cell_len(str(old))
                    self.update_cell(key, col, value, update_width=wider)
        if added:
            self._append(added)

    @property
    def selected_key(self) -> str | None:
        if not self.row_count or self.cursor_row < 0:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:  # cursor outside the rows (table just emptied)
            return None


class RunsTable(LiveTable):
    """The runs list: a row per job, a sweep's points together under their run (the run's name on
    the first, a tree down the others, each point named by its variables' values), marked jobs
    with a dot (what the Metrics tab overlays)."""

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
    HIDE_ORDER = ("variables", "artifacts", "submitted", "workflow", "runner", "job", "duration")
    BINDINGS = [
        Binding("space", "mark", "Mark", show=False),
        Binding("u", "unmark_all", "Unmark all", show=False),
    ]

    @dataclass
    class MarkWanted(Message):
        """space on a row (`job_id`: mark it, or unmark it), or u (None: unmark every job)."""

        job_id: str | None

    def action_mark(self) -> None:
        if key := self.selected_key:
            self.post_message(self.MarkWanted(key))

    def action_unmark_all(self) -> None:
        self.post_message(self.MarkWanted(None))

    def show_jobs(
        self,
        lines: list[JobLine],
        now: float,
        first: int | None = None,
        marked: Collection[str] = (),
        sweeps: Iterable[list[str]] = (),
        labels: dict[str, str] | None = None,
    ) -> None:
        """`lines` in order; `sweeps`: each sweep's job ids, together in `lines` (app/views/overlay.py
        sweep_rows); `labels`: a point's variables' values."""
        tree = _sweep_tree(lines, sweeps, labels or {})
        rows: list[Row] = []
        for line in lines:
            j = line.job
            runner = ", ".join(line.runners) or "-"
            variables = line.variables_text
            run = tree.get(j.id) or j.run_name + (f" ({line.tag})" if line.tag else "")
            if marked:  # a column of marks: the runs' names stay aligned
                run = ("● " if j.id in marked else "  ") + run
            rows.append(
                (
                    j.id,
                    [
                        plain_cell(run, "bold" if j.id in marked else ""),
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
        self.show(rows, first)


def _sweep_tree(lines: list[JobLine], sweeps: Iterable[list[str]], labels: dict[str, str]) -> dict[str, str]:
    """A sweep's RUN cells: the run's name on its first point, then a tree, each point's label
    after it (`calm-heron-2 ┬ lr=0.001`, `             ├ lr=0.003`, `             └ lr=0.01`)."""
    by_id = {line.job.id: line for line in lines}
    cells: dict[str, str] = {}
    for ids in sweeps:
        if not ids or ids[0] not in by_id:
            continue
        head = by_id[ids[0]]
        name = head.job.run_name + (f" ({head.tag})" if head.tag else "")
        pad = " " * cell_len(name)
        for i, job_id in enumerate(ids):
            branch = "┬" if i == 0 else "└" if i == len(ids) - 1 else "├"
            cells[job_id] = f"{name if i == 0 else pad} {branch} {labels.get(job_id, '')}".rstrip()
    return cells


class RunnersTable(LiveTable):
    COLUMNS = (
        ("name", "NAME"),
        ("address", "ADDRESS"),
        ("state", "STATE"),
        ("gpus", "GPUS FREE"),
        ("gpu_util", "GPU UTIL"),
        ("jobs", "JOBS"),
        ("executor", "EXECUTOR"),
        ("source", "SOURCE"),
        ("seen", "LAST SEEN"),
    )
    HIDE_ORDER = ("source", "executor", "seen", "address", "gpu_util", "jobs")

    def show_runners(self, runners: list[RunnerView], now: float) -> None:
        rows: list[Row] = []
        for v in runners:
            # The same row as `app headless runners` (GPU UTIL after GPUS FREE), its state in colour.
            cells: list[Cell] = [*runner_cells(v, now)]
            cells.insert(4, gpu_util_text(v))
            cells[2] = status_cell(v.state)
            rows.append((v.name, cells))
        self.show(rows)
