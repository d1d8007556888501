"""The event loop of lanpool's own `asyncio.run` calls: the agent's `serve`, the headless
verbs and the artifact range workers (never the Textual TUI, which runs its own loop).

uvloop where it is installed: a pull's controller and agent spend much of their time in
the event loop's socket and callback work (see docs/benchmarks.md, bench-downloads), which
uvloop does in C. The standard loop when it is missing, or when LANPOOL_EVENT_LOOP=asyncio
asks for it (a comparison, or a problem to tell apart).
"""

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

ENV = "LANPOOL_EVENT_LOOP"
_T = TypeVar("_T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop maker, or None for asyncio's own (asked for, or uvloop not installed)."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice == "asyncio":
        return None
    try:
        import uvloop  # imported here: only a verb that runs a loop pays for it
    except ImportError:
        if choice == "uvloop":
            log.warning("%s=uvloop but uvloop is not installed: using asyncio's loop", ENV)
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, _T]) -> _T:
    """asyncio.run(main) on the loop `loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
