"""Containers whose own lines are drawn once: the screen, the tabbed area, its switcher and panes.

Textual's compositor renders every visible widget's whole region, containers included,
though their children cover nearly all of it. A tab switch changes the layout, so the
next frame draws the screen anew: the screen, TabbedContent, its ContentSwitcher and the
shown TabPane each rendered ~36 blank lines again, 15-25 ms of a ~45 ms key -> frame on
a 2-core machine (scripts/bench-tui, /tmp profile of keys 3 and 4). Their lines depend
only on what the key below holds (size, background, border, padding, tint, the app's
line filters), so the same key gives back the lines it gave last time.
"""

from collections.abc import Callable
from typing import Any

from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import ContentSwitcher, TabbedContent, TabPane
from textual.widgets._tabbed_content import ContentTabs


def _blank_key(widget: Widget, crop: Region) -> tuple[Any, ...]:
    styles = widget.styles
    return (
        crop,
        widget.size,
        widget.background_colors,
        widget.rich_style,
        styles.border,
        styles.padding,
        styles.tint,
        styles.background_tint,
        styles.opacity,
        widget._border_title,
        widget._border_subtitle,
        tuple(widget.get_line_filters()),
    )


def memo_lines(
    widget: Widget, crop: Region, render: Callable[[Region], list[Strip]], state: tuple[Any, ...] = (), keep: int = 1
) -> list[Strip]:
    """`render(crop)`, or the lines it gave for the same key last time (one of the last `keep`
    keys); `state`: what else the widget's lines depend on."""
    key = (*_blank_key(widget, crop), *state)
    memo: dict[tuple[Any, ...], list[Strip]] | None = getattr(widget, "_lanpool_lines", None)
    if memo is None:
        memo = widget._lanpool_lines = {}  # type: ignore[attr-defined]
    lines = memo.get(key)
    if lines is None:
        lines = memo[key] = render(crop)
        while len(memo) > keep:
            del memo[next(iter(memo))]  # the oldest
    return lines


class AppScreen(Screen[None]):
    def render_lines(self, crop: Region) -> list[Strip]:
        return memo_lines(self, crop, super().render_lines)


class Pane(TabPane):
    def render_lines(self, crop: Region) -> list[Strip]:
        return memo_lines(self, crop, super().render_lines)


class Tabbed(TabbedContent):
    """TabbedContent whose own lines, and its ContentSwitcher's, are drawn once per key."""

    def render_lines(self, crop: Region) -> list[Strip]:
        return memo_lines(self, crop, super().render_lines)

    def on_mount(self) -> None:
        # TabbedContent.compose makes the switcher itself: its lines go through the memo here.
        switcher = self.get_child_by_type(ContentSwitcher)
        render = switcher.render_lines
        switcher.render_lines = lambda crop: memo_lines(switcher, crop, render)  # type: ignore[method-assign]
        # The tab bar's underline moves at once: its slide is 0.3 s of frames at 60 a second, and
        # the next key (3 then g) came while they still drew (scripts/bench-tui, BENCH_TRACE).
        tabs = self.get_child_by_type(ContentTabs)
        highlight = tabs._highlight_active
        tabs._highlight_active = lambda animate=True: highlight(animate=False)  # type: ignore[method-assign]
