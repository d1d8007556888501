"""The key bar at the bottom: Textual's Footer, without its leak, and narrow-fit.

Textual's Footer recomposes on every focus change (each tab switch) and binds each
new key's `compact` to itself with `data_bind`; the footer keeps a watcher per
key and never drops those of the keys it removed (Textual 8.2), so every tab
switch leaked its ~6 key widgets with their styles and caches: ~0.3 MB, and more
for every full collection to walk (scripts/bench-tui). Here each key takes the
footer's `compact` once instead (the app never changes it after a resize).

`narrow` (an 80-column terminal): compact keys, no tab keys 1-5 (the tab bar above
shows the tabs; `?` lists the keys) and no palette key, so `? Help` and `q Quit` fit.
"""

from textual.app import ComposeResult
from textual.reactive import reactive
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey  # not exported; the class whose data_bind leaks

TAB_KEYS = frozenset("12345")


class Footer(TextualFooter):
    narrow = reactive(False, recompose=True)

    def watch_narrow(self, narrow: bool) -> None:
        self.compact = narrow
        self.show_command_palette = not narrow

    def compose(self) -> ComposeResult:
        keys = 0
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                if self.narrow and widget.key in TAB_KEYS:
                    continue
                if widget._reactive_connect:  # data_bind(compact=Footer.compact)
                    widget._reactive_connect = None
                    widget.compact = self.compact
                keys += 1
            yield widget
        if self.narrow and keys:
            self.styles.grid_size_columns = keys
