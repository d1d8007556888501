"""The TUI's habits and small-terminal fit (pilot, on the snapshot tests' fixed store):
k9s keys on tables, columns hidden by priority at 80 columns, log timestamps, metric families.
The part with real agents and the CLI (integration); the rest: tests/unit/test_tui_keys.py."""

import asyncio
import json

import pytest

pytest.importorskip("textual")


from textual_plotext import PlotextPlot  # noqa: E402

from lanpool.app.tui.widgets.log_view import LogView  # noqa: E402
from lanpool.app.tui.widgets.metrics_chart import MetricsChart  # noqa: E402
from lanpool.app.tui.widgets.tables import RunnersTable, RunsTable  # noqa: E402
from lanpool.app.views.overview import LogLine  # noqa: E402
from tests.integration import test_tui_snapshots as snaps  # noqa: E402
from tests.integration.test_tui_snapshots import DONE_JOB, NOW, _logs_of_done_job, _on_done_job, _until

screen_app = pytest.fixture(snaps.screen_app.__wrapped__)  # the snapshots' fixed store and clock


def run(app, size, body):
    async def go():
        async with app.run_test(size=size, notifications=False) as pilot:
            await pilot.pause(0.2)
            await body(pilot)

    asyncio.run(go())


def test_table_keys_jk_gG_home_end(screen_app):
    async def body(pilot):
        table = pilot.app.query_one(RunsTable)
        assert table.cursor_row == 0
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        await pilot.press("G")
        assert table.cursor_row == table.row_count - 1
        await pilot.press("g")
        assert table.cursor_row == 0
        await pilot.press("end")
        assert table.cursor_row == table.row_count - 1
        await pilot.press("home")
        assert table.cursor_row == 0

    run(screen_app, (120, 30), body)


def test_runners_gpu_util_column_hides_by_priority(screen_app):
    async def body(pilot):
        await pilot.press("2")
        table = pilot.app.query_one(RunnersTable)
        cells = {
            row.value: str(table.get_cell(row, "gpu_util")) for row in table.rows if "gpu_util" in table.shown_columns
        }
        assert cells == {"gpu-box-1": "37% 0%", "gpu-box-2": "-", "laptop": "-"}  # per GPU; "-": none reported
        header = [str(c.label) for c in table.columns.values()]
        assert header.index("GPU UTIL") == header.index("GPUS FREE") + 1  # as in `app headless runners`
        await pilot.resize_terminal(50, 24)  # too narrow for it: hidden after LAST SEEN and ADDRESS, before JOBS
        await pilot.pause(0.2)
        assert "address" not in table.shown_columns and "jobs" in table.shown_columns
        assert "gpu_util" not in table.shown_columns and {"name", "state"} <= set(table.shown_columns)
        await pilot.resize_terminal(140, 30)
        await pilot.pause(0.2)
        assert "gpu_util" in table.shown_columns

    run(screen_app, (140, 30), body)


@pytest.mark.parametrize("width", [80, 60, 40])
def test_narrow_keeps_status_column(screen_app, width):
    async def body(pilot):
        table = pilot.app.query_one(RunsTable)
        assert "status" in table.shown_columns and "run" in table.shown_columns
        assert len(table.shown_columns) < len(table.COLUMNS)  # something had to go
        # The STATUS cells really are on screen (inside the table's width), not past its edge.
        status_x = sum(c.get_render_width(table) for c in list(table.columns.values())[:-1])
        assert status_x < table.size.width
        await pilot.resize_terminal(200, 30)
        await pilot.pause(0.2)
        assert table.shown_columns == [k for k, _ in RunsTable.COLUMNS]  # wide again: all back

    run(screen_app, (width, 24), body)


def test_unchanged_rows_are_not_touched(screen_app, monkeypatch):
    async def body(pilot):
        table = pilot.app.query_one(RunsTable)
        calls = []
        monkeypatch.setattr(table, "update_cell", lambda *a, **k: calls.append(a))
        for _ in range(3):
            pilot.app.action_tab("runners")
            pilot.app.action_tab("runs")
        assert calls == []  # the clock is fixed: nothing changed, nothing re-rendered
        pilot.app.ctl.store.set_job_status("7c41d09e2f18", "DONE", finished_at=NOW - 10, exit_code=0, synced=1)
        pilot.app.runs.refresh_runs()
        assert {a[0] for a in calls} == {"7c41d09e2f18"}  # only the changed row

    run(screen_app, (140, 30), body)


