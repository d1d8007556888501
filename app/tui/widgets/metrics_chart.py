"""A job's metrics: one chart per family, a picker, log scale and smoothing.

Families (`family`): losses share a chart (train and val side by side); throughput,
learning rate and each GPU figure get their own, so `tokens_per_s` at 13,000 does
not flatten `train_loss` at 2.5 into the x-axis. The picker (space) chooses which
metrics show; `l` toggles a log y-axis, `m` cycles the smoothing (an exponential
moving average, as TensorBoard's slider).

The ticks are ours, not plotext's: steps are whole numbers (plotext put 37.2 under a
step axis), and a log axis is labelled with values (0.1, 0.5, 1), not with the
exponents plotext is given (-1.69).

The plots (textual-plotext) are imported and mounted when the chart is first shown:
the Metrics tab is not on the first screen, and plotext's import is ~60 ms of
start-up. Until then the chart keeps what it was last asked to draw.
"""

import math
import re
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Label, SelectionList

from lanpool.app.tui.widgets.panes import memo_lines

if TYPE_CHECKING:  # imported when first shown (above)
    from textual_plotext import PlotextPlot

MAX_CHARTS = 4  # more charts than this on one screen are too flat to read; the picker shows the rest
SMOOTHING = (0.0, 0.6, 0.9)
_GPU = re.compile(r"^gpu\d*[_.]?(.*)$")
_THROUGHPUT = ("per_s", "per_sec", "/s", "throughput", "it_s", "samples_s", "tokens_s")

Series = dict[str, tuple[list[float], list[float]]]


def family(name: str) -> str:
    """The chart a metric goes on: names alike in scale share one."""
    low = name.lower()
    gpu = _GPU.match(low)
    if gpu:  # gpu0_util and gpu1_util together, memory and power apart (other units)
        return f"gpu {gpu.group(1) or 'figures'}"
    if "loss" in low:
        return "loss"
    if low in ("lr", "learning_rate") or low.startswith(("lr", "lr-")) or "learning_rate" in low:
        return "learning rate"
    if any(t in low for t in _THROUGHPUT):
        return "throughput"
    return name


def families(names: list[str]) -> dict[str, list[str]]:
    """{family: names}, losses first, then by name."""
    out: dict[str, list[str]] = {}
    for name in sorted(names):
        out.setdefault(family(name), []).append(name)
    return dict(sorted(out.items(), key=lambda kv: (kv[0] != "loss", kv[0])))


def smooth(values: list[float], weight: float) -> list[float]:
    """Exponential moving average, debiased (TensorBoard's), so the first points are not pulled to 0."""
    if weight <= 0:
        return values
    out, last, n = [], 0.0, 0
    for v in values:
        n += 1
        last = last * weight + (1 - weight) * v
        out.append(last / (1 - weight**n))
    return out


def step_ticks(lo: float, hi: float, most: int = 6) -> list[int]:
    """Whole-number ticks over [lo, hi], at most `most`, on a 1-2-5 spacing."""
    first, last = math.floor(lo), math.ceil(hi)
    wanted = max(last - first, 1) / max(most - 1, 1)
    step = 1
    for scale in (10**k for k in range(16)):
        step = next((m * scale for m in (1, 2, 5) if m * scale >= wanted), 0)
        if step:
            break
    return list(range(math.ceil(first / step) * step, last + 1, step))


