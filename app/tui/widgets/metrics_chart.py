"""Loss curves: every metric series of a job against the step, train and val together.

The plot (textual-plotext) is imported and mounted when the chart is first shown:
the Metrics tab is not on the first screen, and plotext's import is ~60 ms of
start-up. Until then the chart keeps what it was last asked to draw.
"""

from typing import TYPE_CHECKING, Any

from textual.widget import Widget

if TYPE_CHECKING:  # imported when first shown (above)
    from textual_plotext import PlotextPlot

MAX_SERIES = 6  # more curves than this on one chart is noise; the rest are listed by name


def chart_names(series: dict) -> list[str]:
    """Losses first (train and val side by side), then the other metrics."""
    names = sorted(series, key=lambda n: ("loss" not in n, n))
    return names[:MAX_SERIES]


class MetricsChart(Widget):
    DEFAULT_CSS = """
    MetricsChart {
        width: 1fr;
        height: 1fr;
    }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._plot: PlotextPlot | None = None  # once shown
        self._wanted: tuple[dict, str] = ({}, "no job selected")

    def on_show(self) -> None:
        if self._plot is None:
            from textual_plotext import PlotextPlot

            plot = self._plot = PlotextPlot()
            self.mount(plot)
            self._draw()

    def show_series(self, series: dict[str, tuple[list[float], list[float]]], title: str) -> None:
        self._wanted = (series, title)
        if self._plot is not None:
            self._draw()

    def _draw(self) -> None:
        series, title = self._wanted
        assert self._plot is not None, "drawn once shown"
        plt = self._plot.plt
        plt.clear_data()
        plt.clear_figure()
        names = chart_names(series)
        hidden = len(series) - len(names)
        plt.title(title + (f" (+{hidden} more metrics: `app headless metrics`)" if hidden > 0 else ""))
        plt.xlabel("step")
        for name in names:
            steps, values = series[name]
            if len(steps) == 1:
                plt.scatter(steps, values, label=name)
            else:
                plt.plot(steps, values, label=name)
        self._plot.refresh()
