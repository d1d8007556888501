"""The Runners tab: every runner and its state, the hint line under them, and the pool's keys
(p pair, a add, - remove one, F forget every OFFLINE one).

The pane owns whether its list is out of date (`changed`: the feeds heard news of a runner),
asks first where it forgets, and does the network part in workers, run by the app so that its
one handler turns a failure into a notification (a worker's StateChanged does not bubble).
After it added a runner it posts `Added`: the app has the feeds check the pool at once.
"""

import socket
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from textual.app import ComposeResult
from textual.message import Message
from textual.widgets import Label

from lanpool.app.controller import Controller, parse_address
from lanpool.app.tui.dialogs.simple import ConfirmDialog, Field, FormDialog
from lanpool.app.tui.widgets.panes import Pane
from lanpool.app.tui.widgets.tables import RunnersTable
from lanpool.app.tui.workers import run_on_app


class RunnersPane(Pane):
    @dataclass
    class Added(Message):
        """A runner was added by address: the pool's states are worth checking now."""

        name: str

    def __init__(self, ctl: Controller, clock: Callable[[], float]) -> None:
        super().__init__("Runners", id="runners")
        self.ctl = ctl
        self.clock = clock
        self.stale = True  # the list may be behind the pool: drawn again at the next refresh

    def compose(self) -> ComposeResult:
        yield RunnersTable(id="runners-table")
        yield Label("", id="runners-hint", classes="hint")

    @property
    def selected(self) -> str | None:
        return self.query_one(RunnersTable).selected_key

    def changed(self) -> None:
        """Something about a runner changed (a feed's news): the list is drawn again at the next tick."""
        self.stale = True

    def refresh_runners(self) -> None:
        self.stale = False
        views = self.ctl.pool.views()
        self.query_one(RunnersTable).show_runners(views, self.clock())
        live = sum(1 for v in views if v.state in ("LIVE", "BUSY"))
        gpus = sum(v.gpus_free for v in views if v.state in ("LIVE", "BUSY"))
        offline = "  F: forget offline" if any(v.state == "OFFLINE" for v in views) else ""
        hint = (
            f"{len(views)} runner(s), {live} answering, {gpus} GPU(s) free.  p: pair  a: add  -: remove{offline}"
            if views
            else "no runners yet: start `app agent serve` on a GPU machine of this LAN, "
            "or press a to add one by address"
        )
        label = self.query_one("#runners-hint", Label)
        if str(label.content) != hint:  # an update reflows the screen: only when it changed
            label.update(hint)

    # -- the pool's keys ---------------------------------------------------------------------

    def pair(self) -> None:
        def chosen(answer: dict[str, str] | None) -> None:
            if answer:
                run_on_app(self, partial(self._pair, answer["target"], answer["code"]), "runners")

        self.app.push_screen(
            FormDialog(
                "Pair with a runner: `app agent pair` on it shows a code",
                [Field("target", "runner name or HOST[:PORT]", self.selected or ""), Field("code", "pairing code")],
                ok="Pair",
            ),
            chosen,
        )

    async def _pair(self, target: str, code: str) -> None:
        name = await self.ctl.pool.pair(target, code, label=socket.gethostname())
        self.notify(f"paired with runner {name}")
        self.refresh_runners()

    def add_by_address(self) -> None:
        def chosen(answer: dict[str, str] | None) -> None:
            if answer:
                run_on_app(self, partial(self._add, answer["address"]), "runners")

        self.app.push_screen(
            FormDialog(
                "Add a runner by address (where multicast does not reach)",
                [Field("address", "HOST[:PORT]", placeholder=f"192.168.1.20:{Controller.DEFAULT_PORT}")],
                ok="Add",
            ),
            chosen,
        )

    async def _add(self, address: str) -> None:
        host, port = parse_address(address, Controller.DEFAULT_PORT)
        name = await self.ctl.add_runner(host, port)  # the user's act: trusted from now on
        self.post_message(self.Added(name))
        self.notify(f"added runner {name} at {host}:{port}")
        self.refresh_runners()

    def forget_selected(self) -> None:
        name = self.selected
        if not name:
            self.notify("select a runner in Runners first")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.ctl.pool.forget(name)
                self.notify(f"forgot runner {name}")
                self.refresh_runners()

        self.app.push_screen(ConfirmDialog(f"Forget runner {name} and its pinned host key?", "Remove"), answered)

    def forget_offline(self) -> None:
        """Forget every OFFLINE runner at once: those found by mDNS that went away pile up."""
        names = [v.name for v in self.ctl.pool.views() if v.state == "OFFLINE"]
        if not names:
            self.notify("no runner is OFFLINE")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                for name in names:
                    self.ctl.pool.forget(name)  # the same path as - on one runner
                self.notify(f"forgot {len(names)} offline runner(s)")
                self.refresh_runners()

        shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
        question = f"Forget {len(names)} OFFLINE runner(s) and their pinned host keys?\n{shown}"
        self.app.push_screen(ConfirmDialog(question, "Forget"), answered)
