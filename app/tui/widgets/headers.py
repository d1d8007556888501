"""A pane's one-line header (.header in lanpool.tcss): set without a layout."""

from textual.widgets import Label


def set_header(label: Label, text: str) -> None:
    """A one-line header's text (.header: one row, full width, so no layout): a Label's update
    reflows the whole screen, and the Logs tab's header was set every second (its duration),
    a layout that a key pressed then waited for (scripts/bench-tui)."""
    if str(label.content) != text:
        label.update(text, layout=False)