def test_back_to_the_runs_tab_renders_no_cell_again(screen_app, monkeypatch):
    """Going back to Runs shows the table from its render caches (110-330 ms, and
    more with 10k runs, went into re-rendering every visible cell after each tab switch)."""

    async def body(pilot):
        table = pilot.app.query_one(RunsTable)
        rendered = []
        render_cell = type(table)._render_cell
        monkeypatch.setattr(
            type(table), "_render_cell", lambda self, *a, **k: (rendered.append(a), render_cell(self, *a, **k))[1]
        )
        await pilot.pause(0.2)
        before = pilot.app.export_screenshot()
        await pilot.press("2")  # the table's first blur, then back: the first return is what a user meets
        await pilot.pause(0.2)
        rendered.clear()
        await pilot.press("1")
        await pilot.pause(0.3)
        assert pilot.app.query_one("#tabs").active == "runs" and table.row_count > 3
        assert rendered == []
        assert pilot.app.export_screenshot() == before  # the same screen (the focused cursor's colours too)
        pilot.app.theme = "textual-light" if pilot.app.theme != "textual-light" else "nord"
        await pilot.pause(0.3)
        assert rendered, "a new theme renders every cell again"
        rendered.clear()
        pilot.app.ctl.store.set_job_status("7c41d09e2f18", "DONE", finished_at=NOW - 10, exit_code=0, synced=1)
        pilot.app.runs.refresh_runs()  # a real change still shows
        await pilot.pause(0.3)
        assert rendered and "DONE (0)" in str(table.get_cell("7c41d09e2f18", "status"))

    run(screen_app, (140, 30), body)


def test_log_timestamps_toggle(screen_app):
    store = screen_app.ctl.store
    store.add_log_chunks([(DONE_JOB, 0, 100, 1, "out", b"stamped line\n", NOW - 5)])

    async def body(pilot):
        await _on_done_job(pilot)
        await pilot.press("enter")
        view = pilot.app.query_one(LogView)
        await _until(pilot, lambda: view.lines and view.lines[-1].text == "stamped line")
        assert view.lines[-1].at == NOW - 5
        assert view.lines[0].at is None  # stored without a time (an older agent)
        plain = "".join(s.text for s in view.render_line(view.size.height - 1))
        assert plain.startswith("stamped line")
        await pilot.press("t")
        from datetime import datetime

        want = datetime.fromtimestamp(NOW - 5).strftime("%H:%M:%S.%f")[:-3]
        last = "".join(s.text for s in view.render_line(view.size.height - 1))
        assert last.startswith(want + " stamped line")
        view.scroll_home(animate=False, immediate=True)
        first = "".join(s.text for s in view.render_line(0))
        assert first.startswith("-" + " " * 12)
        await pilot.press("t")
        assert not view.timestamps

    run(screen_app, (80, 24), body)


def test_metrics_chart_per_family_picker_log_smooth(screen_app):
    points = [{"step": s, "name": "tokens_per_s", "value": 13000.0 + s} for s in range(0, 150, 5)]
    points += [{"step": s, "name": "gpu0_util", "value": 90.0} for s in range(0, 150, 50)]
    data = "".join(json.dumps(p) + "\n" for p in points).encode()
    screen_app.ctl.store.add_log_chunks([(DONE_JOB, 0, 200, len(points), "met", data)])

    async def body(pilot):
        await _on_done_job(pilot)
        await pilot.press("4")
        chart = pilot.app.query_one(MetricsChart)
        await _until(pilot, lambda: len(chart.query(PlotextPlot)) == 3)  # loss, throughput, gpu util
        picker = chart.query_one("#metric-picker")
        assert pilot.app.focused is picker
        assert chart._names == ["gpu0_util", "tokens_per_s", "train_loss", "val_loss"]
        await pilot.press("space")  # untick gpu0_util (highlighted first)
        await _until(pilot, lambda: len(chart.query(PlotextPlot)) == 2)
        assert "gpu0_util" in chart._hidden
        await pilot.press("l", "m")
        assert chart.log_scale and chart.smoothing == 0.6
        await pilot.press("space")
        await _until(pilot, lambda: len(chart.query(PlotextPlot)) == 3)

    run(screen_app, (80, 24), body)


def test_cells_show_brackets_as_typed(screen_app, monkeypatch):
    """A run name or a variable holding "[...]" is shown as typed, not read as markup (that it
    was parsed again on every measure and render was also most of the runs list's first frame)."""

    async def body(pilot):
        table = _table_only(pilot, monkeypatch)  # not replaced by the store's rows at the next tick
        cells = ["[red]boom[/red]", "abc", "train", "x=[1,2] [b]", "gpu1", "DONE", "1m", "2s", "-"]
        table.show([("k1", cells)])
        await pilot.pause(0.2)
        assert str(table.get_cell("k1", "run")) == "[red]boom[/red]"
        row = "".join(s.text for s in table.render_line(1))  # line 0 is the header
        assert "[red]boom[/red]" in row and "x=[1,2] [b]" in row

    run(screen_app, (220, 30), body)  # wide: every column shown


