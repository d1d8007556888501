"""The key bar at the bottom: Textual's Footer, without its leak, and narrow-fit.

Textual's Footer recomposes on every focus change (each tab switch) and binds each
new key's `compact` to itself with `data_bind`; the footer keeps a watcher per
key and never drops those of the keys it removed (Textual 8.2), so every tab
switch leaked its ~6 key widgets with their styles and caches: ~0.3 MB, and more
for every full collection to walk (scripts/bench-tui). Here each key takes the
footer's `compact` once instead (the app never changes it after a resize).

It also recomposes only when the keys it shows change: Textual's rebuilds it on
every focus change, and switching tabs moves the focus between widgets whose
shown keys are the same (the tables' j/k/g/G are hidden), so each switch paid
for a new footer (~a quarter of the CPU of going back to the Runs tab).

`narrow` (an 80-column terminal): compact keys, no tab keys 1-5 (the tab bar above
shows the tabs; `?` lists the keys) and no palette key, so `? Help` and `q Quit` fit.
The footer sets it from its own width at each resize: the app's Resize handler saw only
the first size, so a terminal resized later kept the other form until a restart.
"""

from collections.abc import Hashable

from textual import events
from textual.app import ComposeResult
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey  # not exported; the class whose data_bind leaks

TAB_KEYS = frozenset("12345")
NARROW_BELOW = 120  # columns: under this, the short form


class Footer(TextualFooter):
    narrow = reactive(False, recompose=True)
    _shown: Hashable = None  # what the last compose showed: the keys, their state, the fit

    def _keys_shown(self) -> Hashable:
        palette = self.app.COMMAND_PALETTE_BINDING
        return (
            self.narrow,
            self.compact,
            self.show_command_palette,
            tuple(
                (b.key, b.description, b.action, enabled, tooltip)
                for _, b, enabled, tooltip in self.screen.active_bindings.values()
                if b.show or b.key == palette
            ),
        )

    def bindings_changed(self, screen: Screen[object]) -> None:
        if self._bindings_ready and self.is_attached and screen is self.screen and self._keys_shown() == self._shown:
            return  # the same keys: nothing to rebuild
        super().bindings_changed(screen)

    def on_resize(self, event: events.Resize) -> None:
        self.narrow = event.size.width < NARROW_BELOW

    def watch_narrow(self, narrow: bool) -> None:
        self.compact = narrow
        self.show_command_palette = not narrow

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._shown = self._keys_shown()
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
