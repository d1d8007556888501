"""Widgets of the TUI: they show what they are given and post messages; no I/O."""
