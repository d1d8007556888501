"""The controller's SQLite store (WAL, numbered migrations)."""

from lanpool.app.store.store import ARTIFACTS_REFUSED, JobRow, RunRow, Store

__all__ = ["ARTIFACTS_REFUSED", "JobRow", "RunRow", "Store"]
