"""The key bar at the bottom: Textual's Footer, without its leak.

Textual's Footer recomposes on every focus change (each tab switch) and binds each
new key's `compact` to itself with `data_bind`; the footer keeps a watcher per
key and never drops those of the keys it removed (Textual 8.2), so every tab
switch leaked its ~6 key widgets with their styles and caches: ~0.3 MB, and more
for every full collection to walk (scripts/bench-tui). Here each key takes the
footer's `compact` once instead (the app never changes it).
"""

from textual.app import ComposeResult
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey  # not exported; the class whose data_bind leaks


class Footer(TextualFooter):
    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if isinstance(widget, FooterKey) and widget._reactive_connect:  # data_bind(compact=Footer.compact)
                widget._reactive_connect = None
                widget.compact = self.compact
            yield widget
