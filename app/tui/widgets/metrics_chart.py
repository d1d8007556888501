"""Loss curves: every metric series of a job against the step, train and val together."""

from textual_plotext import PlotextPlot

MAX_SERIES = 6  # more curves than this on one chart is noise; the rest are listed by name


def chart_names(series: dict) -> list[str]:
    """Losses first (train and val side by side), then the other metrics."""
    names = sorted(series, key=lambda n: ("loss" not in n, n))
    return names[:MAX_SERIES]


class MetricsChart(PlotextPlot):
    def on_mount(self) -> None:
        self.show_series({}, "no job selected")

    def show_series(self, series: dict[str, tuple[list[float], list[float]]], title: str) -> None:
        plt = self.plt
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
        self.refresh()
