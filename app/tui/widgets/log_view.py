"""A job's log: a bounded window of lines, following live, paging back into the store.

Only the visible lines are rendered (Textual's line API), and at most
`max_lines` are held: older lines stay in SQLite and come back a page at a
time when the user scrolls to the top (the Logs pane, app/tui/panes/logs.py, answers `WantOlder`). A page
that comes in on a full window pushes out the newest lines: the view is then
detached from the live end (new lines wait in the store) until `G`, which asks
the pane for the log's end again (`WantNewest`).
"""

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Offset, Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollBar
from textual.strip import Strip

from lanpool.app.tui.widgets.scrollbars import memo_scrollbar
from lanpool.app.views.overview import LogLine
from lanpool.app.views.terminal_text import safe_line

_NODE_TAG = re.compile(r"^\[node \d+\] ")
STAMP_WIDTH = 13  # "14:03:07.125 "


def stamp(at: float | None) -> str:
    """A line's arrival time, local, to the millisecond; a dash when not known (an older agent)."""
    if not at:
        return "-".ljust(STAMP_WIDTH)
    return datetime.fromtimestamp(at).strftime("%H:%M:%S.%f")[:-3] + " "


class LogView(ScrollView, can_focus=True):
    BINDINGS = [
        Binding("end,G", "follow", "Follow", show=False),
        Binding("home,g", "top", "Top", show=False),
        Binding("n", "next_match", "Next match", show=False),
        Binding("N", "previous_match", "Previous match", show=False),
        Binding("t", "toggle_timestamps", "Timestamps", show=False),
    ]

    @dataclass
    class WantOlder(Message):
        """Scrolled to the top of the window: the pane may prepend older lines."""

        view: "LogView"

    @dataclass
    class WantNewest(Message):
        """G on a window that paged back past its newest lines: the pane reloads the log's end."""

        view: "LogView"

    def __init__(self, max_lines: int = 20_000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_lines = max_lines
        self.lines: list[LogLine] = []
        self.at_start = True  # no older lines in the store
        self.following = True
        self.detached = False  # paged back on a full window: the newest lines went back to the store
        self.search = ""
        self.timestamps = False  # t: each line's arrival time in front of it
        self._width = 0
        self._styles = {"err": Style(color="red"), "sys": Style(color="cyan", italic=True)}
        self._tag_style = Style(color="magenta", bold=True)
        self._stamp_style = Style(dim=True)
        self._match_style = Style(reverse=True, bold=True)
        self._asked_older = False
        self._pass: tuple[Offset, int, Style] | None = None  # set while render_lines runs

    # Scrollbars drawn again only when their thumb moves a cell's eighth (scrollbars.py).
    @property
    def vertical_scrollbar(self) -> ScrollBar:
        if self._vertical_scrollbar is None:
            self._vertical_scrollbar = memo_scrollbar(self, vertical=True)
        return self._vertical_scrollbar

    @property
    def horizontal_scrollbar(self) -> ScrollBar:
        if self._horizontal_scrollbar is None:
            self._horizontal_scrollbar = memo_scrollbar(self, vertical=False)
        return self._horizontal_scrollbar

    # -- content -------------------------------------------------------------------

    def set_lines(self, lines: list[LogLine], at_start: bool) -> None:
        self.lines = list(lines[-self.max_lines :])
        self.at_start = at_start and len(lines) <= self.max_lines
        self._width = max((cell_len(line.text) for line in self.lines[-2000:]), default=0)
        self._asked_older = False
        self._resize()
        self.following = True
        self.detached = False
        self._to_end(x_axis=True)

    def append(self, lines: list[LogLine]) -> None:
        if not lines or self.detached:  # detached: they are in the store, G brings them
            return
        self.lines.extend(lines)
        excess = len(self.lines) - self.max_lines
        if excess > 0:  # bounded memory: the oldest lines go back to the store
            del self.lines[:excess]
            self.at_start = False
            if not self.following:
                self.scroll_to(y=max(0, self.scroll_y - excess), animate=False, immediate=True)
        self._width = max(self._width, max(cell_len(line.text) for line in lines[-200:]))
        self._resize()
        if self.following:
            self._to_end(x_axis=False)  # a reader scrolled sideways stays there
        # A full window keeps its size and, following, its offset: nothing else says its lines changed.
        self.refresh()

    def _to_end(self, x_axis: bool) -> None:
        self.scroll_end(animate=False, immediate=True, x_axis=x_axis)
        # The lines that first overflow the view get their scrollbar at the next layout,
        # and a scroll before it is refused: scroll again then, or the view stays at the top.
        self.call_after_refresh(self._keep_end)

    def on_resize(self) -> None:
        # A log loaded while its tab was hidden had no height to scroll in: shown (or the
        # terminal resized) while following, the view goes to the end.
        if self.following:
            self._to_end(x_axis=False)

    def _keep_end(self) -> None:
        if self.following and self.scroll_y < self.max_scroll_y:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def prepend(self, lines: list[LogLine], at_start: bool) -> None:
        """Older lines from the store; the view keeps showing the same lines."""
        self._asked_older = False
        self.at_start = at_start
        if not lines:
            return
        room = max(0, self.max_lines - len(lines))
        if room < len(self.lines):  # the newest lines make room; new ones wait in the store until G
            self.detached = True
            self.following = False
        kept = self.lines[:room]
        self.lines = lines + kept
        self._resize()
        self.scroll_to(y=self.scroll_y + len(lines), animate=False, immediate=True)

    def _resize(self) -> None:
        stamps = STAMP_WIDTH if self.timestamps else 0
        size = Size(self._width + stamps + 1, len(self.lines))
        if size == self.virtual_size:
            return
        if not self.container_size:  # not laid out yet: the first layout takes the size
            self.virtual_size = size
            return
        # Widget.virtual_size is a layout reactive: each change reflowed the whole screen, 20 times a
        # second while following a fast job until the window is full (and again after each G), and a
        # key waited for those. A ScrollView's size in the layout does not depend on its virtual size:
        # only its scrollbars do, and those request a layout themselves when they appear or go.
        self.set_reactive(ScrollView.virtual_size, size)
        self._scroll_update(size)
        self.refresh()

    def action_toggle_timestamps(self) -> None:
        self.timestamps = not self.timestamps
        self._resize()
        self.refresh()

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)

    # -- scrolling -------------------------------------------------------------------

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self.following = new >= self.max_scroll_y and not self.detached
        if new <= 0:
            self._want_older()

    def _want_older(self) -> None:
        if not self.at_start and not self._asked_older and self.lines:
            self._asked_older = True
            self.post_message(self.WantOlder(self))

    def action_follow(self) -> None:
        if self.detached:
            self.post_message(self.WantNewest(self))
            return
        self.following = True
        # At once: a deferred scroll waited for a frame first (while following a fast job, the
        # flush's), and only the frame after it showed the end (scripts/bench-tui, BENCH_TRACE).
        self.scroll_end(animate=False, immediate=True)

    def action_top(self) -> None:
        self.following = False
        if self.scroll_y <= 0:  # already at the top (no scroll to notice): g asks for the next page
            self._want_older()
        self.scroll_home(animate=False, immediate=True)

    def find(self, text: str, forward: bool = True) -> bool:
        """Scroll to the next line holding `text` (case-insensitive) in the window."""
        self.search = text
        self.refresh()
        if not text or not self.lines:
            return False
        low = text.lower()
        # From the view's middle line; a log shorter than half the view has none there: its end.
        middle = min(int(self.scroll_y) + self.size.height // 2, len(self.lines))
        order = range(middle + 1, len(self.lines)) if forward else range(middle - 1, -1, -1)
        for y in order:
            if low in self.lines[y].text.lower():
                self.following = False
                self.scroll_to(y=max(0, y - self.size.height // 2), animate=False)
                return True
        return False

    def action_next_match(self) -> None:
        self.find(self.search, forward=True)

    def action_previous_match(self) -> None:
        self.find(self.search, forward=False)

    # -- rendering ----------------------------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        # What every line of this pass shares, computed once: the widget's style walks its
        # ancestors' backgrounds, and per line it was half of the log's render time while
        # following a fast job (scripts/bench-tui).
        self._pass = (self.scroll_offset, self.size.width, self.rich_style)
        try:
            return super().render_lines(crop)
        finally:
            self._pass = None

    def render_line(self, y: int) -> Strip:
        (scroll_x, scroll_y), width, base = self._pass or (self.scroll_offset, self.size.width, self.rich_style)
        index = scroll_y + y
        if index >= len(self.lines):
            return Strip.blank(width, base)
        line = self.lines[index]
        # Lines come terminal-safe from overview.decode_lines; checked again here because
        # whatever reaches a Segment goes to the terminal as is (no markup is parsed either).
        text = safe_line(line.text).expandtabs()
        style = base + self._styles[line.stream] if line.stream in self._styles else base
        segments = []
        if self.timestamps:
            segments.append(Segment(stamp(line.at), base + self._stamp_style))
        tag = _NODE_TAG.match(text)
        if tag:
            segments.append(Segment(tag.group(), base + self._tag_style))
            text = text[tag.end() :]
        segments += self._highlight(text, style)
        strip = Strip(segments).crop_extend(scroll_x, scroll_x + width, base)
        return strip.apply_offsets(scroll_x, index)

    def _highlight(self, text: str, style: Style) -> list[Segment]:
        if not self.search:
            return [Segment(text, style)]
        out, low, needle, at = [], text.lower(), self.search.lower(), 0
        while (hit := low.find(needle, at)) >= 0:
            out += [Segment(text[at:hit], style), Segment(text[hit : hit + len(needle)], style + self._match_style)]
            at = hit + len(needle)
        out.append(Segment(text[at:], style))
        return out
