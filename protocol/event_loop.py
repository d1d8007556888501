"""The event loop of lanpool's own `asyncio.run` calls that move artifacts: the headless
verbs (but the shell ones) and the artifact range workers; `agent serve` only when asked
(never the Textual TUI, which runs its own loop).

uvloop where it is installed: a pull's controller spends much of its time in the event
loop's socket and callback work, which uvloop does in C (measured, 512 MiB one-stream
pulls alternating on a 2-core VM at load 2.3: median 2.50 s vs 3.20 s, controller CPU
2.17 s vs 2.73 s). Not everywhere: under uvloop the agent's PTY
shells lost their connection and the controller's port forwards refused uvloop's
transports (tests/test_job_shell.py), so `ssh`/`exec`/`ports` and the agent stay on
Python's loop unless LANPOOL_EVENT_LOOP=uvloop; LANPOOL_EVENT_LOOP=asyncio turns uvloop
off everywhere (a comparison, or a problem to tell apart).
"""

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

ENV = "LANPOOL_EVENT_LOOP"
_T = TypeVar("_T")


def loop_factory(uvloop_ok: bool = True) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop maker, or None for asyncio's own: LANPOOL_EVENT_LOOP decides, else
    `uvloop_ok` (where uvloop is known to work); None too when uvloop is not installed."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice == "asyncio" or (choice != "uvloop" and not uvloop_ok):
        return None
    try:
        import uvloop  # imported here: only a verb that runs a loop pays for it
    except ImportError:
        if choice == "uvloop":
            log.warning("%s=uvloop but uvloop is not installed: using asyncio's loop", ENV)
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, _T], uvloop_ok: bool = True) -> _T:
    """asyncio.run(main) on the loop `loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory(uvloop_ok)) as runner:
        return runner.run(main)
