"""What the front ends show, read from the store: runs and logs, log selection, display text, terminal-safe job output."""
