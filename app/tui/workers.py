"""Work a pane starts, run in a worker on the app.

On the app, not on the pane: a worker's StateChanged does not bubble, and the app's one handler
(LanpoolApp.on_worker_state_changed) turns a failure into a notification. `work` is called when
the worker starts (a partial of a coroutine function), so an exclusive worker cancelled before
it started leaves no coroutine that was never awaited.
"""

from collections.abc import Callable, Coroutine
from typing import Any

from textual.dom import DOMNode
from textual.worker import Worker


def run_on_app(
    node: DOMNode, work: Callable[[], Coroutine[Any, Any, None]], group: str, exclusive: bool = False
) -> Worker[None]:
    worker: Worker[None] = node.app.run_worker(work, group=group, exclusive=exclusive, exit_on_error=False)
    return worker
