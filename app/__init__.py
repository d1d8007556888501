"""The lanpool controller: workflows, the local store, runner sessions, CLI and TUI.

Imports `protocol`, never `agent` (except the CLI entry that starts an agent),
and its core never imports textual.
"""

__version__ = "0.1.0"

# Before anything imports asyncssh: its (and ifaddr's) library probes answered without child processes (app/library_lookup.py).
from app import library_lookup as _library_lookup  # noqa: E402

_library_lookup.install()
