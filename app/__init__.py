"""The lanpool controller: workflows, the local store, runner sessions, CLI and TUI.

Imports `protocol`, never `agent` (except the CLI entry that starts an agent),
and its core never imports textual.
"""

# Before anything imports asyncssh: its (and ifaddr's) library probes answered without child processes (app/startup/library_lookup.py).
from lanpool.app.startup import library_lookup as _library_lookup  # noqa: E402

_library_lookup.install()

# asyncssh's X.509 support, which lanpool never uses, left out (~25 ms of every SSH start: app/startup/left_out.py).
from lanpool.app.startup import left_out as _left_out  # noqa: E402

_left_out.install()
