"""Daily use without surprises (issue #35): the defects a user met in the TUI, each under a pilot
on the snapshot tests' fixed store: a search in a short log, the `e` key's visibility, the fit at
80x24 and after a resize, the command palette, the charts' ticks, the Run dialog's focus and
reuse, and forgetting offline runners at once."""

import asyncio

import pytest

pytest.importorskip("textual")

from lanpool.app.tui.dialogs.simple import FormDialog  # noqa: E402
from tests.integration import test_tui_snapshots as snaps  # noqa: E402
from tests.integration.test_tui_snapshots import _logs_of_done_job, _until  # noqa: E402

screen_app = pytest.fixture(snaps.screen_app.__wrapped__)  # the snapshots' fixed store and clock


def run(app, size, body):
    async def go():
        async with app.run_test(size=size, notifications=False) as pilot:
            await pilot.pause(0.2)
            await body(pilot)

    asyncio.run(go())


def screen_text(app) -> str:
    """The screen as a terminal shows it, one text line per row (the compositor's last frame)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def footer_text(app) -> str:
    return screen_text(app).splitlines()[-1]


async def settle(pilot, seconds: float = 0.3) -> None:
    await pilot.pause(seconds)


# -- the log's search ----------------------------------------------------------------------------


def test_search_in_a_log_shorter_than_half_the_window_finds_and_does_not_crash(screen_app):
    async def body(pilot):
        view = await _logs_of_done_job(pilot, 3)
        await pilot.press("slash")
        await _until(pilot, lambda: isinstance(pilot.app.screen, FormDialog))
        await pilot.press(*"line-1", "enter")
        await settle(pilot)
        assert pilot.app.is_running and view.search == "line-1"
        await pilot.press("n", "N")  # next / previous in the same short log
        assert pilot.app.is_running

    run(screen_app, (80, 24), body)
