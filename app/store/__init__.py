"""The controller's SQLite store (WAL, numbered migrations)."""

from app.store.store import JobRow, RunRow, Store

__all__ = ["JobRow", "RunRow", "Store"]
