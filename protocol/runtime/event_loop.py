"""The event loop of lanpool's own `asyncio.run` calls: the headless verbs (`ssh`/`exec`/
`ports` too), the artifact range workers and `agent serve` (never the Textual TUI, which
runs its own loop).

uvloop for the controller where it is installed: a pull spends much of its time in the
event loop's socket and callback work, which uvloop does in C (measured on a 2-core VM
under load, alternating: a 512 MiB one-stream pull 2.50 s vs 3.20 s, controller CPU
2.17 s vs 2.73 s). Not for `agent serve` unless asked: its job-output path (a pipe read
into the spool, then frames) stored a 1M-line flood at ~183k lines/s on uvloop against
~264-287k on asyncio's loop (scripts/bench, quiet 2-core VM, 2026-11-23), and its pulls
gained nothing measurable. Two differences of uvloop's that lanpool's code now
allows for: it runs a child's preexec_fn before it moves the child's stdio into place
(agent/shell/into_job.py takes the PTY through the slave's own descriptor), and it starts
reading an accepted connection after connection_made, so pause_reading there does not
hold early bytes back (app/shell/ports.py keeps them until the channel opens).
LANPOOL_EVENT_LOOP=asyncio turns uvloop off everywhere, =uvloop on everywhere (the agent
too; a comparison, or a problem to tell apart); tests/integration/test_job_shell.py and tests/integration/test_port_forward.py run on both loops.
"""

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

ENV = "LANPOOL_EVENT_LOOP"
_T = TypeVar("_T")


def loop_factory(prefer_uvloop: bool = True) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop maker, or None for asyncio's own: LANPOOL_EVENT_LOOP (asyncio|uvloop)
    decides, else `prefer_uvloop`; None too when uvloop is not installed."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice == "asyncio" or (choice != "uvloop" and not prefer_uvloop):
        return None
    try:
        import uvloop  # imported here: only a verb that runs a loop pays for it
    except ImportError:
        if choice == "uvloop":
            log.warning("%s=uvloop but uvloop is not installed: using asyncio's loop", ENV)
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, _T], prefer_uvloop: bool = True) -> _T:
    """asyncio.run(main) on the loop `loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory(prefer_uvloop)) as runner:
        return runner.run(main)
