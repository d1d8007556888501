"""The log's scrollbars draw again only when their thumb moves (scrollbars.py).
The in-process part (unit); the rest: tests/integration/test_tui_scrollbars.py."""

import itertools

import pytest

pytest.importorskip("textual")


from textual.scrollbar import ScrollBarRender  # noqa: E402

from lanpool.app.tui.widgets.scrollbars import thumb  # noqa: E402


def test_thumb_names_each_drawing_of_render_bar():
    """Same thumb cells, same segments; other thumb cells, other segments (what the memo relies on)."""
    for size in (1, 7, 35):
        drawn: dict = {}
        for virtual, window in itertools.product((1, 10, 35, 36, 200, 20_000), (0, 1, 10, 35)):
            window = window if window < virtual else 0  # as ScrollBar._render_bar passes it
            span = max(1, virtual - window)
            for position in {0, span / 3, span / 2, span - 1, span, span * 0.999}:
                position = int(position * 8) / 8  # ScrollBar.validate_position
                segments = ScrollBarRender.render_bar(size, virtual, window, position).segments
                drawn.setdefault(thumb(size, virtual, window, position), set()).add(repr(segments))
        assert all(len(shown) == 1 for shown in drawn.values()), "one thumb, two drawings"
        assert len({next(iter(shown)) for shown in drawn.values()}) == len(drawn), "two thumbs, one drawing"
