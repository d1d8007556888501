"""Big module trees imported with the cyclic GC paused, then frozen.

What an import allocates (classes, functions, module dicts) is never garbage, yet the
GC walks it: importing the SSH stack set off ~45 collections, ~8-15 ms of a short CLI call
on a 2-core machine (gc.callbacks, scripts/bench). Frozen afterwards, later collections
skip it too. Only a module not yet imported pays: a long-running process (the TUI, the
agent) does not freeze again on each call, which would also keep whatever cyclic garbage
was alive at that moment.
"""

import gc
import importlib
import sys
from types import ModuleType


def import_paused(name: str) -> ModuleType:
    """`importlib.import_module(name)`, with the GC paused and then frozen if it was not loaded."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    enabled = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(name)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