def log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Ticks for a log10 axis over exponents [lo, hi]: where they go (exponents) and their labels
    (values): each power of ten, and its 2x and 5x where the axis spans less than two decades."""
    marks = (1, 2, 5) if hi - lo < 2 else (1,)
    ticks, labels = [], []
    for exponent in range(math.floor(lo), math.ceil(hi) + 1):
        for mark in marks:
            at = exponent + math.log10(mark)
            if lo - 1e-9 <= at <= hi + 1e-9:
                ticks.append(at)
                labels.append(f"{mark * 10.0**exponent:g}")
    if not ticks:  # less than a factor of two between the ends: the ends themselves
        ticks, labels = [lo, hi], [f"{10**lo:.3g}", f"{10**hi:.3g}"]
    return ticks, labels


class Picker(SelectionList[str]):
    """The metric picker, its lines drawn again only when what they show changed.

    A switch to Metrics drew all of them anew (~9 ms of the key's frame while following a fast
    job, scripts/bench-tui BENCH_TRACE): leaving the tab moved the focus away, which restyles the
    picker and drops its render cache. The frame of a switch shows it unfocused (the focus comes
    after that frame), the next focused: both are kept."""

    def render_lines(self, crop: Region) -> list[Strip]:
        state = (
            self.scroll_offset,
            self.has_focus,
            self.mouse_hover,
            self.highlighted,
            self._mouse_hovering_over,
            self.disabled,
            self.app.theme,
            tuple((str(o.prompt), o.id, o.disabled) for o in self.options),
            frozenset(self.selected),
        )
        return memo_lines(self, crop, super().render_lines, state, keep=2)


class MetricsChart(Widget):
    DEFAULT_CSS = """
    MetricsChart {
        width: 1fr;
        height: 1fr;
    }
    MetricsChart #metric-picker {
        width: 26;
        height: 1fr;
    }
    MetricsChart #plots {
        width: 1fr;
        height: 1fr;
    }
    MetricsChart #plots > * {
        height: 1fr;
    }
    """
    BINDINGS = [
        Binding("l", "log_scale", "Log scale", show=False),
        Binding("m", "smoothing", "Smoothing", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown = False
        self._first_pending = False  # shown, the plots not drawn yet (on_show)
        self._wanted: tuple[Series, str] = ({}, "no job selected")
        self._hidden: set[str] = set()  # unticked in the picker (kept across jobs: the same names recur)
        self.log_scale = False
        self.smoothing = 0.0
        self._names: list[str] = []  # in the picker

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Picker(id="metric-picker")
            with Vertical(id="plots"):
                yield Label(self._wanted[1], id="plots-title")  # until the plots are drawn

    def on_show(self) -> None:
        if not self._shown:
            self._shown = True
            # The first show imports plotext and builds its canvas, ~150 ms on a 2-core machine:
            # the switch's frame shows the title (#plots-title, from compose), the plots come after.
            self._first_pending = True
            self.call_after_refresh(self._first_draw)

    def _first_draw(self) -> None:
        if self._first_pending:  # else drawn meanwhile (new points, a key)
            self._draw()

    def show_series(self, series: Series, title: str) -> None:
        # The same points again (a switch to the tab, the tick with nothing new): the plots
        # already show them, and drawing them anew is plotext's whole canvas again.
        same = (series, title) == self._wanted
        self._wanted = (series, title)
        if not self._shown and not same:
            self.query_one("#plots-title", Label).update(title)
        if self._shown and not same:
            self._draw()

    def action_log_scale(self) -> None:
        self.log_scale = not self.log_scale
        self._draw()

    def action_smoothing(self) -> None:
        self.smoothing = SMOOTHING[(SMOOTHING.index(self.smoothing) + 1) % len(SMOOTHING)]
        self._draw()

    def on_selection_list_selection_toggled(self, event: SelectionList.SelectionToggled[str]) -> None:
        name = str(event.selection.value)
        self._hidden.symmetric_difference_update({name})
        self._draw()

    def _sync_picker(self, names: list[str]) -> None:
        picker = self.query_one("#metric-picker", SelectionList)
        if self._names == names:
            return
        self._names = names
        highlighted = picker.highlighted
        picker.clear_options()
        picker.add_options([(n, n, n not in self._hidden) for n in names])
        if names:
            picker.highlighted = min(highlighted or 0, len(names) - 1)

    def _draw(self) -> None:
        from textual_plotext import PlotextPlot

        self._first_pending = False
        series, title = self._wanted
        self._sync_picker(sorted(series))
        groups = {
            f: shown
            for f, names in families(list(series)).items()
            if (shown := [n for n in names if n not in self._hidden])
        }
        box = self.query_one("#plots", Vertical)
        plots = list(box.query(PlotextPlot))
        want = max(1, min(len(groups), MAX_CHARTS))
        if len(plots) != want:
            box.remove_children()
            plots = [cached_plot_class()() for _ in range(want)]
            box.mount_all(plots)
        extras = []
        if self.log_scale:
            extras.append("log y")
        if self.smoothing:
            extras.append(f"smoothed {self.smoothing}")
        items = list(groups.items())[:want] or [("", [])]
        for i, (plot, (name, names)) in enumerate(zip(plots, items, strict=False)):
            head = title if i == 0 else ""
            label = " · ".join(p for p in (head, name, *extras) if p)
            hidden = len(groups) - want if i == 0 and len(groups) > want else 0
            self._plot(plot, label + (f" (+{hidden} charts: untick some)" if hidden else ""), names, series)

    def _plot(self, plot: "PlotextPlot", title: str, names: list[str], series: Series) -> None:
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(title)
        plt.xlabel("step")
        xs: list[float] = []
        ys: list[float] = []
        for name in names:
            steps, values = series[name]
            values = smooth(values, self.smoothing)
            if self.log_scale:  # plotext's log axis needs positive values: the others are left out
                kept = [(s, v) for s, v in zip(steps, values, strict=True) if v > 0]
                steps, values = [s for s, _ in kept], [math.log10(v) for _, v in kept]
            xs += steps
            ys += values
            if len(steps) == 1:
                plt.scatter(steps, values, label=name)
            elif steps:
                plt.plot(steps, values, label=name)
        if xs:
            plt.xticks([float(t) for t in step_ticks(min(xs), max(xs))])
        if self.log_scale and ys:
            plt.yticks(*log_ticks(min(ys), max(ys)))
        getattr(plot, "redraw", plot.refresh)()


_CACHED_PLOT: "type[PlotextPlot] | None" = None


def cached_plot_class() -> "type[PlotextPlot]":
    """PlotextPlot that builds its chart again only when it was drawn anew, resized or the theme
    changed: plotext draws the whole canvas in Python on every render, and a render came with
    every switch to the Metrics tab, data changed or not (scripts/bench-tui)."""
    global _CACHED_PLOT
    if _CACHED_PLOT is None:
        from textual.app import RenderResult
        from textual_plotext import PlotextPlot

        class CachedPlot(PlotextPlot):
            drawn = 0
            _key: object = None
            _built: RenderResult = ""

            def redraw(self) -> None:
                self.drawn += 1
                self.refresh()

            def render(self) -> RenderResult:
                key = (self.size, self.app.theme, self.theme, self.drawn)
                if key != self._key:
                    self._key, self._built = key, super().render()
                return self._built

        _CACHED_PLOT = CachedPlot
    return _CACHED_PLOT
