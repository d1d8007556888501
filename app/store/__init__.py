"""The controller's SQLite store (WAL, numbered migrations)."""

from app.store.store import ARTIFACTS_REFUSED, JobRow, RunRow, Store

__all__ = ["ARTIFACTS_REFUSED", "JobRow", "RunRow", "Store"]