def test_selecting_a_long_log_reads_its_tail_then_pages(screen_app):
    """Selecting a job reads only the last LOG_PAGE lines of its log (not the whole window: the
    key waited for it); scrolling to the top pages the older ones in, in order."""
    from lanpool.app.tui.panes.logs import LOG_PAGE

    total = 2 * LOG_PAGE + 500
    store = screen_app.ctl.store
    base = 10_000  # after the fixture's own lines
    store.add_log_chunks(
        [
            (DONE_JOB, 0, base + i, 100, "out", "".join(f"long-{i + k}\n" for k in range(100)).encode(), NOW)
            for i in range(0, total, 100)
        ]
    )

    async def body(pilot):
        await _on_done_job(pilot)
        await pilot.press("enter")
        view = pilot.app.query_one(LogView)
        await _until(pilot, lambda: view.lines and view.lines[-1].text == f"long-{total - 1}")
        assert len(view.lines) == LOG_PAGE and not view.at_start
        assert view.lines[0].text == f"long-{total - LOG_PAGE}"
        await pilot.press("g")
        await _until(pilot, lambda: len(view.lines) == 2 * LOG_PAGE)
        texts = [line.text for line in view.lines]
        assert texts == [f"long-{i}" for i in range(total - 2 * LOG_PAGE, total)]

    run(screen_app, (120, 30), body)


def test_more_of_the_same_list_adds_rows_without_a_rebuild(screen_app, monkeypatch):
    """The first frame gets the newest RUNS_FIRST rows and the rest come just after it: those are
    added to the table, not a rebuild of every row (each row added is measured cell by cell)."""

    def row(i: int) -> tuple[str, list]:
        return (f"k{i}", [f"run-{i}", "abc", "train", "", "gpu1", "DONE", "1m", "2s", "-"])

    async def body(pilot):
        table = pilot.app.query_one(RunsTable)
        cleared = []
        clear = type(table).clear
        monkeypatch.setattr(type(table), "clear", lambda self, *a, **k: (cleared.append(1), clear(self, *a, **k))[1])
        table.show([row(i) for i in range(3)])
        assert len(cleared) == 1  # other rows than before: rebuilt
        table.show([row(i) for i in range(8)])
        assert len(cleared) == 1 and [k.value for k in table.rows] == [f"k{i}" for i in range(8)]
        table.show([row(i) for i in reversed(range(8))])  # another order: rebuilt
        assert len(cleared) == 2 and [k.value for k in table.rows] == [f"k{i}" for i in reversed(range(8))]

    run(screen_app, (140, 30), body)


async def _logs_and_back_to_metrics(pilot, times: int) -> None:
    """Switch to the Logs tab and back to Metrics `times` times, each switch given its frame."""
    for _ in range(times):
        await pilot.press("3")
        await pilot.pause(0.1)
        await pilot.press("4")
        await pilot.pause(0.2)


def test_back_to_metrics_builds_no_chart_again(screen_app, monkeypatch):
    """Switching back to Metrics with no new points shows the charts as built (plotext draws its
    whole canvas in Python: the key -> frame); new options or points build them again."""
    built = []
    render = PlotextPlot.render
    monkeypatch.setattr(PlotextPlot, "render", lambda self: (built.append(1), render(self))[1])

    async def body(pilot):
        await _on_done_job(pilot)
        await pilot.press("4")
        chart = pilot.app.query_one(MetricsChart)
        await _until(pilot, lambda: chart.query(PlotextPlot) and built)
        await pilot.pause(0.3)
        before = len(built)
        await _logs_and_back_to_metrics(pilot, 3)
        assert pilot.app.query_one("#tabs").active == "metrics"
        assert len(built) == before
        await pilot.press("l")  # log scale: drawn anew
        await _until(pilot, lambda: len(built) > before)

    run(screen_app, (120, 30), body)


