"""The lanpool controller: workflows, the local store, runner sessions, CLI and TUI.

Imports `protocol`, never `agent` (except the CLI entry that starts an agent),
and its core never imports textual.
"""

__version__ = "0.1.0"
