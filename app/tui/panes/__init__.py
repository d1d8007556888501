"""The TUI's tabs, one component each: a pane owns its state, reads through the Controller, and
tells the app what happened with messages (app/tui/app.py wires them)."""
