"""The containers that draw their own (blank) lines once (app/tui/widgets/panes.py): a tab
switch renders them from the memo, and a change of what their lines show draws them anew."""

import asyncio

from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widgets import ContentSwitcher, Label

from lanpool.app.tui.widgets.panes import AppScreen, Pane, Tabbed, memo_lines


class Panes(App[None]):
    def get_default_screen(self) -> AppScreen:
        return AppScreen(id="_default")

    def compose(self) -> ComposeResult:
        with Tabbed(initial="a", id="tabs"):
            with Pane("A", id="a"):
                yield Label("first pane")
            with Pane("B", id="b"):
                yield Label("second pane")


def counting(widget):
    """Counts the renders that reach Textual (memo misses) for `widget`."""
    calls = []
    render = widget.render_lines
    vars(widget).pop("_lanpool_lines", None)  # what the frames so far left in the memo

    def counted(crop: Region):
        calls.append(crop)
        return render(crop)

    return calls, lambda crop: memo_lines(widget, crop, counted)


def test_same_size_and_style_render_once_a_changed_background_again():
    async def main() -> None:
        app = Panes()
        async with app.run_test(size=(60, 12)):
            pane = app.query_one("#a", Pane)
            calls, render = counting(pane)
            crop = Region(0, 0, pane.size.width, pane.size.height)
            first = render(crop)
            assert render(crop) is first and len(calls) == 1
            pane.styles.background = "red"  # what its lines show changed: drawn anew (no frame between)
            again = render(crop)
            assert len(calls) == 2 and again is not first
            assert again != first
            # another crop (a resize) is another key
            render(Region(0, 0, crop.width, crop.height - 1))
            assert len(calls) == 3

    asyncio.run(main())


def test_tab_switches_show_the_panes_and_the_switcher_goes_through_the_memo():
    async def main() -> None:
        app = Panes()
        async with app.run_test(size=(60, 12)) as pilot:
            tabs = app.query_one("#tabs", Tabbed)
            switcher = tabs.get_child_by_type(ContentSwitcher)
            assert "render_lines" in vars(switcher)  # Tabbed's on_mount put the memo in front
            for tab, text in [("b", "second pane"), ("a", "first pane"), ("b", "second pane")]:
                tabs.active = tab
                await pilot.pause()
                shown = app.query_one(f"#{tab} Label", Label)
                assert shown.region.height == 1 and str(shown.content) == text
                hidden = app.query_one(f"#{'a' if tab == 'b' else 'b'}", Pane)
                assert not hidden.display
                assert app.screen._compositor.render_update(full=True)  # a full frame still draws
            assert hasattr(switcher, "_lanpool_lines") and hasattr(app.screen, "_lanpool_lines")

    asyncio.run(main())