def test_back_to_metrics_draws_no_picker_line_again(screen_app, monkeypatch):
    """The metric picker's lines come from its memo on a switch back to Metrics (unfocused for the
    switch's frame, then focused); a toggle or a highlight moved draws them anew, and shows it."""
    from textual.widgets import SelectionList

    drawn: list[int] = []
    render_line = SelectionList.render_line
    monkeypatch.setattr(SelectionList, "render_line", lambda self, y: (drawn.append(y), render_line(self, y))[1])

    async def body(pilot):
        await _on_done_job(pilot)
        await pilot.press("4")
        chart = pilot.app.query_one(MetricsChart)
        picker = chart.query_one("#metric-picker", SelectionList)
        await _until(pilot, lambda: chart.query(PlotextPlot) and pilot.app.focused is picker)
        await _logs_and_back_to_metrics(pilot, 2)  # both states of the switch drawn once
        before = len(drawn)
        await _logs_and_back_to_metrics(pilot, 3)
        assert pilot.app.focused is picker and len(drawn) == before

        def shown() -> list:
            # the box's X stays, its style tells ticked from unticked: segments with their styles
            return [list(line) for line in picker.render_lines(picker.size.region)]

        ticked = shown()
        first = picker.get_option_at_index(0).value
        await pilot.press("space")  # untick the highlighted metric: its box must show it
        await _until(pilot, lambda: len(drawn) > before and first not in picker.selected)
        await pilot.pause(0.1)
        assert shown() != ticked
        before = len(drawn)
        await pilot.press("down")  # another highlighted row: drawn anew
        await _until(pilot, lambda: len(drawn) > before)

    run(screen_app, (120, 30), body)


def _row(i: int, name: str = "") -> tuple[str, list]:
    return (f"k{i}", [name or f"run-{i}", "abc", "train", "", "gpu1", "DONE", "1m", "2s", "-"])


def _table_only(pilot, monkeypatch) -> RunsTable:
    """The Runs table, left to the test's rows: the app neither refreshes it nor opens its rows' jobs."""
    monkeypatch.setattr(pilot.app.runs, "refresh_runs", lambda *a, **k: None)
    monkeypatch.setattr(pilot.app, "select_job", lambda job_id: None)
    return pilot.app.query_one(RunsTable)


def _count_renders(table, monkeypatch) -> list:
    """The (row, column) of each cell the table renders from now on (not from its caches)."""
    rendered: list = []
    render_cell = type(table)._render_cell
    monkeypatch.setattr(
        type(table), "_render_cell", lambda self, *a, **k: (rendered.append(a[:2]), render_cell(self, *a, **k))[1]
    )
    return rendered


def test_the_rest_of_the_list_added_while_on_another_tab_renders_no_shown_row_again(screen_app, monkeypatch):
    """The first frame's rows are drawn in columns sized for the whole list, so the rest, added
    just after (while the user may be on another tab already), leaves them drawn: going back to
    Runs re-renders none of them (110 ms instead of 50 ms in scripts/bench-tui)."""
    rows = [_row(i, "a-much-longer-run-name-77 (v12)" if i == 15 else "") for i in range(20)]

    async def body(pilot):
        table = _table_only(pilot, monkeypatch)
        table.show(rows, first=5)
        assert table.row_count == 5 and table.columns[next(iter(table.columns))].content_width == 31
        await pilot.pause(0.2)
        rendered = _count_renders(table, monkeypatch)
        await pilot.press("2")
        await pilot.pause(0.1)
        table.show(rows)  # the rest comes while the Runners tab is shown
        assert table.row_count == 20
        await pilot.press("1")
        await pilot.pause(0.3)
        assert rendered and {r for r, _ in rendered} <= set(range(5, 20))  # only the rows just added
        assert (15, 0) in rendered  # the long name, drawn in full

    run(screen_app, (140, 30), body)


def test_a_wider_row_or_another_width_renders_the_shown_rows_again(screen_app, monkeypatch):
    """The attack on the caches kept above: a row added below with a wider cell widens its
    column, and a terminal of another width pads every row anew; a shown row kept from before
    would be drawn misaligned or cut."""

    async def body(pilot):
        table = _table_only(pilot, monkeypatch)
        table.show([_row(i) for i in range(5)])
        await pilot.pause(0.2)
        rendered = _count_renders(table, monkeypatch)
        table.show([*(_row(i) for i in range(5)), _row(5, "a-much-longer-run-name-77 (v12)")])
        await pilot.pause(0.2)
        assert {0, 1, 2, 3, 4} <= {r for r, _ in rendered}  # the column widened: every shown row again
        rendered.clear()
        await pilot.resize_terminal(150, 30)
        await pilot.pause(0.3)
        assert {0, 1, 2, 3, 4} <= {r for r, _ in rendered}  # another width: every shown row again

    run(screen_app, (140, 30), body)


