"""Scrollbars that draw again only when what they show changed.

Textual redraws a scrollbar whenever its position changes, to the 1/8 of a cell. While
following a fast job the log's position changes with each flush (20 a second) but its
thumb stays where it is, and each redraw took 4-8 ms of the frame a key waited behind
(scripts/bench-tui, BENCH_TRACE). The thumb's cells are worked out here as
`ScrollBarRender.render_bar` does; the last lines are kept under them.
"""

from math import ceil

from textual.geometry import Region, Size
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.strip import Strip
from textual.widget import Widget

_EIGHTHS = 8  # render_bar's glyphs per cell (VERTICAL_BARS, HORIZONTAL_BARS)


def thumb(size: int, virtual_size: int, window_size: int, position: float) -> tuple[int, int] | None:
    """The thumb's first and last eighth of a cell, as render_bar draws it (None: no thumb)."""
    if not (window_size and size and virtual_size and size != virtual_size) or virtual_size == window_size:
        return None
    thumb_size = max(1, window_size / (virtual_size / size))
    start = int((size - thumb_size) * (position / (virtual_size - window_size)) * _EIGHTHS)
    return start, start + ceil(thumb_size * _EIGHTHS)


class MemoScrollBar(ScrollBar):
    """A ScrollBar keeping its last lines while its size, style and thumb cells stay the same."""

    def __init__(self, vertical: bool = True, name: str | None = None, *, thickness: int = 1) -> None:
        super().__init__(vertical, name, thickness=thickness)
        self._memo: tuple[object, list[Strip]] | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        bar = self.render()
        if not isinstance(bar, ScrollBarRender):  # another renderer: no idea what it depends on
            return super().render_lines(crop)
        size: Size = self.size
        length = size.height if self.vertical else size.width
        key = (
            crop,
            size,
            bar.vertical,
            bar.style,
            thumb(length, bar.virtual_size, bar.window_size, bar.position),
            self.styles.background,  # the widget's own styles (theme changes reach them)
        )
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1]
        lines = super().render_lines(crop)
        self._memo = (key, lines)
        return lines


def memo_scrollbar(widget: Widget, vertical: bool) -> ScrollBar:
    """A new MemoScrollBar for `widget`, made as Widget.vertical_scrollbar and
    horizontal_scrollbar make theirs (a scrolling widget's properties call this)."""
    thickness = widget.scrollbar_size_vertical if vertical else widget.scrollbar_size_horizontal
    bar = MemoScrollBar(vertical=vertical, name="vertical" if vertical else "horizontal", thickness=thickness)
    bar.display = False
    widget.app._start_widget(widget, bar)
    return bar
