"""One metric across several jobs (a sweep's points, or the jobs marked in Runs): a curve per
job, one colour each, a legend naming each job by its variables' values, and under it a table of
the jobs, best first, whose first column is each curve's colour.

The widget draws what it is given (`OverlayData`, built by app/tui/panes/metrics.py from
app/views/overlay.py: every string in it is terminal-safe and clipped already) and says which
metric the user asked for (`MetricWanted`: `o` / `O` cycle, or a pick in the list on the left);
the pane owns the choice. The plot (plotext) is imported and mounted when first drawn on screen,
as the single-job chart's (app/tui/widgets/metrics_chart.py).
"""

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Label, SelectionList

from lanpool.app.tui.widgets.metrics_chart import SMOOTHING, Picker, cached_plot_class, log_ticks, smooth, step_ticks
from lanpool.app.tui.widgets.tables import LiveTable, Row
from lanpool.app.views.overlay import LEGEND_WIDTH, NAME_WIDTH, display

if TYPE_CHECKING:
    from textual_plotext import PlotextPlot

# One colour per curve (xterm-256 codes, told apart on dark and light themes); as many as the
# chart holds (app/views/overlay.py MAX_SERIES).
PALETTE = (39, 208, 40, 198, 141, 226, 51, 166, 118, 201, 33, 250)
LEGEND_ROOM = 8  # rows of a plot besides its legend's for the legend to be drawn (axes, title, the curves)
TITLE_ROOM = 14  # columns of a plot besides its canvas: the y axis's labels (0.0345┤) and the frame


@dataclass
class Curve:
    label: str  # the job's legend entry: its variables' values
    colour: int
    steps: list[float]
    values: list[float]


@dataclass
class OverlayData:
    """What the overlay shows: the title, the metric chosen (raw name: the pane's key) and every
    metric there is, the curves, the table's rows (best first) and a note (what was left out)."""

    title: str = "no jobs"
    metric: str | None = None
    metrics: list[str] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    note: str = ""


class OverlayTable(LiveTable):
    COLUMNS = (
        ("colour", " "),
        ("rank", "#"),
        ("point", "VARIABLES"),
        ("job", "JOB"),
        ("status", "STATUS"),
        ("best", "BEST"),
        ("step", "AT STEP"),
        ("last", "LAST"),
    )
    HIDE_ORDER = ("job", "last", "step", "status")


class OverlayChart(Widget):
    DEFAULT_CSS = """
    OverlayChart {
        width: 1fr;
        height: 1fr;
    }
    OverlayChart #overlay-picker {
        width: 26;
        height: 1fr;
    }
    OverlayChart #overlay-main {
        width: 1fr;
        height: 1fr;
    }
    OverlayChart #overlay-plot {
        height: 1fr;
    }
    OverlayChart #overlay-plot > * {
        height: 1fr;
    }
    OverlayChart #overlay-note {
        height: 1;
        color: $text-muted;
    }
    OverlayChart #overlay-table {
        height: auto;
        max-height: 40%;
    }
    """
    BINDINGS = [
        Binding("o", "metric(1)", "Next metric", show=False),
        Binding("O", "metric(-1)", "Previous metric", show=False),
        Binding("l", "log_scale", "Log scale", show=False),
        Binding("m", "smoothing", "Smoothing", show=False),
    ]

    @dataclass
    class MetricWanted(Message):
        """`step`: the next (1) or previous (-1) metric; `name`: that one (picked in the list)."""

        step: int = 0
        name: str | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data = OverlayData()
        self.log_scale = False
        self.smoothing = 0.0
        self._on_screen = False  # shown once: the plot may be built (on_show)
        self._picker_shows: tuple[tuple[str, ...], str | None] | None = None

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Picker(id="overlay-picker")
            with Vertical(id="overlay-main"):
                with Vertical(id="overlay-plot"):
                    yield Label(self.data.title, id="overlay-title")  # until the plot is drawn
                yield Label("", id="overlay-note")
                yield OverlayTable(id="overlay-table")

    def on_show(self) -> None:
        if not self._on_screen:
            self._on_screen = True
            self.call_after_refresh(self._draw)

    def show(self, data: OverlayData) -> None:
        self.data = data
        self._sync_picker()
        self.query_one("#overlay-note", Label).update(data.note)
        self.query_one(OverlayTable).show(data.rows)
        if self._on_screen:
            self._draw()
        else:
            self.query_one("#overlay-title", Label).update(data.title)

    def action_metric(self, step: int) -> None:
        self.post_message(self.MetricWanted(step=step))

    def action_log_scale(self) -> None:
        self.log_scale = not self.log_scale
        self._draw()

    def action_smoothing(self) -> None:
        self.smoothing = SMOOTHING[(SMOOTHING.index(self.smoothing) + 1) % len(SMOOTHING)]
        self._draw()

    def on_selection_list_selection_toggled(self, event: SelectionList.SelectionToggled[str]) -> None:
        # The list is a choice of one: a pick is the metric wanted (the list is set again to show it).
        event.stop()
        self._picker_shows = None
        self.post_message(self.MetricWanted(name=str(event.selection.value)))

    def _sync_picker(self) -> None:
        shows = (tuple(self.data.metrics), self.data.metric)
        if shows == self._picker_shows:
            return
        self._picker_shows = shows
        picker = self.query_one("#overlay-picker", Picker)
        highlighted = picker.highlighted
        picker.clear_options()
        picker.add_options([(display(n, NAME_WIDTH), n, n == self.data.metric) for n in self.data.metrics])
        if self.data.metrics:
            picker.highlighted = min(highlighted or 0, len(self.data.metrics) - 1)

    def _draw(self) -> None:
        if not self._on_screen or not self.is_attached:
            return
        box = self.query_one("#overlay-plot", Vertical)
        plot_class = cached_plot_class()
        plots = list(box.query(plot_class))
        if not plots:
            box.remove_children()
            plots = [plot_class()]
            box.mount_all(plots)
        extras = [
            e for e in ("log y" if self.log_scale else "", f"smoothed {self.smoothing}" if self.smoothing else "") if e
        ]
        self._plot(plots[0], " · ".join([self.data.title, *extras]))

    def _plot(self, plot: "PlotextPlot", title: str) -> None:
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        box = self.query_one("#overlay-plot").size  # the plot's own size is 0 until laid out (its first draw)
        width, height = plot.size.width or box.width, plot.size.height or box.height
        plt.title(display(title, max(width - TITLE_ROOM, 20)))  # plotext leaves out one wider than its canvas
        # A legend covering the curves is worse than none: on a short plot the table's colours are it.
        legend = height >= 2 * len(self.data.curves) + LEGEND_ROOM
        plt.xlabel("step")
        xs: list[float] = []
        ys: list[float] = []
        for curve in self.data.curves:
            steps, values = curve.steps, smooth(curve.values, self.smoothing)
            if self.log_scale:  # plotext's log axis needs positive values: the others are left out
                kept = [(s, v) for s, v in zip(steps, values, strict=True) if v > 0]
                steps, values = [s for s, _ in kept], [math.log10(v) for _, v in kept]
            xs += steps
            ys += values
            label = display(curve.label, LEGEND_WIDTH) if legend else None
            if len(steps) == 1:
                plt.scatter(steps, values, label=label, color=curve.colour)
            elif steps:
                plt.plot(steps, values, label=label, color=curve.colour)
        if xs:
            plt.xticks([float(t) for t in step_ticks(min(xs), max(xs))])
        if self.log_scale and ys:
            plt.yticks(*log_ticks(min(ys), max(ys)))
        getattr(plot, "redraw", plot.refresh)()
