"""Modal screens of the TUI: each returns its answer through `dismiss`."""
