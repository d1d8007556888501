"""The log's scrollbars draw again only when their thumb moves (scrollbars.py).
The part with real agents and the CLI (integration); the rest: tests/unit/test_tui_scrollbars.py."""

import asyncio

import pytest

pytest.importorskip("textual")


from textual._styles_cache import StylesCache  # noqa: E402

from lanpool.app.tui.widgets.log_view import LogView  # noqa: E402
from lanpool.app.tui.widgets.scrollbars import MemoScrollBar  # noqa: E402
from lanpool.app.views.overview import LogLine  # noqa: E402
from tests.integration import test_tui_snapshots as snaps  # noqa: E402
from tests.integration.test_tui_snapshots import _logs_of_done_job

screen_app = pytest.fixture(snaps.screen_app.__wrapped__)


def test_following_log_draws_its_scrollbar_only_when_the_thumb_moves(screen_app, monkeypatch):
    drawn: list = []
    render = StylesCache.render_widget
    monkeypatch.setattr(
        StylesCache,
        "render_widget",
        lambda cache, widget, crop: (drawn.append(type(widget)), render(cache, widget, crop))[1],
    )

    async def body(pilot):
        view = await _logs_of_done_job(pilot, 20_000)
        await pilot.pause(0.3)
        bar = view.vertical_scrollbar
        assert isinstance(bar, MemoScrollBar) and view.show_vertical_scrollbar and view.following
        drawn.clear()
        for n in range(20_000, 20_100, 10):  # a full window, following: the thumb stays at the end
            view.append([LogLine(f"line-{i}", "out") for i in range(n, n + 10)])
            await pilot.pause(0.05)
        await pilot.pause(0.2)
        assert LogView in drawn, "the log itself drew its new lines"
        assert MemoScrollBar not in drawn
        column = bar.region.x
        at_end = [bool(pilot.app.screen.get_style_at(column, y).reverse) for y in (bar.region.y, bar.region.bottom - 1)]
        assert at_end == [False, True]  # the thumb (reverse cells) at the bottom
        await pilot.press("g")  # the thumb moves: drawn again, at the top
        await pilot.pause(0.3)
        assert MemoScrollBar in drawn
        at_top = [bool(pilot.app.screen.get_style_at(column, y).reverse) for y in (bar.region.y, bar.region.bottom - 1)]
        assert at_top == [True, False]

    async def go():
        async with screen_app.run_test(size=(120, 30), notifications=False) as pilot:
            await pilot.pause(0.2)
            await body(pilot)

    asyncio.run(go())