def test_a_table_fitted_to_a_narrow_terminal_gets_only_its_first_rows_first(screen_app, monkeypatch):
    """The Runs table starts with every column; a terminal too narrow for them builds it anew
    with fewer, and that build too adds only the first rows: the rest come with the next call
    (it had added the whole list, 500 rows, before the first frame: the start-up)."""
    rows = [_row(i) for i in range(20)]

    async def body(pilot):
        table = _table_only(pilot, monkeypatch)
        table.clear(columns=True)  # as on mount: every column, no rows
        table.shown_columns = [key for key, _ in table.COLUMNS]
        table._add_columns()
        table._rows = []
        table.show(rows, first=5)
        assert len(table.shown_columns) < len(table.COLUMNS)  # the fit did hide some
        assert table.row_count == 5
        table.show(rows)
        assert [k.value for k in table.rows] == [f"k{i}" for i in range(20)]

    run(screen_app, (80, 30), body)


def test_a_growing_log_asks_for_no_layout(screen_app, monkeypatch):
    """Lines added to the log view scroll it without reflowing the screen (its virtual size was a
    layout reactive: 20 reflows a second while following a fast job, which keys waited for);
    the view still follows the end and its scrollbar comes when the lines overflow it."""

    async def body(pilot):
        view = await _logs_of_done_job(pilot, 5)
        await pilot.pause(0.2)
        assert not view.show_vertical_scrollbar
        view.append([LogLine(f"line-{i}", "out") for i in range(5, 100)])  # overflows: the scrollbar comes
        await pilot.pause(0.2)
        assert view.show_vertical_scrollbar and view.scroll_y == view.max_scroll_y > 0
        layouts: list = []
        refresh = LogView.refresh
        monkeypatch.setattr(
            LogView,
            "refresh",
            lambda self, *a, **k: (layouts.append(k.get("layout", False)), refresh(self, *a, **k))[1],
        )
        for n in range(100, 200, 10):
            view.append([LogLine(f"line-{i}", "out") for i in range(n, n + 10)])
            await pilot.pause(0.05)
        await pilot.pause(0.2)
        assert layouts and not any(layouts)
        assert view.following and view.virtual_size.height == 200 and view.scroll_y == view.max_scroll_y
        assert view.vertical_scrollbar.window_virtual_size == 200  # the scrollbar knows the new length

    run(screen_app, (120, 30), body)


def test_back_to_metrics_reads_no_series_again(screen_app, monkeypatch):
    """Going back to Metrics with no new points builds no series (the key and the TabActivated it
    sends each built them all, for the chart to find them equal)."""
    from lanpool.app.views import overview

    built: list = []
    series = overview.metric_series
    monkeypatch.setattr(overview, "metric_series", lambda points: (built.append(1), series(points))[1])

    async def body(pilot):
        await _on_done_job(pilot)
        await pilot.press("4")
        await pilot.pause(0.2)
        assert built  # the first time: built
        before = len(built)
        await _logs_and_back_to_metrics(pilot, 3)
        assert len(built) == before
        pilot.app.select_job(pilot.app.job_id)  # the job selected again: a new reader, the same points
        await pilot.pause(0.1)
        assert len(built) == before
        assert "train" in str(pilot.app.query_one(MetricsChart)._wanted[1])

    run(screen_app, (120, 30), body)


def test_a_key_right_after_a_tab_switch_goes_to_the_tab_shown(screen_app):
    """A tab switch gives the focus after its frame (the restyle is off the key's path); a key that
    comes before that frame still goes to the tab shown: 3 then g is the log's top, not the Runs
    table's first row (the keys are posted together, as a fast typist's arrive)."""
    from textual import events

    async def body(pilot):
        await _on_done_job(pilot)
        app = pilot.app
        table = app.query_one(RunsTable)
        row = table.cursor_row
        assert row > 0
        app.post_message(events.Key("3", "3"))
        app.post_message(events.Key("g", "g"))
        await pilot.pause(0.3)
        assert app.active_tab() == "logs"
        assert app.focused is app.query_one(LogView)
        assert table.cursor_row == row and app.job_id == DONE_JOB  # g did not reach the Runs table
        assert not app.query_one(LogView).following  # it reached the log

    run(screen_app, (120, 30), body)


def test_the_first_switch_to_metrics_shows_its_title_then_the_plots(screen_app):
    """The first show of the chart draws its title at once, plotext's plots a frame later."""

    async def body(pilot):
        await _on_done_job(pilot)
        await pilot.press("4")
        await _until(pilot, lambda: bool(pilot.app.query(PlotextPlot)))
        await pilot.pause(0.1)
        chart = pilot.app.query_one(MetricsChart)
        assert not chart.query("#plots-title")  # the title's stand-in is gone
        assert pilot.app.focused is pilot.app.query_one("#metric-picker")
        assert "train" in str(chart._wanted[1])

    run(screen_app, (120, 30), body)
